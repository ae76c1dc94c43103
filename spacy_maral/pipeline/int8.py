"""int8 prediction, for CPUs with int8 dot products (VNNI) and without native bfloat16
(on an AVX2-only CPU torch's int8 product is slow: precision warns): the encoder's Linear modules multiply
int8 by int8 into int32 (`torch._int_mm`), with one scale per output channel of the weight
and one per token (row) of the activations, quantized on the fly. No calibration data: the
scales come from the weights and from each batch's own rows.

Only prediction runs in int8 (no gradient is being recorded); training and any forward that
records a gradient run the fp32 weights as they are. The fp32 weights stay the module's
parameters under their own names and the int8 copies are buffers that are not saved, so a
pipeline saved after int8 prediction holds the same fp32 weights as before; the int8 copy is
made again whenever the weights change.
"""
from functools import lru_cache
from typing import Optional, Tuple

import torch
from torch.nn import functional as F

# torch._int_mm runs on CPU for row counts above 16; fewer rows run as a float product of
# the same int8 values (identical results, a batch that small costs nothing)
MIN_ROWS = 17


@lru_cache(maxsize=None)
def int8_supported() -> bool:
    """Whether this torch build multiplies int8 matrices on the CPU (torch._int_mm); probed
    once per process (the runtime asks on every forward)."""
    if not hasattr(torch, "_int_mm"):
        return False
    try:
        a = torch.ones((MIN_ROWS, 8), dtype=torch.int8)
        return bool(torch._int_mm(a, torch.ones((8, 8), dtype=torch.int8))[0, 0] == 8)
    except RuntimeError:
        return False


# int8_slowdown's probe: one product at an encoder's shape (rows x 384 -> 384)
PROBE_SHAPE = (128, 384, 384)


@lru_cache(maxsize=None)
def int8_slowdown() -> float:
    """How many times the time of the fp32 product torch._int_mm takes on this CPU, at
    one of the encoder's shapes (PROBE_SHAPE, the weight in the layout Int8Linear gives
    it; the faster of 3 runs of each, on one thread), measured once per process. With
    int8 dot-product instructions (VNNI) int8 is the faster (the pipeline ran 1.96x
    fp32's words/s on the Zen 5); on an AVX2-only CPU (an AMD EPYC Zen 3) torch has no
    fast int8 kernel (BENCHMARKS.md, "An AVX2-only CPU": its raw "probe").
    """
    import time

    rows, k, n = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    a, w = torch.randn(rows, k, generator=generator), torch.randn(n, k, generator=generator)
    qa, qw = quantize_rows(a)[0], quantize_rows(w)[0].t()  # (in, out) as a view, as Int8Linear has it

    def fastest(product) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            product()
            times.append(time.perf_counter() - start)
        return min(times)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fp32 = fastest(lambda: F.linear(a, w))
        return fastest(lambda: torch._int_mm(qa, qw)) / max(fp32, 1e-9)
    finally:
        torch.set_num_threads(threads)


def quantize_rows(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row: RETURNS (q, scale) with x ~ q * scale, q in [-127, 127] and
    scale (rows, 1) the row's largest |x| / 127 (a row of zeros gets scale 1e-12 / 127).

    x (torch.Tensor): a 2-d float tensor.
    """
    scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale


def int8_matmul(q: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """q (rows, in) @ weight_t (in, out), both int8, as int32 values in float32."""
    if q.shape[0] >= MIN_ROWS:
        return torch._int_mm(q, weight_t).float()
    return q.float() @ weight_t.float()


class Int8Linear(torch.nn.Linear):
    """An nn.Linear (the same parameters, the same state_dict) that predicts in int8.

    linear (torch.nn.Linear): the module it takes the place of; its weight and bias
        Parameters are shared, not copied.
    """

    def __init__(self, linear: torch.nn.Linear) -> None:
        torch.nn.Module.__init__(self)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.register_buffer("weight_int8", None, persistent=False)
        self.register_buffer("weight_scale", None, persistent=False)
        self._quantized_from: Optional[Tuple[int, int]] = None

    def _quantize_weight(self) -> None:
        source = (self.weight.data_ptr(), self.weight._version)
        if self._quantized_from == source and self.weight_int8 is not None:
            return
        q, scale = quantize_rows(self.weight.detach().float())  # one scale per output channel
        # (in, out) as a view of the (out, in) rows: the layout _int_mm ran fastest with
        self.weight_int8 = q.t()
        self.weight_scale = scale.reshape(1, -1)
        self._quantized_from = source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        self._quantize_weight()
        shape = x.shape
        q, scale = quantize_rows(x.reshape(-1, shape[-1]).float())
        y = int8_matmul(q, self.weight_int8) * scale * self.weight_scale
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)


def to_int8(module: torch.nn.Module) -> int:
    """Give every nn.Linear inside `module` (in place) int8 prediction: each becomes an
    Int8Linear sharing its parameters. Idempotent. RETURNS how many became one now.

    module (torch.nn.Module): e.g. the Hugging Face encoder.
    """
    swapped = 0
    for child in list(module.modules()):
        for child_name, sub in list(child.named_children()):
            if type(sub) is torch.nn.Linear:
                setattr(child, child_name, Int8Linear(sub))
                swapped += 1
    return swapped
