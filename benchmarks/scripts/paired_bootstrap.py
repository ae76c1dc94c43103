"""Paired bootstrap over test sentences: is system A's entity F1 really different from B's?

    python benchmarks/scripts/paired_bootstrap.py OUT.json TEST.spacy A=MODEL_DIR[@TAU] B=MODEL_DIR[@TAU] [--samples 2000]
    python benchmarks/scripts/paired_bootstrap.py OUT.json --eval EVAL.json A B [--eval-b EVAL_B.json] [--samples 2000]

@TAU sets a maral_ner pipeline's inference_tau. Without --eval, both pipelines label the
same gold-tokenized sentences once (spans matched on the gold tokens). With --eval, the
per-sentence raw-text counts that `spacy_maral evaluate -o EVAL.json` wrote beside it
(EVAL.per_sentence.json) for the pipelines named A and B are resampled instead: nothing
is predicted again, and the F1 is evaluate's raw-text F1 (exact character offsets).
--eval-b takes B's counts from a second evaluation of the same test set (a student
evaluated later on its own); the sentence counts must still pair up.

Sentences are resampled with replacement (seeded) and micro F1 (exact span and type, all
gold entities) is recomputed for both on each resample. Writes F1 of each, the
difference A - B, its 95% interval and the share of resamples where A > B.
"""
import json
import sys
from pathlib import Path

import numpy
import spacy
from spacy.tokens import DocBin

from spacy_maral.training.readers import bare_copy


def sentence_counts(model: str, gold_docs) -> numpy.ndarray:
    """(n_sentences, 3) true positives, predicted and gold entities per sentence."""
    model, _, tau = model.partition("@")
    nlp = spacy.load(model)
    if tau:
        from spacy_maral.pipeline.maral_ner import find_maral_ner

        find_maral_ner(nlp).inference_tau = float(tau)
    copies = [bare_copy(d, nlp.vocab) for d in gold_docs]
    rows = []
    for pred, gold in zip(nlp.pipe(copies, batch_size=64), gold_docs):
        p = {(e.start, e.end, e.label_) for e in pred.ents}
        g = {(e.start, e.end, e.label_) for e in gold.ents}
        rows.append((len(p & g), len(p), len(g)))
    return numpy.asarray(rows, dtype=numpy.int64)


def f1(counts: numpy.ndarray) -> numpy.ndarray:
    """Micro F1 per resample from summed counts (..., 3)."""
    tp, n_pred, n_gold = counts[..., 0], counts[..., 1], counts[..., 2]
    return numpy.where(n_pred + n_gold > 0, 2 * tp / numpy.maximum(n_pred + n_gold, 1), 0.0)


def resampled_difference(a: numpy.ndarray, b: numpy.ndarray, samples: int = 2000):
    """F1 of A minus B (fractions): on all sentences, and on each of `samples` paired
    resamples of them (numpy seed 0).

    a, b (numpy.ndarray): per-sentence (tp, predicted, gold) counts, (sentences, 3), paired.
    RETURNS (Tuple[float, numpy.ndarray]): the difference, and the resamples' differences.
    """
    idx = numpy.random.default_rng(0).integers(0, len(a), size=(samples, len(a)))
    return float(f1(a.sum(axis=0)) - f1(b.sum(axis=0))), f1(a[idx].sum(axis=1)) - f1(b[idx].sum(axis=1))


def difference(per_sentence: dict, a: str, b: str, samples: int = 2000) -> dict:
    """Raw-text F1 of `a` minus `b` in points, with the 95% interval of the paired bootstrap.

    per_sentence (dict): model name -> its per-sentence counts, flat or (sentences, 3)
        (`evaluate`'s per_sentence.json, its "raw_text").
    a, b (str): the two models' names.
    samples (int): resamples.
    RETURNS (dict): {"difference": points, "difference_95ci": [low, high]}, two decimals.
    """
    x, y = (numpy.asarray(per_sentence[n], dtype=numpy.int64).reshape(-1, 3) for n in (a, b))
    point, diff = resampled_difference(x, y, samples)
    return {"difference": round(100 * point, 2),
            "difference_95ci": [round(100 * float(v), 2) for v in numpy.percentile(diff, [2.5, 97.5])]}


def take_option(argv: list, flag: str, default):
    """(the value after flag, or default; argv without the flag and its value)."""
    if flag not in argv:
        return default, argv
    i = argv.index(flag)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv) -> None:
    samples, argv = take_option(argv, "--samples", 2000)
    samples = int(samples)
    test_b, argv = take_option(argv, "--eval-b", None)
    out = Path(argv[0])
    if argv[1] == "--eval":
        test, name_a, name_b = argv[2], argv[3], argv[4]
        test_b = test_b or test
        a, b = (numpy.asarray(json.loads(Path(t).with_suffix(".per_sentence.json").read_text())["raw_text"][n],
                              dtype=numpy.int64).reshape(-1, 3) for t, n in ((test, name_a), (test_b, name_b)))
        if len(a) != len(b) or len(a) == 0:
            raise SystemExit(f"{test}: {name_a} has {len(a)} sentences, {test_b}: {name_b} {len(b)}: "
                             "not a paired test set")
        if (a[:, 2] != b[:, 2]).any():
            raise SystemExit(f"{test} and {test_b}: the gold entities per sentence differ: not a paired test set")
    else:
        test = argv[1]
        (name_a, model_a), (name_b, model_b) = (x.split("=", 1) for x in argv[2:4])
        gold = list(DocBin().from_disk(test).get_docs(spacy.blank("xx").vocab))
        a, b = sentence_counts(model_a, gold), sentence_counts(model_b, gold)
    n = len(a)
    point, diff = resampled_difference(a, b, samples)
    result = {
        "test": test if test_b in (None, test) else [test, test_b], "sentences": n, "samples": samples,
        name_a: round(100 * float(f1(a.sum(axis=0))), 2), name_b: round(100 * float(f1(b.sum(axis=0))), 2),
        "difference": round(100 * point, 2),
        "difference_95ci": [round(100 * float(x), 2) for x in numpy.percentile(diff, [2.5, 97.5])],
        f"share_{name_a}_better": round(float((diff > 0).mean()), 3),
    }
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
