"""Tables of the protocol's seed runs (scripts/seed_runs.sh; benchmarks/PROTOCOL.md).

    python scripts/seed_report.py RUNS_DIR [--bootstrap] [--output REPORT.md] [--json RESULT.json [--keep]]

Reads RUNS_DIR/eval-s{SEED}-{LANG}[-{VARIANTS}].json (the test sets, read once by
`seed_runs.sh evaluate`; a student evaluated later on its own has a file of its own),
{V}-s{SEED}-{LANG}.guard.json and .timing.json, and prints markdown: per seed and
language the raw-text F1 (gold-token F1 in brackets) of the teacher and each student, the
guard's figures and verdict, and stage 2's wall time and peak RSS. Then the mean and
standard deviation over the seeds found. With --bootstrap it also runs the paired
bootstrap (2,000 resamples of the per-sentence raw-text counts) of each student against
the teacher and against self-training (ST), and of W against warm-started self-training
(ST-W) and against W1 (W from the seed's teacher alone, where W learns from an
ensemble's labels), writing RUNS_DIR/bootstrap-s{SEED}-{LANG}-{A}-vs-{B}.json.

Last, where P runs exist, the protocol's choice of the default stage 2 between P and W
(benchmarks/PROTOCOL.md, rule 3), from the guard files alone (no test score):
more guard passes over the runs wins; on a tie the higher mean en/dev raw-text F1 of
`model-last`; within 0.5 F1, P. It says which runs are still missing. --output writes the markdown there instead of
printing it.

--json RESULT.json writes the measurements as a results file of benchmarks/results/
(`tables.py` builds BENCHMARKS.md's tables from it): "runs" (per seed, language and
system the raw-text and gold-token scores, the score temperature and ECE of
{V}-s{SEED}-{LANG}.calibration.json, the test set's ECE and precision at score >= 0.9,
the guard's figures, stage 2's wall time and peak RSS) and "bootstraps" (every
bootstrap-*.json). The file's other entries (claim, settings, command, ...) are kept
where it exists already, so they are written once by hand. With --keep, the file's runs
and bootstraps that RUNS_DIR has no files for are kept too (runs of an earlier window
whose models are gone); those RUNS_DIR has replace them.
"""
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from statistics import mean, stdev

#: each student's bootstrap comparisons: the teacher, self-training, and for W its fair
#: baselines, self-training from the same warm start and W1 (W from the seed's teacher
#: alone, where W learns from an ensemble's labels)
COMPARISONS = {"P": ("teacher", "ST"), "W": ("teacher", "ST", "ST-W", "W1"), "ST": ("teacher",),
               "ST-W": ("teacher", "ST"), "W1": ("teacher",)}


@lru_cache(maxsize=None)
def load(path: Path):
    """A JSON file's content, or None where it does not exist (read once per path)."""
    return json.loads(path.read_text()) if path.exists() else None


def choose_default(runs: Path, seeds=(0, 1, 2), langs=("de", "es")):
    """The protocol's rule 3. runs: the folder of {V}-s{SEED}-{LANG}.guard.json.
    Returns (winner or None while runs are missing, lines of explanation)."""
    lines, stats = [], {}
    for v in ("P", "W"):
        guards = [load(runs / f"{v}-s{s}-{lang}.guard.json") for s in seeds for lang in langs]
        found = [g for g in guards if g is not None]
        passes = sum(bool(g["trusted"]) for g in found)
        dev = mean(g["student_dev_f"] for g in found) if found else float("nan")
        stats[v] = (len(found), passes, dev)
        lines.append(f"- {v}: {len(found)} of {len(guards)} runs, {passes} pass the guard, "
                     f"mean en/dev raw-text F1 of model-last {dev:.2f}")
    if any(n < len(seeds) * len(langs) for n, _, _ in stats.values()):
        return None, lines + ["- not decided: runs are missing"]
    (_, pass_p, dev_p), (_, pass_w, dev_w) = stats["P"], stats["W"]
    if pass_p != pass_w:
        winner, why = ("P", "more guard passes") if pass_p > pass_w else ("W", "more guard passes")
    elif dev_w - dev_p > 0.5:
        winner, why = "W", f"equal guard passes, en/dev {dev_w - dev_p:+.2f} F1 over P (more than 0.5)"
    else:
        winner, why = "P", f"equal guard passes, W within 0.5 F1 of P or below ({dev_w - dev_p:+.2f})"
    return winner, lines + [f"- **default: {winner}** ({why})"]


