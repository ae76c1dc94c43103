"""Where bf16's speed-up on this CPU stops: one matrix product, the bare encoder, and the
share of the encoder in the whole pipeline's time, fp32 against bf16, one thread.

    python benchmarks/scripts/bf16_ceiling.py PIPELINE TEST.spacy OUT.json --sentences 400

1. torch.nn.functional.linear at the encoder's shapes (rows x 384 -> 1536, 1536 -> 384,
   384 -> 384), fp32 against bf16 inputs and weights: GFLOP/s and the ratio;
2. the pipeline's Hugging Face encoder alone on the sentences' word pieces, sorted by
   length, in sub-batches of 16 and 64 rows: fp32, under torch.autocast(bfloat16) and with
   bf16 weights (3 interleaved rounds, medians);
3. cProfile of the bf16 pipeline's nlp.pipe over the sentences: the share of the
   encoder's forward in the total.
"""
import argparse
import copy
import cProfile
import json
import pstats
import statistics
import time
from pathlib import Path

import torch


def timed(fn, repeat: int, warmup: int = 3) -> float:
    """Mean seconds of `repeat` runs of `fn`, after `warmup` runs."""
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def matmul_ratios() -> list:
    rows = []
    for m in (64, 448, 1792):
        for k, n in ((384, 1536), (1536, 384), (384, 384)):
            x, w = torch.randn(m, k), torch.randn(n, k)
            xb, wb = x.bfloat16(), w.bfloat16()
            fp32 = timed(lambda x=x, w=w: torch.nn.functional.linear(x, w), 100)
            bf16 = timed(lambda xb=xb, wb=wb: torch.nn.functional.linear(xb, wb), 100)
            flop = 2 * m * k * n
            rows.append({"rows": m, "in": k, "out": n, "fp32_gflops": round(flop / fp32 / 1e9, 1),
                         "bf16_gflops": round(flop / bf16 / 1e9, 1), "ratio": round(fp32 / bf16, 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline")
    parser.add_argument("test", help=".spacy file whose first sentences are used")
    parser.add_argument("output", type=Path)
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from spacy.tokens import DocBin

    from spacy_maral.pipeline.loading import load_pipeline

    matmuls = matmul_ratios()
    nlp = load_pipeline(args.pipeline, precision="bf16")
    texts = [d.text for d in DocBin().from_disk(args.test).get_docs(nlp.vocab)][: args.sentences]
    transformer = nlp.get_pipe("transformer")
    hf = next(node.shims[0]._model for node in transformer.model.walk() if node.shims)
    tokenizer = transformer.model.tokenizer
    pieces = sorted((tokenizer(t)["input_ids"] for t in texts), key=len)
    hf.eval()
    hf_bf16 = copy.deepcopy(hf).to(torch.bfloat16)

    def batches(size: int) -> list:
        out = []
        for i in range(0, len(pieces), size):
            chunk = pieces[i : i + size]
            width = max(map(len, chunk))
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, p in enumerate(chunk):
                ids[j, : len(p)] = torch.tensor(p)
                mask[j, : len(p)] = 1
            out.append((ids, mask))
        return out

    def forward(model, data, autocast: bool) -> float:
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for ids, mask in data:
                model(input_ids=ids, attention_mask=mask)
        return time.perf_counter() - start

    encoder = {}
    for size in (16, 64):
        data = batches(size)
        samples = {"fp32": [], "autocast bf16": [], "bf16 weights": []}
        for _ in range(args.rounds):
            samples["fp32"].append(forward(hf, data, False))
            samples["autocast bf16"].append(forward(hf, data, True))
            samples["bf16 weights"].append(forward(hf_bf16, data, False))
        base = statistics.median(samples["fp32"])
        encoder[f"{size} rows"] = {k: {"seconds": round(statistics.median(v), 3), "x_fp32": round(base / statistics.median(v), 2)}
                                   for k, v in samples.items()}
        print(size, encoder[f"{size} rows"], flush=True)

    list(nlp.pipe(texts[:64], batch_size=64))
    profile = cProfile.Profile()
    profile.enable()
    start = time.perf_counter()
    list(nlp.pipe(texts, batch_size=64))
    total = time.perf_counter() - start
    profile.disable()
    stats = pstats.Stats(profile).stats
    encoder_s = sum(v[3] for (file, _, name), v in stats.items()
                    if name == "_forward" and file.endswith("encoder_runtime.py"))  # the transformer's forward, sub-batches in
    linear_s = sum(v[2] for (_, _, name), v in stats.items() if name == "<built-in method torch._C._nn.linear>")
    out = {
        "claim": "bf16's speed-up on this CPU is bounded by its matrix products (no AMX: AVX512-BF16 only)",
        "command": f"python benchmarks/scripts/bf16_ceiling.py {args.pipeline} {args.test} {args.output} --sentences {args.sentences}",
        "date": time.strftime("%Y-%m-%d"),
        "sentences": len(texts),
        "matmul": matmuls,
        "encoder_forward": encoder,
        "pipeline_profile_bf16": {"total_s": round(total, 2), "linear_s": round(linear_s, 2),
                                  "linear_share": round(linear_s / total, 3), "encoder_forward_s": round(encoder_s, 2),
                                  "encoder_share": round(encoder_s / total, 3)},
    }
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf8")
    print(json.dumps(out["pipeline_profile_bf16"]))


if __name__ == "__main__":
    main()
