"""The encoder's precision: which of "auto", "fp32", "bf16" and "int8" runs on this
machine, and the runtime settings a config may give (pipeline.encoder_runtime runs them).
"""
from functools import lru_cache

import torch

from spacy_maral.pipeline.int8 import int8_slowdown, int8_supported
from spacy_maral.util import logger

PRECISIONS = ("auto", "fp32", "bf16", "int8")
# int8 chosen on a CPU whose int8 product takes more than this many times fp32's: a warning
INT8_SLOW = 2.0


def check_precision(precision: str) -> None:
    """Refuse a precision that can't run here: an unknown one, or "int8" where torch
    can't multiply int8 matrices on this CPU (what a config's resolution checks).

    precision (str): "auto", "fp32", "bf16" or "int8".
    RAISES (ValueError): it can't run.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "int8" and not int8_supported():
        raise ValueError(f"precision int8: this torch ({torch.__version__}) can't multiply int8 matrices on this CPU "
                         "(torch._int_mm); use auto or fp32")


def native_bf16() -> bool:
    """Whether this machine's CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), as
    torch reports it."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve_precision(precision: str, on_gpu: bool = False) -> str:
    """The precision that runs: "fp32", "bf16" or "int8".

    precision (str): "auto", "fp32", "bf16" or "int8".
    on_gpu (bool): the encoder runs on a GPU (then only "fp32": spacy-transformers'
        mixed_precision setting governs the GPU).
    RAISES (ValueError): an unknown precision, or "int8" where torch can't multiply int8
        matrices on this CPU.
    """
    check_precision(precision)
    if on_gpu:
        if precision == "int8":
            _warn_once("precision int8 is for CPUs; the encoder is on a GPU and runs fp32")
        return "fp32"
    if precision == "auto":
        return "bf16" if native_bf16() else "fp32"
    if precision == "bf16" and not native_bf16():
        _warn_once("precision bf16 on a CPU without native bfloat16 (AVX512-BF16 or AMX): it runs, but slowly")
    if precision == "int8" and (slowdown := int8_slowdown()) > INT8_SLOW:
        _warn_once(f"precision int8: this CPU's int8 matrix product takes {slowdown:.0f}x the time of fp32's (torch has "
                   "no fast int8 kernel here, as on an AVX2-only CPU without VNNI), so the encoder runs many times "
                   "slower; use auto or fp32")
    return precision


@lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    """Log `message` as a warning the first time only: the runtime resolves its precision
    on every forward, and a setting's warning is news once per process."""
    logger.warning(message)


def check_settings(precision: str, bucket_rows: int, train_bucket_rows: int = 0) -> None:
    """Refuse a setting that can't run (when the config is resolved; the runtime, which
    knows where the encoder runs, warns about a precision that runs slowly)."""
    check_precision(precision)
    if bucket_rows < 1:
        raise ValueError(f"bucket_rows must be at least 1, not {bucket_rows}")
    if train_bucket_rows < 0:
        raise ValueError(f"train_bucket_rows must be 0 (off) or at least 1, not {train_bucket_rows}")
