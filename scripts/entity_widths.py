"""Entity widths in tokens, on the gold tokens and after a tokenizer's rules.

    python scripts/entity_widths.py runs/entity-widths.json \
        en=../shared/data/conll/en/train.conll de=../shared/data/conll/de/test.conll ...

For each CoNLL file (LANG=PATH; LANG also names the tokenizer rules) it writes: the
width histogram of the gold entities on the file's own tokens, with the `xx` rules and
with the language's own rules (spacy_maral.tokenizer.v1) applied to the raw text
(spacy_maral.detokenize); how many gold entities no tokenization can reach (a boundary
inside a token); the smallest width that covers >= 99.5% of the entities; and the spans
per sentence that each max_width enumerates. The max_width default is read off the
source training file with the source language's rules.
"""
import json
import sys
from collections import Counter
from pathlib import Path

import spacy
from spacy.vocab import Vocab

from spacy_maral.convert import read_conll
from spacy_maral.spans import count_spans
from spacy_maral.tokenizer import set_tokenizer_lang

COVER = 0.995


def widths(path: str, lang: str) -> dict:
    rules = {"gold": None, "xx": spacy.blank("xx"), lang: set_tokenizer_lang(spacy.blank("xx"), lang)}
    out = {}
    docs = list(read_conll(path, vocab=Vocab()))
    for name, nlp in rules.items():
        hist: Counter = Counter()
        misaligned = 0
        tokens = 0
        spans_at = Counter()
        for doc in docs:
            pred = doc if nlp is None else nlp.make_doc(doc.text)
            tokens += len(pred)
            for w in range(1, 11):
                spans_at[w] += count_spans(len(pred), w)
            for ent in doc.ents:
                span = pred.char_span(ent.start_char, ent.end_char, alignment_mode="strict")
                if span is None:
                    misaligned += 1
                else:
                    hist[len(span)] += 1
        total = sum(hist.values()) + misaligned
        cum, cover = 0, None
        for w in sorted(hist):
            cum += hist[w]
            if cover is None and cum >= COVER * total:
                cover = w
        out[name] = {
            "entities": total, "misaligned": misaligned, "tokens": tokens,
            "widths": {str(k): hist[k] for k in sorted(hist)},
            "share_wider_than": {str(w): round(sum(v for k, v in hist.items() if k > w) / total, 5) for w in range(1, 11)},
            "smallest_width_covering_99.5%": cover,
            "spans_per_sentence": {str(w): round(spans_at[w] / len(docs), 2) for w in range(1, 11)},
        }
    return out


def main(output: str, *specs: str) -> None:
    result = {}
    for spec in specs:
        lang, _, path = spec.partition("=")
        result[spec] = widths(path, lang)
        for name, r in result[spec].items():
            print(f"{spec} [{name}] entities {r['entities']} misaligned {r['misaligned']} "
                  f"cover99.5 {r['smallest_width_covering_99.5%']} wider>4 {r['share_wider_than']['4']:.4f} "
                  f"wider>5 {r['share_wider_than']['5']:.4f} wider>6 {r['share_wider_than']['6']:.4f}")
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:])
