"""Candidate STOP's screen: the guard's tag-free figures along stage 2 against the real gain.

    python benchmarks/scripts/stop_screen.py OUT.json SEED=RUN_DIR [SEED=RUN_DIR ...] --commit COMMIT

RUN_DIR holds one retrained student's screen: guard/sSTEP.json (the `guard` command's
verdict for the snapshot of step STEP, against the run's teacher; s800 is model-last) and
fi-dev.json with its per-sentence counts (`evaluate` of the teacher, the fallback that
shipped, the stored student and every snapshot, named teacher, fallback, stored, sSTEP).

For each seed: every snapshot's guard figures, its dev F1 and its gain over the teacher
(paired bootstrap over sentences, 2,000 resamples, as paired_bootstrap.py); the model
STOP picks (the final student if trusted, else the latest trusted snapshot, else the
fallback); the fallback's gain. Over all snapshots: the Spearman correlation of each
guard figure with the gain. Then the rule of PROTOCOL.md's "Candidate STOP".
"""
import datetime
import json
import sys
from pathlib import Path

import numpy
import results_io
from paired_bootstrap import difference
from scipy.stats import spearmanr


def seed_screen(run_dir: Path) -> dict:
    """The snapshots' figures and STOP's pick for one retrained student."""
    evaluation = json.loads((run_dir / "fi-dev.json").read_text())["results"]
    per_sentence = json.loads((run_dir / "fi-dev.per_sentence.json").read_text())["raw_text"]
    steps = sorted(int(p.stem[1:]) for p in (run_dir / "guard").glob("s*.json"))
    snapshots = []
    for step in steps:
        report = json.loads((run_dir / "guard" / f"s{step}.json").read_text())
        snapshots.append({
            "step": step,
            "trusted": bool(report["trusted"]),
            "agreement_f": round(report["agreement_f"], 2),
            "label_shift": round(report["target_label_shift"], 3),
            "dev_drop": round(report["teacher_dev_f"] - report["student_dev_f"], 2),
            "dev_f1": round(100 * evaluation[f"s{step}"]["raw_text"]["ents_f"], 2),
            "vs_teacher": difference(per_sentence, f"s{step}", "teacher"),
        })
    final = snapshots[-1]
    trusted = [s for s in snapshots if s["trusted"]]
    if final["trusted"]:
        pick = {"model": f"s{final['step']}", "why": "the final student is trusted"}
    elif trusted:
        pick = {"model": f"s{trusted[-1]['step']}", "why": "the latest trusted snapshot"}
    else:
        pick = {"model": "fallback", "why": "no snapshot is trusted"}
    pick["vs_teacher"] = difference(per_sentence, pick["model"], "teacher")
    return {
        "teacher_dev_f1": round(100 * evaluation["teacher"]["raw_text"]["ents_f"], 2),
        "stored_student_dev_f1": round(100 * evaluation["stored"]["raw_text"]["ents_f"], 2),
        "retrained_vs_stored": difference(per_sentence, f"s{final['step']}", "stored"),
        "fallback": {"dev_f1": round(100 * evaluation["fallback"]["raw_text"]["ents_f"], 2),
                     "vs_teacher": difference(per_sentence, "fallback", "teacher")},
        "snapshots": snapshots,
        "stop": pick,
    }


def take_commit(argv: list) -> tuple:
    """(--commit's value, the code the screen's runs used; argv without it)."""
    if "--commit" not in argv:
        raise SystemExit("--commit COMMIT: the commit whose code ran the screen")
    i = argv.index("--commit")
    return argv[i + 1], argv[:i] + argv[i + 2:]


def machine() -> str:
    """This machine, which ran the screen: CPU, bfloat16 or not, cores, memory, GPU."""
    from spacy_maral.bench.machine import machine_description

    m = machine_description()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    bf16 = "avx512_bf16; bf16 encoder" if "avx512_bf16" in flags else "no avx512_bf16; fp32 encoder"
    return (f"{m['cores']}-core CPU machine ({m['cpu']}, {bf16}), {m['memory_gb']} GB RAM, "
            f"{'a GPU' if m['gpu'] else 'no GPU'}")


