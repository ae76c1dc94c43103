"""Evaluate trained pipelines on gold-tokenized test sets; write one JSON of results.

    python scripts/evaluate_models.py OUT.json NAME=MODEL_DIR[@INFERENCE_TAU] ... -- LANG=TEST.spacy ...

MODEL_DIR@1.5 loads the pipeline with maral_ner's inference_tau set to 1.5.

Entity-level micro P/R/F1 (exact span and type) over all gold entities, per-type F1,
words per second of nlp.pipe, and, for maral_ner pipelines, the class-mean geometry.
"""
import json
import sys
import time
from pathlib import Path

import spacy
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_maral.readers import bare_copy


def load_examples(nlp, path):
    refs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    return [Example(bare_copy(d, nlp.vocab), d) for d in refs]


def main(argv):
    out = Path(argv[0])
    sep = argv.index("--")
    models = dict(a.split("=", 1) for a in argv[1:sep])
    tests = dict(a.split("=", 1) for a in argv[sep + 1 :])
    results = {}
    for name, path in models.items():
        overrides = {}
        if "@" in path:
            path, tau = path.rsplit("@", 1)
            overrides = {"components.maral_ner.inference_tau": float(tau)}
        nlp = spacy.load(path, config=overrides)
        entry = {"model": path, "languages": {}}
        try:
            from spacy_maral.margins import class_mean_geometry

            entry["geometry"] = class_mean_geometry(nlp)
        except ValueError:
            pass
        for lang, test in tests.items():
            examples = load_examples(nlp, test)
            n_words = sum(len(eg.predicted) for eg in examples)
            start = time.perf_counter()
            scores = nlp.evaluate(examples, batch_size=64)
            elapsed = time.perf_counter() - start
            entry["languages"][lang] = {
                "p": scores["ents_p"], "r": scores["ents_r"], "f": scores["ents_f"],
                "per_type": scores["ents_per_type"], "sentences": len(examples), "words": n_words,
                "seconds": round(elapsed, 1), "words_per_second": round(n_words / elapsed, 1),
            }
            print(f"{name} {lang}: P {scores['ents_p']:.4f} R {scores['ents_r']:.4f} F {scores['ents_f']:.4f} ({elapsed:.0f}s)", flush=True)
        results[name] = entry
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
