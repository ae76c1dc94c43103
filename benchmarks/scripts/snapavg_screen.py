"""Candidates SNAPAVG and T-POOL on dev sets (benchmarks/PROTOCOL.md, "Candidates SNAPAVG
and T-POOL").

    python benchmarks/scripts/snapavg_screen.py OUT.json NAME=SCREEN_DIR [...] --commit COMMIT [--cache DIR]

SCREEN_DIR is what snapavg_screen.sh wrote for one run: LANG-dev.json (evaluate's metrics of
the teacher, the student the workflow made, `pick`, and SNAPAVG's mean, `avg`) with its
per-sentence counts beside it (the dev set's path is in LANG-dev.json), avg-LANG,
guard-avg-LANG.json and `project`, the run's project folder, where the pick is. For each language and run: F1 on the dev set (raw text,
exact character offsets), the paired bootstrap (2,000 resamples, paired_bootstrap.difference) of pick
and avg against the teacher and of avg against pick, ECE (10 bins) under the stored score
maps, the guard's verdict on the mean, and ECE of pick and avg at each temperature of
GRID. Then the two rules of the protocol entry.
"""
import json
import sys
from pathlib import Path
from typing import Dict, List

import numpy
from paired_bootstrap import difference, take_option
from score_map_screen import ece, entity_rows
from stop_screen import interval, provenance, take_commit

from spacy_maral.pipeline.decoding import tempered_scores

GRID = (1.5, 2.0, 2.5, 3.0, 3.5)
CONSTANT = 2.0


def case(screen: Path, lang: str, project: Path, cache: Path) -> dict:
    """One language of one run: F1, gains, ECE and the guard's verdict on the mean."""
    evaluation = json.loads((screen / f"{lang}-dev.json").read_text())
    results = evaluation["results"]
    per_sentence = json.loads((screen / f"{lang}-dev.per_sentence.json").read_text())["raw_text"]
    guard = json.loads((screen / f"guard-avg-{lang}.json").read_text())
    dev = Path(evaluation["test"])
    models = {"pick": project / "training" / f"student-{lang}" / "model", "avg": screen / f"avg-{lang}"}
    ece_at = {}
    for name, model in models.items():
        logits, classes, correct = entity_rows(model, dev, lang, 0, 10**9, cache)
        ece_at[name] = {str(t): ece(tempered_scores(logits, classes, t), correct) for t in GRID}
    return {
        "dev": f"{lang}/dev, sentences 1,001 on" if dev.name == "es-dev-held-out.conll" else f"{lang}/dev",
        "sentences": int(numpy.asarray(per_sentence["teacher"]).reshape(-1, 3).shape[0]),
        "f1": {name: round(100 * results[name]["raw_text"]["ents_f"], 2) for name in ("teacher", "pick", "avg")},
        "pick_vs_teacher": difference(per_sentence, "pick", "teacher"),
        "avg_vs_teacher": difference(per_sentence, "avg", "teacher"),
        "avg_vs_pick": difference(per_sentence, "avg", "pick"),
        "ece_stored_map": {name: round(results[name]["raw_text"]["calibration"]["ece"], 4) for name in ("teacher", "pick", "avg")},
        "ece_at_temperature": ece_at,
        "guard_on_avg": {"trusted": bool(guard["trusted"]), "agreement_f": round(guard["agreement_f"], 2),
                         "label_shift": round(guard["target_label_shift"], 3),
                         "dev_drop": round(guard["teacher_dev_f"] - guard["student_dev_f"], 2)},
    }


def snapavg_rule(cases: Dict[str, dict]) -> dict:
    """The protocol's four conditions for SNAPAVG, on the Finnish and Spanish cases."""
    fi = [c for name, c in cases.items() if name.startswith("fi/")]
    es = [c for name, c in cases.items() if name.startswith("es/")]
    mean = lambda xs: float(numpy.mean(xs))  # noqa: E731  (rounded only for the record, after the rules)
    figures = {
        "fi_mean_gain": {"avg": mean([c["avg_vs_teacher"]["difference"] for c in fi]),
                         "pick": mean([c["pick_vs_teacher"]["difference"] for c in fi])},
        "fi_lowest_bound": {"avg": min(c["avg_vs_teacher"]["difference_95ci"][0] for c in fi),
                            "pick": min(c["pick_vs_teacher"]["difference_95ci"][0] for c in fi)},
        "fi_mean_ece_t2": {"avg": mean([c["ece_at_temperature"]["avg"][str(CONSTANT)] for c in fi]),
                           "pick": mean([c["ece_at_temperature"]["pick"][str(CONSTANT)] for c in fi])},
        "es_mean_f1": {"avg": mean([c["f1"]["avg"] for c in es]), "pick": mean([c["f1"]["pick"] for c in es])},
    }
    met = {
        "i": figures["fi_mean_gain"]["avg"] >= figures["fi_mean_gain"]["pick"],
        "ii": figures["fi_lowest_bound"]["avg"] >= figures["fi_lowest_bound"]["pick"],
        "iii": figures["fi_mean_ece_t2"]["avg"] <= figures["fi_mean_ece_t2"]["pick"] + 0.005,
        "iv": figures["es_mean_f1"]["avg"] >= figures["es_mean_f1"]["pick"] - 0.5,
    }
    figures = {name: {k: round(v, 3) for k, v in pair.items()} for name, pair in figures.items()}
    return {"figures": figures, "met": met, "adopted": all(met.values())}


