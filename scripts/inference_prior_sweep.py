"""Diagnostic: entity P/R/F1 of a maral_ner pipeline for several inference_tau values.

The transformer and span head run once per batch; only the decision rule
softmax(s(z) + tau * log pi_src) changes. Gold tokens, all gold entities counted.
    python scripts/inference_prior_sweep.py OUT.json MODEL LANG=TEST.spacy ... [--taus 0,0.5,1]
"""
import json
import sys
from pathlib import Path

import spacy
from spacy.tokens import DocBin

from spacy_maral.decoding import decode_doc
from spacy_maral.component import find_maral_ner
from spacy_maral.readers import bare_copy
from spacy_maral.spans import doc_span_slices


def main(argv):
    taus = [0.0, 0.25, 0.5, 0.75, 1.0]
    if "--taus" in argv:
        i = argv.index("--taus")
        taus = [float(x) for x in argv[i + 1].split(",")]
        argv = argv[:i] + argv[i + 2 :]
    out, model, tests = Path(argv[0]), argv[1], dict(a.split("=", 1) for a in argv[2:])
    nlp = spacy.load(model)
    ner = find_maral_ner(nlp)
    results = {}
    for lang, path in tests.items():
        refs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
        counts = {t: [0, 0, 0] for t in taus}  # tp, pred, gold
        for start in range(0, len(refs), 64):
            batch = refs[start : start + 64]
            docs = [bare_copy(d, nlp.vocab) for d in batch]
            docs = list(nlp.pipe(docs, disable=[ner.name]))
            scores = ner.predict(docs)
            for tau in taus:
                ner.inference_tau = tau
                probs = ner.probabilities(scores)
                for ref, sl in zip(batch, doc_span_slices(len(batch), scores.spans)):
                    spans = scores.spans[sl]
                    kept = decode_doc(spans[:, 1], spans[:, 2], probs[sl], len(ref))
                    pred = {(s, e, ner.classes[c]) for s, e, c, _ in kept}
                    gold = {(e.start, e.end, e.label_) for e in ref.ents}
                    counts[tau][0] += len(pred & gold)
                    counts[tau][1] += len(pred)
                    counts[tau][2] += len(gold)
        results[lang] = {}
        for tau, (tp, n_pred, n_gold) in counts.items():
            p = tp / n_pred if n_pred else 0.0
            r = tp / n_gold if n_gold else 0.0
            f = 2 * p * r / (p + r) if p + r else 0.0
            results[lang][str(tau)] = {"p": p, "r": r, "f": f}
            print(f"{lang} tau={tau}: P {p:.4f} R {r:.4f} F {f:.4f}", flush=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
