"""Von Mises-Fisher numerics: a stable log-Bessel function and the vMF class state.

The contrastive logit of docs/method.md, section 2 needs log I_v(k), the log of the modified
Bessel function of the first kind, for v = d/2 - 1 (31 for d = 64) and k up to about
1e5. I_v(k) overflows float64 long before that, so log I_v is computed directly:

- for k <= SERIES_MAX_ARG: the power series, summed in log space with logsumexp;
- above: the uniform (Debye) asymptotic expansion, whose error shrinks like
  (1 / k)^5 for large k and like 1 / v^5 for large v.

Both run in float64 with plain torch operations, so the same code runs on CPU and GPU.
The derivative d/dk log I_v(k) = I_{v+1}(k) / I_v(k) + v / k is computed from the same
function (autograd.Function), never by differentiating through the series.
"""
import math
from typing import List, Sequence, Tuple

import numpy
import torch

from spacy_maral.util import logger

SERIES_MAX_ARG = 50.0
SERIES_TERMS = 160
MIN_ARG = 1e-30


def _log_iv_series(v: float, x: torch.Tensor) -> torch.Tensor:
    """log I_v(x) by the power series, accurate for 0 < x <= SERIES_MAX_ARG.

    v (float): the order, >= 0.
    x (torch.Tensor): float64 arguments.
    RETURNS (torch.Tensor): log I_v(x), same shape as x.
    """
    k = torch.arange(SERIES_TERMS, dtype=x.dtype, device=x.device)
    log_half_x = torch.log(x / 2.0).unsqueeze(-1)
    terms = (
        (2.0 * k + v) * log_half_x
        - torch.lgamma(k + 1.0)
        - torch.lgamma(k + v + 1.0)
    )
    return torch.logsumexp(terms, dim=-1)


def _log_iv_debye(v: float, x: torch.Tensor) -> torch.Tensor:
    """log I_v(x) by the uniform asymptotic (Debye) expansion, for large x or v.

    Abramowitz & Stegun 9.7.7 with the polynomials u_1..u_4 of 9.3.9.

    v (float): the order, > 0.
    x (torch.Tensor): float64 arguments.
    RETURNS (torch.Tensor): log I_v(x), same shape as x.
    """
    z = x / v
    root = torch.sqrt(1.0 + z * z)
    t = 1.0 / root
    eta = root + torch.log(z / (1.0 + root))
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 * t2) / 1152.0
    u3 = (
        t * t2
        * (30375.0 - 369603.0 * t2 + 765765.0 * t2**2 - 425425.0 * t2**3)
        / 414720.0
    )
    u4 = (
        t2 * t2
        * (
            4465125.0
            - 94121676.0 * t2
            + 349922430.0 * t2**2
            - 446185740.0 * t2**3
            + 185910725.0 * t2**4
        )
        / 39813120.0
    )
    correction = 1.0 + u1 / v + u2 / v**2 + u3 / v**3 + u4 / v**4
    return (
        v * eta
        - 0.5 * math.log(2.0 * math.pi * v)
        + 0.5 * torch.log(t)
        + torch.log(correction)
    )


def log_iv_raw(v: float, x: torch.Tensor) -> torch.Tensor:
    """log I_v(x) without autograd support, in float64.

    v (float): the order; must be >= 0.5 (vMF in d >= 3 dimensions).
    x (torch.Tensor): non-negative arguments (any float dtype; computed in float64).
    RETURNS (torch.Tensor): float64 tensor of log I_v(x).
    """
    if v < 0.5:
        raise ValueError(f"log_iv supports orders v >= 0.5, got {v}")
    x64 = x.to(torch.float64).clamp_min(MIN_ARG)
    small = x64 <= SERIES_MAX_ARG
    out = torch.empty_like(x64)
    if bool(small.any()):
        out[small] = _log_iv_series(v, x64[small])
    if bool((~small).any()):
        out[~small] = _log_iv_debye(v, x64[~small])
    return out


def bessel_ratio(v: float, x: torch.Tensor) -> torch.Tensor:
    """I_{v+1}(x) / I_v(x), the mean resultant length of a vMF with concentration x.

    v (float): the order (d/2 - 1 for a vMF in d dimensions).
    x (torch.Tensor): non-negative arguments.
    RETURNS (torch.Tensor): float64 ratios in [0, 1).
    """
    return torch.exp(log_iv_raw(v + 1.0, x) - log_iv_raw(v, x))


