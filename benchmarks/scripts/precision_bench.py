"""A precision (bf16 or int8) against fp32 for one trained pipeline, measured side by
side in one run.

For each precision (--precisions, default fp32,bf16; the first is the reference) and thread count: words per second of plain `nlp.pipe`
in arrival order (the encoder's length-sorted sub-batches on, as configured) and of the
length-sorted `annotate` path (spacy_maral.inference.batching.pipe_length_sorted), over
the same sentences, the variants interleaved over several rounds (medians); then, once
per precision, raw-text P/R/F1 on each test set and the entity agreement between the
two precisions (`--speed-only`: none; for a precision too slow to score a test set with).
Writes one JSON results file.

    python benchmarks/scripts/precision_bench.py PIPELINE OUT.json \
        --test de=corpus/de-test.spacy --test es=corpus/es-test.spacy --speed-sentences 400
"""
import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Dict, List

import torch


def words_per_second(run, texts: List[str], n_words: int) -> float:
    start = time.perf_counter()
    run(texts)
    return n_words / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline")
    parser.add_argument("output", type=Path)
    parser.add_argument("--test", action="append", default=[], help="LANG=FILE.spacy (gold test set); repeat")
    parser.add_argument("--speed-sentences", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precisions", default="fp32,bf16", help="two precisions, the reference first")
    parser.add_argument("--speed-only", action="store_true", help="measure words/s only (no F1, no agreement)")
    args = parser.parse_args()
    precisions = args.precisions.split(",")
    if len(precisions) != 2:
        parser.error(f"--precisions takes two precisions, the reference first, not {args.precisions!r}")

    from spacy.tokens import DocBin

    from spacy_maral.evaluation.raw_text import evaluate_raw_text
    from spacy_maral.inference.batching import pipe_length_sorted
    from spacy_maral.pipeline.loading import encoder_runtime_of, load_pipeline
    from spacy_maral.pipeline.precision import native_bf16

    tests = dict(item.split("=", 1) for item in args.test)
    pipelines = {p: load_pipeline(args.pipeline, precision=p) for p in precisions}
    running = {p: encoder_runtime_of(nlp)["running"] for p, nlp in pipelines.items()}
    first_lang, first_path = next(iter(tests.items()))
    reference, other = precisions
    gold = list(DocBin().from_disk(first_path).get_docs(pipelines[reference].vocab))[: args.speed_sentences]
    texts = [d.text for d in gold]
    n_words = sum(len(d) for d in gold)
    bs = args.batch_size

    speed: Dict[str, Dict[str, float]] = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        samples: Dict[str, List[float]] = {}
        for _ in range(args.rounds):
            for precision, nlp in pipelines.items():
                pipe = lambda t, nlp=nlp: [d.ents for d in nlp.pipe(t, batch_size=bs)]  # noqa: E731
                sorted_ = lambda t, nlp=nlp: list(pipe_length_sorted(nlp, t, batch_size=bs, transform=lambda d: d.ents))  # noqa: E731
                samples.setdefault(f"{precision} nlp.pipe", []).append(words_per_second(pipe, texts, n_words))
                samples.setdefault(f"{precision} annotate (length-sorted)", []).append(words_per_second(sorted_, texts, n_words))
        speed[f"{threads} thread(s)"] = {k: round(statistics.median(v), 1) for k, v in samples.items()}
        print(threads, speed[f"{threads} thread(s)"], flush=True)
    torch.set_num_threads(1)

    quality: Dict[str, Dict[str, object]] = {}
    for lang, path in ({} if args.speed_only else tests).items():
        docs = list(DocBin().from_disk(path).get_docs(pipelines[reference].vocab))
        ents = {}
        for precision, nlp in pipelines.items():
            result = evaluate_raw_text(nlp, docs, batch_size=bs, count_unreachable=False)
            quality.setdefault(lang, {})[precision] = {k: round(100 * float(result[f"ents_{k}"] or 0), 2) for k in ("p", "r", "f")}
            predicted = nlp.pipe([d.text for d in docs], batch_size=bs)
            ents[precision] = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in predicted]
        same = sum(len(set(a) & set(b)) for a, b in zip(ents[reference], ents[other]))
        union = sum(len(set(a) | set(b)) for a, b in zip(ents[reference], ents[other]))
        quality[lang]["entity_agreement_pct"] = round(100 * same / max(union, 1), 2)
        quality[lang]["sentences"] = len(docs)
        print(lang, quality[lang], flush=True)

    result = {
        "claim": f"{other} inference against {reference}, one pipeline, measured side by side",
        "pipeline": str(args.pipeline), "running": running, "native_bf16": native_bf16(),
        "speed_sentences": len(texts), "speed_words": n_words, "speed_test_set": first_lang, "batch_size": bs,
        "rounds": args.rounds, "words_per_second": speed, "raw_text": quality,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "machine": f"{platform.processor() or platform.machine()}; torch {torch.__version__}",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "isa_limits": {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
                       if k in os.environ},
        "date": time.strftime("%Y-%m-%d"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
