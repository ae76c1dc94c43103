"""The matrix products of the encoder's Linear modules, fp32 (torch.nn.functional.linear)
against int8 (torch._int_mm, what `precision int8` runs), one thread: GFLOP/s (GOP/s) and
the ratio of their times, at rows x 384 -> 1536, 1536 -> 384 and 384 -> 384 for 64 and 512
rows (the median of 3 timings, each the mean of 20 fp32 or 5 int8 runs after 2 warm-up
runs). Random inputs: the result depends on the CPU and torch only.

    python benchmarks/scripts/int8_matmul.py OUT.json
"""
import json
import statistics
import sys

import torch
from bf16_ceiling import timed


def main(output: str) -> None:
    torch.set_num_threads(1)
    out = {}
    for rows in (64, 512):
        for k, n in ((384, 1536), (1536, 384), (384, 384)):
            a, w = torch.randn(rows, k), torch.randn(n, k)
            qa = torch.randint(-127, 127, (rows, k), dtype=torch.int8)
            qw = torch.randint(-127, 127, (n, k), dtype=torch.int8).t()  # (in, out) as a view, as Int8Linear has it
            fp32 = statistics.median(timed(lambda a=a, w=w: torch.nn.functional.linear(a, w), 20, warmup=2) for _ in range(3))
            int8 = statistics.median(timed(lambda qa=qa, qw=qw: torch._int_mm(qa, qw), 5, warmup=2) for _ in range(3))
            ops = 2 * rows * k * n
            key = f"{rows}x{k}->{n}"
            out[key] = {"fp32_gflops": round(ops / fp32 / 1e9, 2), "int8_gops": round(ops / int8 / 1e9, 2),
                        "int8_over_fp32_time": round(int8 / fp32, 1)}
            print(key, out[key], flush=True)
    out["torch"] = torch.__version__
    out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    with open(output, "w", encoding="utf8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
