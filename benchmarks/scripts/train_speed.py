"""Training steps per second of stage 1, side by side: each precision and each
`train_bucket_rows` (the encoder's length-sorted sub-batches in training), interleaved in
rounds, one thread.

configs/source.cfg with multilingual-e5-small (word embeddings frozen, as configured),
batches of 8 English training sentences tokenized from their raw text, the config's
dropout; 5 warm-up steps, then N timed steps, for every setting in every round.

    python benchmarks/scripts/train_speed.py N ENCODER_DIR EN_TRAIN.spacy [--precisions fp32,bf16]
        [--rows 0] [--rounds 2] [--output OUT.json]
"""
import argparse
import json
import platform
import random
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import spacy
import torch
from spacy.tokens import DocBin
from spacy.training import Example
from thinc.api import Config, fix_random_seed

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "source.cfg"


def steps_per_second(cfg: Config, train: str, precision: str, rows: int, n: int) -> float:
    """Steps per second of N timed nlp.update steps (after 5 warm-up steps)."""
    fix_random_seed(0)
    cfg["components"]["transformer"]["model"]["precision"] = precision  # spacy_maral.EncoderRuntime.v1
    cfg["components"]["transformer"]["model"]["train_bucket_rows"] = rows
    nlp = spacy.util.load_model_from_config(cfg.interpolate(), auto_fill=True)
    gold = list(DocBin().from_disk(train).get_docs(nlp.vocab))
    random.Random(0).shuffle(gold)
    examples = [Example(nlp.make_doc(d.text), d) for d in gold[: 8 * (n + 5) + 200]]
    sample = examples[:200]
    nlp.initialize(lambda: sample)
    optimizer = nlp.create_optimizer()
    dropout = float(cfg["training"]["dropout"])
    batches = [examples[200 + 8 * i: 208 + 8 * i] for i in range(n + 5)]
    for batch in batches[:5]:
        nlp.update(batch, sgd=optimizer, drop=dropout, losses={})
    start = time.perf_counter()
    for batch in batches[5:]:
        nlp.update(batch, sgd=optimizer, drop=dropout, losses={})
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("encoder")
    parser.add_argument("train")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--rows", default="0", help="train_bucket_rows settings, comma-separated (0: the batch whole)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = Config().from_disk(CONFIG, interpolate=False)
    cfg["paths"]["encoder"] = args.encoder
    cfg["paths"]["train"] = cfg["paths"]["dev"] = args.train
    results: Dict[str, List[float]] = {}
    for rnd in range(args.rounds):
        for precision in args.precisions.split(","):
            for rows in (int(r) for r in args.rows.split(",")):
                key = f"{precision} rows={rows}"
                results.setdefault(key, []).append(round(steps_per_second(cfg, args.train, precision, rows, args.n), 3))
                print(f"round {rnd}: {key}: {results[key][-1]} steps/s", flush=True)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), platform.processor())
    report = {"steps_per_second": results, "steps": args.n, "rounds": args.rounds, "threads": 1, "cpu": model,
              "avx512_bf16": "avx512_bf16" in cpu, "torch": torch.__version__}
    print(json.dumps(report))
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
