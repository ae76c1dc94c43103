"""Score maps for a student of a language without a dev set, screened by ECE on dev sets.

    python benchmarks/scripts/score_map_screen.py OUT.json ES_DEV.conll FI_DEV.conll NAME=PROJECT_DIR [...]
        [--fit-sentences 1000] [--cache DIR]

For each run (a finished workflow's project folder), the Spanish student
(training/student-es/model) is scored on the raw text of ES_DEV: its entities in the first
--fit-sentences sentences are what the maps are fitted on, as the workflow fits its
temperature; the rest are held out. The Finnish models (training/student-fi/model and,
where it exists, training/fallback-fi/model) are scored on all of FI_DEV, and on the same
first ES_DEV sentences for P-own. Every map is monotone in an entity's score, so no
prediction changes:

- T2: the constant 2.0 (a student of a language without a dev set, now).
- T-es: the temperature fitted on the run's Spanish student.
- P-es: Platt scaling, sigmoid(a z + b) with z the log-odds of the score at T = 1 (from
  the logits: pipeline.decoding.class_log_odds), (a, b) fitted by log loss on the Spanish
  student's entities (evaluation.calibration.fit_platt), as `calibrate --score-map platt`.
- P-own: the same, fitted on the model's own entities of those ES_DEV sentences.
- I-es: isotonic regression of correctness on the score at T = 1 (Spanish student).

ECE with 10 bins, raw text, exact character offsets. The entity logits of every model and
sentence range are cached in --cache (npz), so the maps can be refitted without the models.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict, Tuple

import numpy
from sklearn.isotonic import IsotonicRegression

from spacy_maral.evaluation.calibration import fit_platt, fit_temperature, reliability
from spacy_maral.pipeline.decoding import ScoreMap, class_log_odds, tempered_scores

CONSTANT = 2.0


def entity_rows(model: Path, conll: Path, lang: str, start: int, end: int, cache: Path) -> Tuple[numpy.ndarray, ...]:
    """(logits, classes, correct) of the model's entities on sentences [start, end) of CONLL,
    raw text with `lang`'s tokenizer rules; read from / written to the npz cache."""
    key = cache / f"{'-'.join(model.resolve().parts[-5:])}-{conll.parent.name}-{conll.stem}-{start}-{end}.npz"
    if key.exists():
        data = numpy.load(key)
        return data["logits"], data["classes"], data["correct"]
    from spacy_maral.corpora.target_text import iter_target_docs
    from spacy_maral.evaluation.raw_text import entity_logits
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.tokenizer import tokenizer_rules

    nlp = load_pipeline(model)
    docs = list(iter_target_docs(conll, nlp, gold_tokens=True))[start:end]
    print(f"{model} on {conll} [{start}:{start + len(docs)}] ...", file=sys.stderr, flush=True)
    with tokenizer_rules(nlp, lang):
        logits, classes, correct = entity_logits(nlp, docs)
    cache.mkdir(parents=True, exist_ok=True)
    numpy.savez(key, logits=logits, classes=classes, correct=correct)
    return logits, classes, numpy.asarray(correct)


def maps_from(rows: Tuple[numpy.ndarray, ...]) -> Dict[str, object]:
    logits, classes, correct = rows
    s1 = tempered_scores(logits, classes, 1.0)
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s1, correct.astype(float))
    slope, offset = fit_platt(class_log_odds(logits, classes), correct)
    return {"T": fit_temperature(logits, classes, correct), "P": ScoreMap(1.0, slope, offset), "I": iso}


def ece(scores: numpy.ndarray, correct: numpy.ndarray) -> float:
    return round(float(reliability(scores, correct)["ece"]), 4)


def main(argv) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("es_dev", type=Path)
    parser.add_argument("fi_dev", type=Path)
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--fit-sentences", type=int, default=1000)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/cache/score-map"))
    args = parser.parse_args(argv)
    n = args.fit_sentences
    result = {"fit_sentences": n, "finnish": {}, "spanish": {}}
    for spec in args.runs:
        name, project = spec.split("=", 1)
        project = Path(project)
        es_student = project / "training/student-es/model"
        es_fit = entity_rows(es_student, args.es_dev, "es", 0, n, args.cache)
        es_held = entity_rows(es_student, args.es_dev, "es", n, 10**9, args.cache)
        from_es = maps_from(es_fit)
        held_s1 = tempered_scores(es_held[0], es_held[1], 1.0)
        result["spanish"][name] = {
            "held_out_entities": int(len(es_held[2])),
            "fitted": {"T": round(from_es["T"], 3), "P": [round(from_es["P"].slope, 3), round(from_es["P"].offset, 3)]},
            "ece": {
                "T": ece(tempered_scores(es_held[0], es_held[1], from_es["T"]), es_held[2]),
                "P": ece(from_es["P"].scores(es_held[0], es_held[1]), es_held[2]),
                "I": ece(from_es["I"].predict(held_s1), es_held[2]),
            },
        }
        for kind in ("student-fi", "fallback-fi"):
            model = project / "training" / kind / "model"
            if not model.exists():
                continue
            logits, classes, correct = entity_rows(model, args.fi_dev, "fi", 0, 10**9, args.cache)
            own = maps_from(entity_rows(model, args.es_dev, "es", 0, n, args.cache))
            s1 = tempered_scores(logits, classes, 1.0)
            result["finnish"][f"{name}/{kind}"] = {
                "entities": int(len(correct)), "precision": round(float(correct.mean()), 4),
                "own_fit": {"T": round(own["T"], 3), "P": [round(own["P"].slope, 3), round(own["P"].offset, 3)]},
                "ece": {
                    "T2": ece(tempered_scores(logits, classes, CONSTANT), correct),
                    "T-es": ece(tempered_scores(logits, classes, from_es["T"]), correct),
                    "P-es": ece(from_es["P"].scores(logits, classes), correct),
                    "P-own": ece(own["P"].scores(logits, classes), correct),
                    "I-es": ece(from_es["I"].predict(s1), correct),
                },
            }
            print(name, kind, json.dumps(result["finnish"][f"{name}/{kind}"]["ece"]), file=sys.stderr, flush=True)
    finnish = list(result["finnish"].values())
    result["finnish_mean_ece"] = {k: round(float(numpy.mean([r["ece"][k] for r in finnish])), 4) for k in finnish[0]["ece"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