def _eval_files(runs: Path) -> list:
    return sorted(p for p in runs.glob("eval-s*-*.json") if not p.name.endswith(".per_sentence.json"))


def _round(x, digits: int = 4):
    return None if x is None else round(float(x), digits)


def run_record(runs: Path, seed: int, lang: str, name: str, result: dict) -> dict:
    """One system's measurements: its evaluation `result` (of evaluate's JSON), and its
    calibration, guard and timing files where they exist."""
    raw = result["raw_text"]
    record = {"system": name, "seed": seed, "lang": lang, "raw_text_f1": _round(100 * raw["ents_f"]),
              "gold_tokens_f1": _round(100 * result["ents_f"]), "raw_text_p": _round(100 * raw["ents_p"]),
              "raw_text_r": _round(100 * raw["ents_r"])}
    test_cal = raw.get("calibration")
    if test_cal:
        record["test_scores"] = {"entities": test_cal["n"], "ece": _round(test_cal["ece"]),
                                 "precision_at_0.9": _round(test_cal["precision_at_0.9"]),
                                 "count_at_0.9": test_cal["count_at_0.9"],
                                 "precision_at_0.5": _round(test_cal["precision_at_0.5"]),
                                 "count_at_0.5": test_cal["count_at_0.5"]}
    # a teacher's temperature is fitted once for all its target languages: teacher-s{SEED}.calibration.json
    cal = load(runs / f"{name}-s{seed}-{lang}.calibration.json") or load(runs / f"{name}-s{seed}.calibration.json")
    if cal is not None:
        record["temperature"] = {"dev": Path(cal["dev"]).name, "dev_lang": cal.get("lang"),
                                 "sentences": cal.get("sentences"), "temperature": _round(cal["temperature"]),
                                 "slope": _round(cal.get("slope", 1.0)), "offset": _round(cal.get("offset", 0.0)),
                                 "dev_ece_before": _round(cal["before"]["ece"]),
                                 "dev_ece_after": _round(cal["after"]["ece"])}
    guard = load(runs / f"{name}-s{seed}-{lang}.guard.json")
    if guard is not None:
        record["guard"] = {"student_dev_f1": _round(guard["student_dev_f"]), "teacher_dev_f1": _round(guard["teacher_dev_f"]),
                           "agreement_f1": _round(guard["agreement_f"]),
                           "max_class_cosine": _round(guard["student_max_class_cosine"]),
                           "target_entity_ratio": _round(guard.get("target_entity_ratio")),
                           "target_label_shift": _round(guard.get("target_label_shift")),
                           "trusted": bool(guard["trusted"])}
    timing = load(runs / f"{name}-s{seed}-{lang}.timing.json")
    if timing is not None:
        record["stage2"] = {"wall_s": round(timing["wall_s"], 1), "peak_rss_gb": round(timing["peak_rss_gb"], 2)}
    return record


def bootstrap_record(path: Path) -> dict:
    """bootstrap-s{SEED}-{LANG}-{A}-vs-{B}.json as a results entry (A, B may hold '-')."""
    seed, lang, pair = path.stem[len("bootstrap-s"):].split("-", 2)
    a, b = pair.split("-vs-")
    x = load(path)
    return {"seed": int(seed), "lang": lang, "a": a, "b": b, "sentences": x["sentences"], "samples": x["samples"],
            "difference": x["difference"], "ci95": x["difference_95ci"], "share_a_better": x[f"share_{a}_better"]}


def _merged(new: list, old: list, key) -> list:
    """NEW, and the entries of OLD whose key NEW does not have."""
    seen = {key(r) for r in new}
    return new + [r for r in old if key(r) not in seen]


def write_results(runs: Path, out: Path, keep: bool = False) -> dict:
    """The measurements of RUNS as the results file OUT (keeping OUT's hand-written entries;
    with KEEP, also its runs and bootstraps that RUNS has no files for)."""
    result = json.loads(out.read_text(encoding="utf8")) if out.exists() else {}
    records = []
    for path in _eval_files(runs):
        seed, lang = int(path.stem.split("-")[1][1:]), path.stem.split("-")[2]
        for name, r in load(path)["results"].items():
            records.append(run_record(runs, seed, lang, name, r))
    boots = [bootstrap_record(p) for p in sorted(runs.glob("bootstrap-s*-*.json"))]
    if keep:
        records = _merged(records, result.get("runs", []), lambda r: (r["seed"], r["lang"], r["system"]))
        boots = _merged(boots, result.get("bootstraps", []), lambda b: (b["seed"], b["lang"], b["a"], b["b"]))
    result["seeds"] = sorted({r["seed"] for r in records})
    result["langs"] = sorted({r["lang"] for r in records})
    result["runs"] = sorted(records, key=lambda r: (r["lang"], r["seed"], r["system"]))
    result["bootstraps"] = sorted(boots, key=lambda b: (b["seed"], b["lang"], b["a"], b["b"]))
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf8")
    return result