def tpool_rule(cases: Dict[str, dict], snapavg_adopted: bool) -> dict:
    """T-POOL: the grid's temperature with the lowest mean ECE over the models that would
    ship: SNAPAVG's mean for a language without a dev set where SNAPAVG is adopted, else
    the pick (always the pick for Spanish, whose DEVSEL stays)."""
    model = {name: "avg" if snapavg_adopted and not name.startswith("es/") else "pick" for name in cases}
    means = {t: float(numpy.mean([c["ece_at_temperature"][model[name]][str(t)] for name, c in cases.items()])) for t in GRID}
    best = min(GRID, key=lambda t: (means[t], abs(t - CONSTANT)))
    return {"model": model, "mean_ece": {str(t): round(m, 4) for t, m in means.items()}, "best": best,
            "adopted": means[best] <= means[CONSTANT] - 0.01}


def tables(cases: Dict[str, dict]) -> dict:
    rows = []
    for name, c in cases.items():
        g = c["guard_on_avg"]
        rows.append([name, c["dev"], *(f"{c['f1'][m]:.2f}" for m in ("teacher", "pick", "avg")), interval(c["pick_vs_teacher"]),
                     interval(c["avg_vs_teacher"]), interval(c["avg_vs_pick"]),
                     f"{c['ece_at_temperature']['pick'][str(CONSTANT)]:.3f} / {c['ece_at_temperature']['avg'][str(CONSTANT)]:.3f}",
                     f"{'trusted' if g['trusted'] else 'distrusted'} (agreement {g['agreement_f']:.2f}, shift {g['label_shift']:.3f})"])
    grid = [[f"{name} {m}"] + [f"{c['ece_at_temperature'][m][str(t)]:.3f}" for t in GRID]
            for name, c in cases.items() for m in ("pick", "avg")]
    return {
        "screen": {"columns": ["case", "dev set", "teacher", "pick", "SNAPAVG", "pick - teacher [95%]", "SNAPAVG - teacher [95%]",
                               "SNAPAVG - pick [95%]", "ECE at T = 2.0, pick / SNAPAVG", "guard on SNAPAVG"], "rows": rows},
        "temperature": {"columns": ["model"] + [f"ECE at T = {t}" for t in GRID],
                        "rows": grid},
    }


def main(argv: List[str]) -> None:
    commit, argv = take_commit(argv)
    cache, argv = take_option(argv, "--cache", "benchmarks/cache/snapavg")
    cache = Path(cache)
    out = Path(argv[0])
    cases = {}
    for arg in argv[1:]:
        name, _, screen = arg.partition("=")
        screen = Path(screen)
        project = Path((screen / "project").read_text().strip())
        for lang in ("fi", "es"):
            if (screen / f"{lang}-dev.json").exists():
                cases[f"{lang}/{name}"] = case(screen, lang, project, cache)
                print(name, lang, json.dumps(cases[f"{lang}/{name}"]["f1"]), file=sys.stderr, flush=True)
    snapavg = snapavg_rule(cases)
    tpool = tpool_rule(cases, snapavg["adopted"])
    result = {
        "claim": f"SNAPAVG {'adopted' if snapavg['adopted'] else 'not adopted'} (Finnish mean gain over the teacher "
                 f"{snapavg['figures']['fi_mean_gain']['avg']:+.2f} against the pick's {snapavg['figures']['fi_mean_gain']['pick']:+.2f}); "
                 f"T-POOL {'adopted: T = ' + str(tpool['best']) if tpool['adopted'] else 'not adopted: 2.0 stays'}",
        "measured": "Dev sets only: all of fi/dev and es/dev's sentences 1,001 to 1,915 (what neither DEVSEL nor Platt's map "
                    "read), raw text, exact character offsets; the teacher, the student the workflow made (pick: SKIP-FIRST's "
                    "for Finnish, DEVSEL's for Spanish) and SNAPAVG's mean of the snapshots of steps 500 to 800 and "
                    "model-last, calibrated by the workflow's calibrate call; paired bootstrap over sentences (2,000 "
                    "resamples, numpy seed 0); ECE with 10 bins",
        **provenance("snapavg_screen.py", [argv[0]] + [f"{a.partition('=')[0]}=<its screen folder>" for a in argv[1:]],
                     "SNAPAVG", commit),
        "protocol": "benchmarks/PROTOCOL.md, 'Candidates SNAPAVG and T-POOL' (fixed before their runs)",
        "cases": cases,
        "rules": {"snapavg": snapavg, "tpool": tpool},
        "tables": tables(cases),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("claim", "rules")}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
