"""Candidate MINDROP's screen: each student's checkpoint chosen by its English dev F1.

    python benchmarks/scripts/mindrop_screen.py OUT.json NAME=RUN_DIR:DEV_JSON [...] --commit COMMIT

RUN_DIR holds one retrained student's screen (as stop_screen.py's): guard/sSTEP.json for
the snapshot of step STEP (s800 is model-last), whose source dev F1 (raw text, 1,000
sentences) MINDROP reads, and DEV_JSON, the `evaluate` of the teacher, the stored student
(named stored) and every snapshot on the target language's dev set, with its per-sentence
counts. Writes each case's snapshots, MINDROP's pick (highest English dev F1; on a tie,
the later step), the pick's gain over the stored student and over the teacher (paired
bootstrap, 2,000 resamples), and the rule of PROTOCOL.md's "Candidate MINDROP".
"""
import json
import sys
from pathlib import Path

import numpy
from paired_bootstrap import difference
from stop_screen import interval, label, provenance, take_commit


def case_screen(run_dir: Path, dev_json: Path) -> dict:
    """The snapshots' English dev F1, their target dev F1 and MINDROP's pick for one student."""
    scored = json.loads(dev_json.read_text())
    evaluation = scored["results"]
    per_sentence = json.loads(dev_json.with_suffix(".per_sentence.json").read_text())["raw_text"]
    steps = sorted(int(p.stem[1:]) for p in (run_dir / "guard").glob("s*.json"))
    snapshots = []
    for step in steps:
        report = json.loads((run_dir / "guard" / f"s{step}.json").read_text())
        snapshots.append({
            "step": step,
            "en_dev_f1": round(report["student_dev_f"], 2),
            "dev_drop": round(report["teacher_dev_f"] - report["student_dev_f"], 2),
            "guard_trusted": bool(report["trusted"]),
            "dev_f1": round(100 * evaluation[f"s{step}"]["raw_text"]["ents_f"], 2),
            "vs_teacher": difference(per_sentence, f"s{step}", "teacher"),
        })
    best = max(snapshots, key=lambda s: (s["en_dev_f1"], s["step"]))
    name = f"s{best['step']}"
    return {
        "dev_set": f"{Path(scored['test']).parent.name}/{Path(scored['test']).stem}",
        "teacher_dev_f1": round(100 * evaluation["teacher"]["raw_text"]["ents_f"], 2),
        "stored_student_dev_f1": round(100 * evaluation["stored"]["raw_text"]["ents_f"], 2),
        "retrained_vs_stored": difference(per_sentence, f"s{snapshots[-1]['step']}", "stored"),
        "shipped_vs_teacher": difference(per_sentence, "stored", "teacher"),
        "snapshots": snapshots,
        "mindrop": {"model": name, "vs_shipped": difference(per_sentence, name, "stored"),
                    "vs_teacher": difference(per_sentence, name, "teacher")},
    }


def tables(cases: dict) -> dict:
    """Each case's pick against what shipped, and every snapshot's two F1s."""
    outcome = [[name, c["dev_set"], interval(c["shipped_vs_teacher"]), label(c["mindrop"]["model"]),
                interval(c["mindrop"]["vs_shipped"]), interval(c["mindrop"]["vs_teacher"])] for name, c in cases.items()]
    rows = [[name, s["step"], f"{s['en_dev_f1']:.2f}", f"{s['dev_f1']:.2f}", interval(s["vs_teacher"])]
            for name, c in cases.items() for s in c["snapshots"]]
    return {
        "outcome": {"columns": ["case", "dev set", "shipped (the final student) vs teacher", "MINDROP's pick",
                                "pick vs shipped", "pick vs teacher"], "rows": outcome},
        "snapshots": {"columns": ["case", "step", "en/dev F1", "target dev F1", "vs teacher [95%]"], "rows": rows},
    }


def main(argv) -> None:
    commit, argv = take_commit(argv)
    out = Path(argv[0])
    cases = {}
    for arg in argv[1:]:
        name, _, paths = arg.partition("=")
        run_dir, _, dev_json = paths.partition(":")
        cases[name] = case_screen(Path(run_dir), Path(dev_json))
    vs_shipped = [c["mindrop"]["vs_shipped"]["difference"] for c in cases.values()]
    mean = float(numpy.mean(vs_shipped))
    adopted = all(d >= -0.5 for d in vs_shipped) and mean >= 0.5
    result = {
        "claim": f"Candidate MINDROP on dev sets: {'adopted' if adopted else 'not adopted'} (pick minus shipped: "
                 + ", ".join(f"{n} {d:+.2f}" for n, d in zip(cases, vs_shipped)) + f"; mean {mean:+.2f})",
        "measured": "Each case's student trained again with its final run's command, seed and pseudo-labels, a snapshot "
                    "every 100 steps; `guard` (the workflow's thresholds) on each snapshot against the run's teacher gives "
                    "the English dev F1 (raw text, 1,000 sentences); `evaluate` on the target dev set (raw text, exact "
                    "character offsets); paired bootstrap over sentences (2,000 resamples)",
        **provenance("mindrop_screen.py", [argv[0]] + [f"{name}=<its screen folder>:<its dev evaluation>" for name in cases],
                     "MINDROP", commit),
        "cases": cases,
        "rule": {"pick_minus_shipped": dict(zip(cases, vs_shipped)), "mean": round(mean, 2), "adopted": adopted},
        "tables": tables(cases),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("claim", "rule")}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