class _LogIv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, v: float) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        ctx.v = v
        return log_iv_raw(v, x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        x64 = x.to(torch.float64).clamp_min(MIN_ARG)
        deriv = bessel_ratio(ctx.v, x64) + ctx.v / x64
        return (grad * deriv).to(x.dtype), None


def log_iv(v: float, x: torch.Tensor) -> torch.Tensor:
    """Differentiable log I_v(x), float64, stable for x in [1e-30, 1e6].

    v (float): the order, >= 0.5.
    x (torch.Tensor): non-negative arguments.
    RETURNS (torch.Tensor): float64 tensor of log I_v(x); its gradient w.r.t. x is
        I_{v+1}(x) / I_v(x) + v / x.
    """
    return _LogIv.apply(x, v)


def log_vmf_normalizer(dim: int, kappa: torch.Tensor) -> torch.Tensor:
    """log C_d(kappa) = (d/2 - 1) log kappa - (d/2) log(2 pi) - log I_{d/2-1}(kappa).

    dim (int): the dimension d of the sphere's ambient space (>= 3).
    kappa (torch.Tensor): concentrations (> 0).
    RETURNS (torch.Tensor): float64 log normalisers. Its derivative w.r.t. kappa is
        -I_{d/2}(kappa) / I_{d/2-1}(kappa).
    """
    v = dim / 2.0 - 1.0
    kappa64 = kappa.to(torch.float64).clamp_min(MIN_ARG)
    return v * torch.log(kappa64) - (dim / 2.0) * math.log(2.0 * math.pi) - log_iv(v, kappa64)


def vmf_contrastive_logits(
    z: torch.Tensor, mu: torch.Tensor, kappa: torch.Tensor, temperature: float
) -> torch.Tensor:
    """The closed-form contrastive logit s_c(z) = log C(kappa_c) - log C(|kappa_c mu_c + z/T|).

    z (torch.Tensor): (n, d) unit span vectors.
    mu (torch.Tensor): (C, d) unit class mean directions.
    kappa (torch.Tensor): (C,) class concentrations.
    temperature (float): the contrastive temperature T.
    RETURNS (torch.Tensor): (n, C) float64 logits, differentiable w.r.t. z.
    """
    dim = z.shape[-1]
    z64 = z.to(torch.float64)
    centre = (kappa.to(torch.float64)[:, None] * mu.to(torch.float64))  # (C, d)
    # |kappa mu + z/T|^2 expanded, so no (n, C, d) tensor is built.
    sq = (
        (centre * centre).sum(-1)[None, :]
        + 2.0 * (z64 @ centre.T) / temperature
        + (z64 * z64).sum(-1, keepdim=True) / temperature**2
    )
    norm = torch.sqrt(sq.clamp_min(MIN_ARG))
    return log_vmf_normalizer(dim, kappa)[None, :] - log_vmf_normalizer(dim, norm)


def kappa_from_resultant(resultant: torch.Tensor, dim: int, max_kappa: float = 1e5) -> torch.Tensor:
    """Concentration estimate kappa = d R / (1 - R^2) (Banerjee et al.), clipped.

    resultant (torch.Tensor): mean resultant lengths R in [0, 1].
    dim (int): the dimension d.
    max_kappa (float): upper clip.
    RETURNS (torch.Tensor): concentrations in [1e-3, max_kappa].
    """
    r = resultant.clamp(0.0, 1.0 - 1e-9)
    return (dim * r / (1.0 - r * r)).clamp(1e-3, max_kappa)


COLLAPSE_COSINE = 0.99


def collapsed_class_pairs(
    cosines: numpy.ndarray, classes: Sequence[str], threshold: float = COLLAPSE_COSINE
) -> List[Tuple[str, str, float]]:
    """The class pairs whose mean directions have (nearly) merged, worst first.

    When every class mean points the same way, every logit s_c(z) is the same function
    of z, the loss gradient with respect to z cancels, and training cannot separate the
    classes any more: a collapse that the epoch-end statistics can lock in.

    cosines (numpy.ndarray): (C, C) cosines between the class mean directions.
    classes (Sequence[str]): the class names, in the same order.
    threshold (float): the cosine above which a pair counts as merged.
    RETURNS (List[Tuple[str, str, float]]): (class, class, cosine) per merged pair.
    """
    n = len(classes)
    pairs = [
        (classes[i], classes[j], float(cosines[i, j]))
        for i in range(n)
        for j in range(i + 1, n)
        if float(cosines[i, j]) > threshold
    ]
    return sorted(pairs, key=lambda p: -p[2])


def warn_collapsed(merged: List[Tuple[str, str, float]]) -> None:
    """Log a warning when class means have merged (collapsed_class_pairs): what it means
    and what to do.

    merged (List[Tuple[str, str, float]]): the merged pairs, worst first.
    """
    if not merged:
        return
    a, b, cos = merged[0]
    logger.warning(
        "maral_ner: after this epoch the class means of %d class pair(s) are nearly identical "
        "(largest cosine %.4f, %s/%s): the span vectors do not separate the classes yet. "
        "The next epoch's logits come from these means, and if all of them coincide no "
        "gradient can separate the classes again (the predictions stay uniform). In stage 2 "
        "this happens when the first epoch is shorter than the time the student needs to "
        "separate the classes: use fewer, longer epochs (a larger max_target_docs or a "
        "smaller adaptation.n_epochs).",
        len(merged), cos, a, b,
    )
