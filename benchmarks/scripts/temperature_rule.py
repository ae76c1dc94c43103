"""A student's score temperature without target tags (the agreement rule), set against the
constant 2.0 by ECE on a gold dev set.

    python benchmarks/scripts/temperature_rule.py OUT.json STUDENT PSEUDO_DIR LANG DEV.conll [--train-docs 800] [--seed 0] [--n 1000]
        [--atc SOURCE_DEV.conll]

The agreement rule: T is the temperature at which the mean score of the student's
entities on raw target text equals the share of them that the teachers' pseudo-labels
also hold (same characters, same type). It reads --n of the pseudo-labelled target
sentences PSEUDO_DIR (the workflow's corpus/LANG-pseudo) that the student did not train
on: stage 2 trains on the seeded subset of --train-docs sentences that
`training.readers.target_subset` draws for its --seed, so those are left out. DEV.conll
is read only to score the temperatures (ECE, 10 bins): the constant, the agreement
rule's, and the larger of the two (max_rule); it chooses nothing here.

--atc SOURCE_DEV.conll adds Average Thresholded Confidence (Garg et al. 2022): on the first
--n sentences of the labelled source dev set the threshold t is the score (at T = 1) above
which the share of the model's entities equals their precision there; the share of its
entities on the target sentences scoring above t estimates its target precision, and T is
the temperature at which its mean entity score there equals that estimate.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy
import spacy

from spacy_maral.adaptation.soft_labels import PSEUDO_KEY
from spacy_maral.corpora.docbin import read_docs
from spacy_maral.corpora.target_text import iter_target_docs
from spacy_maral.evaluation.calibration import reliability
from spacy_maral.evaluation.raw_text import entity_logits
from spacy_maral.pipeline.decoding import tempered_scores
from spacy_maral.pipeline.tokenizer import set_tokenizer_lang
from spacy_maral.training.readers import target_subset

CONSTANT = 2.0


def agreement_temperature(logits: numpy.ndarray, classes: numpy.ndarray, agree: numpy.ndarray) -> float:
    """The T in [0.05, 50] at which the mean tempered score equals the agreement share
    (bisection on log T: the score of the predicted class falls as T grows)."""
    return mean_score_temperature(logits, classes, float(agree.mean()))


def atc_estimate(source_scores: numpy.ndarray, source_correct: numpy.ndarray, target_scores: numpy.ndarray) -> tuple:
    """ATC: the threshold t above which the share of source scores equals the source
    precision, and the share of target scores above t. RETURNS (t, estimate)."""
    precision = float(numpy.mean(source_correct))
    t = float(numpy.quantile(source_scores, 1.0 - precision))
    return t, float(numpy.mean(target_scores > t))


def mean_score_temperature(logits: numpy.ndarray, classes: numpy.ndarray, target: float) -> float:
    """The T in [0.05, 50] at which the mean tempered score of the predicted classes
    equals `target` (bisection on log T)."""
    lo, hi = numpy.log(0.05), numpy.log(50.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        if tempered_scores(logits, classes, float(numpy.exp(mid))).mean() > target:
            lo = mid
        else:
            hi = mid
    return float(numpy.exp((lo + hi) / 2))


def parse(argv) -> argparse.Namespace:
    """The command line: five positionals (OUT.json, STUDENT, PSEUDO_DIR, LANG, DEV.conll)
    and the options, one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("student", help="a pipeline folder or package name")
    parser.add_argument("pseudo", type=Path)
    parser.add_argument("lang", help="the target language code")
    parser.add_argument("dev", type=Path)
    parser.add_argument("--train-docs", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--atc", type=Path, default=None, metavar="SOURCE_DEV.conll")
    return parser.parse_args(argv)


def main(argv) -> None:
    args = parse(argv)
    source_dev = args.atc
    out, student, pseudo, lang, dev = args.out, args.student, args.pseudo, args.lang, args.dev
    nlp = spacy.load(student)
    set_tokenizer_lang(nlp, lang)
    every = list(read_docs(pseudo, nlp))
    trained = set(target_subset(len(every), args.train_docs, args.seed).tolist())
    docs = []
    for i, doc in enumerate(every):
        if i in trained:
            continue
        if len(docs) >= args.n:
            break
        doc.ents = list(doc.spans[PSEUDO_KEY]) if PSEUDO_KEY in doc.spans else []
        docs.append(doc)
    logits, classes, agree = entity_logits(nlp, docs)
    t_rule = agreement_temperature(logits, classes, numpy.asarray(agree, dtype=bool))
    gold = list(iter_target_docs(dev, nlp, gold_tokens=True))
    dev_logits, dev_classes, correct = entity_logits(nlp, gold)
    result = {
        "student": Path(student).name, "lang": lang, "target_sentences": len(docs),
        "left_out_trained": len(trained), "entities": int(len(agree)),
        "agreement": round(float(numpy.mean(agree)), 4), "rule_temperature": round(t_rule, 3),
        "dev": dev.name, "dev_entities": int(len(correct)),
        "ece": {
            "constant_2.0": round(reliability(tempered_scores(dev_logits, dev_classes, CONSTANT), correct)["ece"], 4),
            "agreement_rule": round(reliability(tempered_scores(dev_logits, dev_classes, t_rule), correct)["ece"], 4),
            "max_rule": round(reliability(tempered_scores(dev_logits, dev_classes, max(CONSTANT, t_rule)), correct)["ece"], 4),
        },
        "dev_precision": round(float(numpy.mean(correct)), 4),
    }
    if source_dev is not None:
        source = list(iter_target_docs(source_dev, nlp, gold_tokens=True))[: args.n]
        src_logits, src_classes, src_correct = entity_logits(nlp, source)
        t, estimate = atc_estimate(tempered_scores(src_logits, src_classes, 1.0), numpy.asarray(src_correct, dtype=float),
                                   tempered_scores(logits, classes, 1.0))
        t_atc = mean_score_temperature(logits, classes, estimate)
        result["atc"] = {"source_dev": source_dev.name, "source_sentences": len(source), "source_entities": int(len(src_correct)),
                         "source_precision": round(float(numpy.mean(src_correct)), 4), "threshold": round(t, 4),
                         "estimated_precision": round(estimate, 4), "temperature": round(t_atc, 3)}
        result["ece"]["atc"] = round(reliability(tempered_scores(dev_logits, dev_classes, t_atc), correct)["ece"], 4)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