def main(argv) -> None:
    if "--json" in argv:
        i = argv.index("--json")
        json_out, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2:]
        keep = "--keep" in argv
        argv = [a for a in argv if a != "--keep"]
        main(argv)
        write_results(Path(argv[0]), json_out, keep=keep)
        return
    runs = Path(argv[0])
    bootstrap = "--bootstrap" in argv
    if "--output" in argv:
        out = Path(argv[argv.index("--output") + 1])
        with out.open("w", encoding="utf8") as handle:
            sys.stdout, saved = handle, sys.stdout
            try:
                main([a for i, a in enumerate(argv) if a != "--output" and argv[i - 1] != "--output"])
            finally:
                sys.stdout = saved
        return
    evals = _eval_files(runs)
    per_system, where = {}, {}
    print("| seed | lang | system | raw-text F1 (gold tokens) | en/dev raw F1 | agreement | max class cos | guard "
          "| stage-2 wall min | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in evals:
        seed, lang = path.stem.split("-")[1][1:], path.stem.split("-")[2]
        results = load(path)["results"]
        for name in results:
            where.setdefault((seed, lang), {})[name] = path
        for name, r in results.items():
            raw, gold = 100 * r["raw_text"]["ents_f"], 100 * r["ents_f"]
            per_system.setdefault((lang, name), []).append((raw, gold))
            guard = load(runs / f"{name}-s{seed}-{lang}.guard.json")
            timing = load(runs / f"{name}-s{seed}-{lang}.timing.json")
            g = ("-",) * 4 if guard is None else (
                f"{guard['student_dev_f']:.2f} (teacher {guard['teacher_dev_f']:.2f})", f"{guard['agreement_f']:.2f}",
                f"{guard['student_max_class_cosine']:.3f}", "trusted" if guard["trusted"] else "NOT trusted")
            t = ("-", "-") if timing is None else (f"{timing['wall_s'] / 60:.1f}", f"{timing['peak_rss_gb']:.2f}")
            print(f"| {seed} | {lang} | {name} | {raw:.2f} ({gold:.2f}) | " + " | ".join(g) + " | " + " | ".join(t) + " |")
    if bootstrap:
        for (seed, lang), paths in where.items():
            for name in (n for n in COMPARISONS if n in paths):
                for other in (o for o in COMPARISONS[name] if o in paths):
                    out = runs / f"bootstrap-s{seed}-{lang}-{name}-vs-{other}.json"
                    subprocess.run([sys.executable, str(Path(__file__).parent / "paired_bootstrap.py"), str(out),
                                    "--eval", str(paths[name]), name, other, "--eval-b", str(paths[other])],
                                   check=True, capture_output=True)
    print("\n| lang | system | seeds | raw-text F1 mean (sd) | gold-token F1 mean (sd) |")
    print("|---|---|---|---|---|")
    for (lang, name), rows in sorted(per_system.items()):
        raw, gold = [r[0] for r in rows], [r[1] for r in rows]

        def sd(xs: list) -> str:
            return f"{stdev(xs):.2f}" if len(xs) > 1 else "-"

        print(f"| {lang} | {name} | {len(rows)} | {mean(raw):.2f} ({sd(raw)}) | {mean(gold):.2f} ({sd(gold)}) |")
    boots = sorted(runs.glob("bootstrap-s*-*.json"))
    if boots:
        print("\n| run | A - B (raw-text F1) | 95% interval | share of resamples A > B |")
        print("|---|---|---|---|")
        for path in boots:
            b = load(path)
            share = next(v for k, v in b.items() if k.startswith("share_"))
            print(f"| {path.stem[len('bootstrap-'):]} | {b['difference']:+.2f} | "
                  f"[{b['difference_95ci'][0]:+.2f}, {b['difference_95ci'][1]:+.2f}] | {share:.3f} |")
    if any(runs.glob("P-s*-*.guard.json")):
        print("\nThe default stage 2 by the protocol's rule 3 (guard files only):\n")
        print("\n".join(choose_default(runs)[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
