"""The raw-text F1 of a teacher ensemble as a predictor, beside each of its teachers.

A diagnostic of the pseudo-label ensemble (`pseudo-label --ensemble`): every dev sentence
is detokenized, tokenized by the first teacher with LANG's rules, and decoded from the
mean of the teachers' span probabilities, exactly as the ensemble labels target text;
each teacher alone is decoded the same way. Scored by exact character offsets
(spacy_maral.evaluation.raw_text.char_prf).

    python benchmarks/scripts/ensemble_dev.py corpus/es-dev.spacy T0 T1 T2 --lang es -o out.json
"""
import argparse
import json
import sys
from pathlib import Path
from typing import List, Sequence

from spacy.tokens import DocBin
from tqdm import tqdm

from spacy_maral.adaptation.soft_labels import PSEUDO_KEY
from spacy_maral.evaluation.raw_text import CharSpan, char_prf, raw_sentences
from spacy_maral.inference.ensemble import check_ensemble
from spacy_maral.inference.pseudo_label import label_batch
from spacy_maral.pipeline.loading import load_pipeline
from spacy_maral.pipeline.maral_ner import find_maral_ner
from spacy_maral.pipeline.tokenizer import set_tokenizer_lang


def predict(teachers: Sequence, texts: List[str], batch_size: int, desc: str) -> List[List[CharSpan]]:
    """The character spans the first teacher, averaged with the others, decodes in each text."""
    nlp, *others = teachers
    ner = find_maral_ner(nlp)
    out: List[List[CharSpan]] = []
    for start in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch"):
        docs = [nlp.make_doc(text) for text in texts[start:start + batch_size]]
        label_batch(nlp, ner, docs, others)
        out.extend([(s.start_char, s.end_char, s.label_) for s in doc.spans.get(PSEUDO_KEY, [])] for doc in docs)
    return out


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dev", type=Path, help="gold .spacy dev set")
    parser.add_argument("teachers", type=Path, nargs="+", help="teacher pipelines (two or more)")
    parser.add_argument("--lang", required=True, help="tokenizer rules of the dev set's language")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences (0 = all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", default="auto", help="the teachers' encoder precision: auto, fp32 or bf16")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(list(argv) or None)
    teachers = [load_pipeline(path, precision=args.precision) for path in args.teachers]
    docs = list(DocBin().from_disk(args.dev).get_docs(teachers[0].vocab))
    if args.limit > 0:
        docs = docs[: args.limit]
    sentences = raw_sentences(docs)
    texts, gold = [s.text for s in sentences], [s.gold for s in sentences]
    for nlp in teachers:
        set_tokenizer_lang(nlp, args.lang)
    check_ensemble(teachers[0], teachers[1:])
    result = {"dev": str(args.dev), "sentences": len(texts), "lang": args.lang, "teachers": {}, "ensemble": {}}
    for path, nlp in zip(args.teachers, teachers):
        prf = char_prf(gold, predict([nlp], texts, args.batch_size, path.parent.name))
        result["teachers"][str(path)] = {k: prf[k] for k in ("ents_p", "ents_r", "ents_f")}
    prf = char_prf(gold, predict(teachers, texts, args.batch_size, "ensemble"))
    result["ensemble"] = {k: prf[k] for k in ("ents_p", "ents_r", "ents_f", "ents_per_type")}
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    for name, scores in [*result["teachers"].items(), ("ensemble", result["ensemble"])]:
        print(f"{name}: P {100 * scores['ents_p']:.2f} R {100 * scores['ents_r']:.2f} F1 {100 * scores['ents_f']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
