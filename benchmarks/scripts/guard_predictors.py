"""How well did the guard's tag-free figures predict a student that did not beat its teacher?

    python benchmarks/scripts/guard_predictors.py OUT.json [--results RESULT.json ...]

Reads the runs of one or more results files (default: the three-seed protocol's) with,
per student run, its guard figures and its target test F1, and per seed and language the
teacher's F1. For each figure, in the direction the guard reads it (risky: low agreement
with the teacher, a large source-dev drop, a high class cosine, more entities than the
teacher, a larger shift of the label distribution; the last two only where a run's guard
report has them): the ROC AUC of the figure as a score for "the student is not above
its teacher" (1.0: every such student looked riskier than every student that gained;
0.5: no information; below 0.5: the figure points the wrong way), and the Spearman
correlation of the figure with the student's gain. Computed over all students, and over
the warm-started and the from-pretrained ones apart (their source-dev drops differ by
design). The test scores were read by those runs already; this chooses nothing (the
guard's thresholds stay as the protocol fixed them).
"""
import argparse
import json
import platform
import subprocess
from datetime import date
from pathlib import Path

from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parent.parent.parent
FIGURES = {
    # name: (how to read it from a run's guard entry, the sign that makes "higher = riskier")
    "agreement with the teacher (F1)": (lambda g: g["agreement_f1"], -1.0),
    "source dev F1 drop (points)": (lambda g: g["teacher_dev_f1"] - g["student_dev_f1"], 1.0),
    "largest class cosine": (lambda g: g["max_class_cosine"], 1.0),
    "target entities, student / teacher": (lambda g: g.get("target_entity_ratio"), 1.0),
    "target label shift (total variation)": (lambda g: g.get("target_label_shift"), 1.0),
}
GROUPS = {
    "all students": None,
    "warm-started (W, ST-W)": {"W", "ST-W"},
    "from the pretrained encoder (P, ST)": {"P", "ST"},
}


def student_runs(result: dict, source: str = "") -> list:
    """The students of one results file, each with its gain over its seed's teacher and
    its guard figures (None where its report lacks one); source names the file."""
    teachers = {(r["seed"], r["lang"]): r["raw_text_f1"] for r in result["runs"] if r["system"] == "teacher"}
    out = []
    for r in result["runs"]:
        if r["system"] == "teacher" or "guard" not in r:
            continue
        gain = r["raw_text_f1"] - teachers[(r["seed"], r["lang"])]
        out.append({"source": source, "system": r["system"], "seed": r["seed"], "lang": r["lang"], "gain": round(gain, 4),
                    **{name: read(r["guard"]) for name, (read, _) in FIGURES.items()}})
    return out


def predictive_power(runs: list) -> dict:
    """Per figure, over the runs that report it: how many, how many not above their
    teacher, the AUC (None unless both kinds are there) and the Spearman correlation."""
    out = {"students": len(runs), "not_above_teacher": sum(run["gain"] <= 0 for run in runs)}
    for name, (_, sign) in FIGURES.items():
        have = [run for run in runs if run[name] is not None]
        failed = [run["gain"] <= 0 for run in have]
        values = [run[name] for run in have]
        auc = roc_auc_score(failed, [sign * v for v in values]) if 0 < sum(failed) < len(have) else None
        rho = spearmanr(values, [run["gain"] for run in have]).statistic if len(have) > 2 else None
        out[name] = {"students": len(have), "not_above_teacher": sum(failed),
                     "auc_not_above_teacher": None if auc is None else round(float(auc), 3),
                     "spearman_with_gain": None if rho is None else round(float(rho), 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--results", type=Path, nargs="+",
                        default=[ROOT / "benchmarks" / "results" / "three-seed-protocol.json"])
    args = parser.parse_args()
    runs = [run for path in args.results for run in student_runs(json.loads(path.read_text(encoding="utf8")), path.stem)]
    groups = {}
    for group, systems in GROUPS.items():
        groups[group] = predictive_power([r for r in runs if systems is None or r["system"] in systems])
    rows = []
    for group, power in groups.items():
        for name in FIGURES:
            figure = power[name]
            if figure["students"] == 0:
                continue
            auc, rho = figure["auc_not_above_teacher"], figure["spearman_with_gain"]
            rows.append([group, name, f"{figure['not_above_teacher']} of {figure['students']}",
                         "" if auc is None else f"{auc:.2f}", "" if rho is None else f"{rho:+.2f}"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = {
        "claim": ("how well the guard's tag-free figures predicted a student that did not beat its teacher, "
                  "over the students of the three-seed runs"),
        "measured": ("per figure, in the guard's direction: ROC AUC for 'student raw-text test F1 <= its teacher's' "
                     "and the Spearman correlation with the gain"),
        "command": ["python benchmarks/scripts/guard_predictors.py OUT.json --results " + " ".join(
            str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else str(p) for p in args.results)],
        "commit": commit,
        "machine": f"any (a computation over stored results; {platform.machine()})",
        "date": date.today().isoformat(),
        "source": [p.name for p in args.results],
        "runs": runs,
        "groups": groups,
        "tables": {"predictors": {"columns": ["students", "figure", "not above their teacher", "AUC for 'not above its teacher'",
                                              "Spearman with the gain"], "rows": rows}},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf8")
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