def provenance(script: str, arguments: list, candidate: str, commit: str) -> dict:
    """What a screen's results file says of its making: the command (the screen folders
    named, not their paths here), the protocol entry, the code's commit, date and machine."""
    return {"command": f"python benchmarks/scripts/{script} " + " ".join([*arguments, "--commit", commit]),
            "protocol": f"benchmarks/PROTOCOL.md, 'Candidate {candidate}' (fixed before its runs)",
            "commit": commit, "date": datetime.date.today().isoformat(), "machine": machine()}


def interval(g: dict) -> str:
    """+1.23 [-0.45, +2.34]: a difference (paired_bootstrap.difference's result) and its interval."""
    return results_io.interval(g, "difference_95ci")


def label(model: str) -> str:
    """s700 -> step 700 (a snapshot); any other model as it is named."""
    return f"step {model[1:]}" if model[:1] == "s" and model[1:].isdigit() else model


def tables(seeds: dict) -> dict:
    """The snapshots of every seed, and STOP's pick against the fallback that shipped."""
    rows = [[seed, s["step"], "trusted" if s["trusted"] else "distrusted", f"{s['agreement_f']:.2f}", f"{s['label_shift']:.3f}",
             f"{s['dev_drop']:.2f}", f"{s['dev_f1']:.2f}", interval(s["vs_teacher"])]
            for seed, screen in seeds.items() for s in screen["snapshots"]]
    outcome = [[seed, f"{screen['teacher_dev_f1']:.2f}", interval(screen["fallback"]["vs_teacher"]),
                f"{label(screen['stop']['model'])} ({screen['stop']['why']})", interval(screen["stop"]["vs_teacher"])]
               for seed, screen in seeds.items()]
    return {
        "snapshots": {"columns": ["seed", "step", "guard", "agreement (F1)", "label shift", "en/dev drop", "fi/dev F1",
                                  "vs teacher [95%]"], "rows": rows},
        "outcome": {"columns": ["seed", "teacher fi/dev F1", "the fallback that shipped, vs teacher", "STOP's pick",
                                "vs teacher"], "rows": outcome},
    }


def main(argv) -> None:
    commit, argv = take_commit(argv)
    out = Path(argv[0])
    seeds = {seed: seed_screen(Path(path)) for seed, path in (a.split("=", 1) for a in argv[1:])}
    every = [s for screen in seeds.values() for s in screen["snapshots"]]
    gains = [s["vs_teacher"]["difference"] for s in every]
    correlation = {}
    for figure in ("agreement_f", "label_shift", "dev_drop"):
        rho, p = spearmanr([s[figure] for s in every], gains)
        correlation[figure] = {"spearman": round(float(rho), 3), "p": round(float(p), 4)}
    stop = [screen["stop"]["vs_teacher"] for screen in seeds.values()]
    fallback = [screen["fallback"]["vs_teacher"] for screen in seeds.values()]
    stop_mean = float(numpy.mean([g["difference"] for g in stop]))
    fallback_mean = float(numpy.mean([g["difference"] for g in fallback]))
    adopted = (all(g["difference"] >= 0 and g["difference_95ci"][0] >= -0.5 for g in stop)
               and stop_mean >= fallback_mean + 0.5)
    result = {
        "claim": "Candidate STOP on fi/dev: " + ("adopted" if adopted else "not adopted") + f" (STOP's mean gain over the "
                 f"teacher {stop_mean:+.2f}, the shipped fallbacks' {fallback_mean:+.2f})",
        "measured": "Each seed's Finnish student trained again with its final run's command and seed, a snapshot every "
                    "100 steps; `guard` (agreement >= 60, label shift <= 0.2, en/dev drop <= 5; no fallback) on each "
                    "snapshot against the run's teacher; `evaluate` on fi/dev (raw text, exact character offsets); paired "
                    "bootstrap over sentences (2,000 resamples)",
        **provenance("stop_screen.py", [argv[0]] + [f"{seed}=<seed {seed}'s screen folder>" for seed in seeds], "STOP", commit),
        "seeds": seeds,
        "correlation_with_gain": correlation,
        "rule": {"stop_mean": round(stop_mean, 2), "fallback_mean": round(fallback_mean, 2), "adopted": adopted},
        "tables": tables(seeds),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("claim", "correlation_with_gain", "rule")}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
