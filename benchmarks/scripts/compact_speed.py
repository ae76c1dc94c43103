"""Words per second of several pipelines (e.g. a full student and a compact one),
measured side by side in one process: plain `nlp.pipe` on the raw text of the same
sentences, at each precision and thread count, the pipelines interleaved round by round
(medians, and the median of each round's ratio to the first pipeline).

    python benchmarks/scripts/compact_speed.py OUT.json CORPUS.spacy full=DIR compact=DIR \
        [--sentences 400] [--rounds 5] [--precisions fp32,bf16] [--threads 1]

The first pipeline is the reference of the ratios. Reads only the text of CORPUS (no tags).
"""
import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Dict, List

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("pipelines", nargs="+", help="NAME=DIR; the first is the reference")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    from spacy.tokens import DocBin

    from spacy_maral.bench.machine import machine_description
    from spacy_maral.pipeline.loading import encoder_runtime_of, load_pipeline
    from spacy_maral.pipeline.precision import native_bf16

    named = dict(item.split("=", 1) for item in args.pipelines)
    reference = next(iter(named))
    results: Dict[str, Dict[str, object]] = {}
    layers: Dict[str, int] = {}
    for precision in args.precisions.split(","):
        loaded = {name: load_pipeline(path, precision=precision) for name, path in named.items()}
        running = {name: encoder_runtime_of(nlp)["running"] for name, nlp in loaded.items()}
        for name, nlp in loaded.items():
            layers[name] = len(nlp.get_pipe("transformer").model.transformer.encoder.layer)
        docs = list(DocBin().from_disk(args.corpus).get_docs(loaded[reference].vocab))[: args.sentences]
        texts = [d.text for d in docs]
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            for nlp in loaded.values():  # warm-up
                for _ in nlp.pipe(texts[:64], batch_size=args.batch_size):
                    pass
            samples: Dict[str, List[float]] = {name: [] for name in loaded}
            words = 0
            for _ in range(args.rounds):
                for name, nlp in loaded.items():
                    start = time.perf_counter()
                    words = sum(len(doc) for doc in nlp.pipe(texts, batch_size=args.batch_size))
                    samples[name].append(words / (time.perf_counter() - start))
            ratios = {
                name: round(statistics.median(a / b for a, b in zip(samples[name], samples[reference])), 3) for name in loaded
            }
            key = f"{precision}, {threads} thread(s)"
            results[key] = {
                "running": running, "words": words,
                "words_per_second": {name: round(statistics.median(v), 1) for name, v in samples.items()},
                "words_per_second_rounds": {name: [round(x, 1) for x in v] for name, v in samples.items()},
                f"ratio_to_{reference}": ratios,
            }
            print(key, results[key]["words_per_second"], ratios, flush=True)
    out = {
        "claim": "words per second of the pipelines side by side (plain nlp.pipe on raw text)",
        "pipelines": {name: {"encoder_layers": layers[name]} for name in named}, "reference": reference,
        "sentences": args.sentences, "rounds": args.rounds, "batch_size": args.batch_size,
        "native_bf16": native_bf16(), "results": results,
        "machine": machine_description(),
        "date": time.strftime("%Y-%m-%d"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
