"""The plots of BENCHMARKS.md, drawn from benchmarks/results/ alone.

    python benchmarks/scripts/plots.py [OUT_DIR]

OUT_DIR defaults to benchmarks/plots/, where the committed images live. Each plot is a
small PNG (figsize of a few inches, dpi 100) named in PLOTS; BENCHMARKS.md links them.

- gain.png: the shipped student's raw-text F1 minus its teacher's, per language and seed,
  with the paired bootstrap's 95% interval, and the mean over the seeds.
- calibration.png: expected calibration error before and after the score temperature,
  per language and model. The results files keep ECE, not the per-bin counts, so this is
  ECE before/after rather than a reliability diagram.
- speed.png: prediction speed (words/s) by precision and threads on the one CPU kind
  measured, and what the length-sorted sub-batches and bf16 add over the plain fp32 pipeline.
"""
import sys
from pathlib import Path
from statistics import mean

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from results_io import ROOT, bootstrap_of, load_result  # noqa: E402

OUT = ROOT / "benchmarks" / "plots"
DPI = 100
LANGS = {"de": "German (de/test)", "es": "Spanish (es/test)"}
COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44")


def _save(fig, out: Path, name: str) -> Path:
    path = out / name
    fig.tight_layout()
    # no time stamp in the file: the same results give the same bytes on one machine
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def plot_gain(out: Path) -> Path:
    """Student minus teacher per seed (95% interval) and the mean over the seeds."""
    result = load_result("three-seed-ensemble")
    student = result["default"]
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    for i, lang in enumerate(result["langs"]):
        boots = [bootstrap_of(result, s, lang, student, "teacher") for s in result["seeds"]]
        for j, (seed, b) in enumerate(zip(result["seeds"], boots)):
            x = i + (j - (len(boots) - 1) / 2) * 0.18
            lo, hi = b["ci95"]
            ax.errorbar(x, b["difference"], yerr=[[b["difference"] - lo], [hi - b["difference"]]], fmt="o",
                        color=COLORS[j % len(COLORS)], capsize=3, label=f"seed {seed}" if i == 0 else None)
        m = mean(b["difference"] for b in boots)
        ax.hlines(m, i - 0.35, i + 0.35, color="black", linewidth=2, label="mean of the seeds" if i == 0 else None)
        ax.annotate(f"{m:+.2f}", (i + 0.37, m), va="center", fontsize=8)
    ax.axhline(0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(result["langs"])), [LANGS.get(lang, lang) for lang in result["langs"]])
    ax.set_xlim(-0.6, len(result["langs"]) - 0.4)
    ax.set_ylabel("student - teacher, raw-text F1")
    ax.set_title("Shipped student over its teacher (95% paired bootstrap)", fontsize=10)
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    return _save(fig, out, "gain.png")


def _ece_groups(result: dict) -> list:
    """(label, es/dev ECE at T = 1, es/dev ECE at the stored T, test ECE) per language and
    model, each a list over the seeds."""
    groups = []
    for lang in result["langs"]:
        for system, name in (("teacher", "teacher"), (result["default"], "student")):
            runs = [r for r in result["runs"] if r["system"] == system and r["lang"] == lang]
            if runs:
                groups.append((f"{lang} {name}", [r["temperature"]["dev_ece_before"] for r in runs],
                               [r["temperature"]["dev_ece_after"] for r in runs], [r["test_scores"]["ece"] for r in runs]))
    return groups


def plot_calibration(out: Path) -> Path:
    """ECE before (T = 1) and after the stored temperature, on es/dev and on each test set:
    the default (German students at the given T = 2.0) beside the one-teacher runs whose
    German students were fitted on es/dev."""
    panels = (("three-seed-ensemble", "default: German students at T = 2.0"),
              ("three-seed-development-language", "one teacher: every T fitted on es/dev"))
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
    kinds = ("es/dev, T = 1", "es/dev, stored T", "test set, stored T")
    for ax, (claim, title) in zip(axes, panels):
        groups = _ece_groups(load_result(claim))
        for g, (_, *values) in enumerate(groups):
            for k, seeds in enumerate(values):
                x = g + (k - 1) * 0.27
                ax.bar(x, mean(seeds), width=0.25, color=COLORS[k], label=kinds[k] if g == 0 else None)
                ax.plot([x] * len(seeds), seeds, "k.", markersize=3)
        ax.set_xticks(range(len(groups)), [label for label, *_ in groups], fontsize=8)
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("ECE (10 bins; dots: seeds)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Calibration error before and after the score temperature", fontsize=10)
    return _save(fig, out, "calibration.png")


def plot_speed(out: Path) -> Path:
    """Words per second of the packaged pipeline by precision and threads, and the
    one-thread gains of sub-batching and bf16 over the plain fp32 pipeline."""
    result = load_result("bf16-precision")
    measured = result["measurements"]
    speed = measured["packaged"]["words_per_second"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    threads = list(speed)
    series = ("fp32 nlp.pipe", "bf16 nlp.pipe", "fp32 annotate (length-sorted)", "bf16 annotate (length-sorted)")
    for k, name in enumerate(series):
        xs = [t + (k - 1.5) * 0.2 for t in range(len(threads))]
        values = [speed[t][name] for t in threads]
        bars = left.bar(xs, values, width=0.19, color=COLORS[k], label=name.replace(" (length-sorted)", ""))
        left.bar_label(bars, fmt="%.0f", fontsize=6)
    left.set_xticks(range(len(threads)), threads)
    left.set_ylabel("words/s (400 German sentences)")
    left.set_title("packaged pipeline, fp32 vs bf16", fontsize=9)
    left.legend(fontsize=7, loc="upper left")
    base = measured["baseline_1_thread"]
    names = list(base)
    bars = right.barh(range(len(names)), [base[n] for n in names], color=[COLORS[0] if n.startswith("fp32") else COLORS[1] for n in names])
    right.bar_label(bars, labels=[f"{base[n] / base[names[0]]:.2f}x" for n in names], fontsize=7)
    right.set_yticks(range(len(names)), names, fontsize=7)
    right.set_xlabel("words/s, 1 thread, nlp.pipe")
    right.set_xlim(0, max(base.values()) * 1.25)
    right.set_title("over the plain fp32 pipeline", fontsize=9)
    fig.suptitle("Prediction speed on the 2-core AMD EPYC Zen 5 (AVX512-BF16, no AMX)", fontsize=10)
    return _save(fig, out, "speed.png")


PLOTS = (plot_gain, plot_calibration, plot_speed)


def main(argv: list) -> int:
    out = Path(argv[0]) if argv else OUT
    out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        path = plot(out)
        print(f"{path} ({path.stat().st_size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
