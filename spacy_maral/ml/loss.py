"""The reweighted, logit-adjusted cross-entropy over vMF logits (docs/method.md, section 3).

    L = mean_i  w_{y_i} * CE( s(z_i) + tau * log pi , y_i )

pi is the class prior counted over all enumerated spans (O included), w_c is
proportional to 1 / log(n_c) and averages 1 over the classes. The prior term is a
training-time adjustment; prediction (MaralNER.probabilities) uses its own rule,
softmax(s(z) + inference_tau * log pi_src), which is the paper's argmax s(z) at
inference_tau = 0. Targets may be hard class indices or soft probability vectors (the
pseudo-labels of stage 2).
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy
from thinc.api import get_array_module
from thinc.loss import Loss
from thinc.types import Floats1d, Floats2d, Ints1d

from spacy_maral.util import registry


def inverse_log_weights(counts: Sequence[float]) -> numpy.ndarray:
    """Class weights proportional to 1 / log(n_c), normalised to average 1.

    counts (Sequence[float]): span counts per class.
    RETURNS (numpy.ndarray): float32 weights, one per class.
    """
    n = numpy.asarray(counts, dtype=numpy.float64)
    # log(n) must stay positive: a class seen once or never gets the weight of n = e.
    raw = 1.0 / numpy.log(numpy.maximum(n, numpy.e))
    return (raw / raw.mean()).astype(numpy.float32)


def log_prior(counts: Sequence[float], smoothing: float = 1.0) -> numpy.ndarray:
    """log of the normalised class frequencies, with add-`smoothing` counts.

    counts (Sequence[float]): counts (or soft masses) per class.
    smoothing (float): added to every count so unseen classes get a finite log.
    RETURNS (numpy.ndarray): float32 log priors.
    """
    n = numpy.asarray(counts, dtype=numpy.float64) + smoothing
    return numpy.log(n / n.sum()).astype(numpy.float32)


class ReweightedVMFLoss(Loss):
    """Logit-adjusted, class-weighted cross-entropy with hard or soft targets.

    tau (float): strength of the prior adjustment (1.0 source, 0.1 target in the paper;
        0 switches the adjustment off).
    class_weights (bool): multiply each span's loss by w_y (1 / log n_y, mean 1).
    """

    def __init__(self, tau: float = 1.0, class_weights: bool = True) -> None:
        self.tau = tau
        self.class_weights = class_weights
        self.log_prior: Optional[numpy.ndarray] = None
        self.weights: Optional[numpy.ndarray] = None

    def set_counts(self, counts: Sequence[float]) -> None:
        """Set the class prior and weights from span counts per class (O first)."""
        self.log_prior = log_prior(counts)
        self.weights = inverse_log_weights(counts) if self.class_weights else numpy.ones(len(counts), dtype=numpy.float32)

    def to_cfg(self) -> Dict[str, List[float]]:
        """The JSON-able state, to keep in the component's cfg."""
        if self.log_prior is None or self.weights is None:
            return {}
        return {"log_prior": self.log_prior.tolist(), "weights": self.weights.tolist()}

    def from_cfg(self, cfg: Dict[str, List[float]]) -> None:
        """Restore the state written by to_cfg."""
        if cfg:
            self.log_prior = numpy.asarray(cfg["log_prior"], dtype=numpy.float32)
            self.weights = numpy.asarray(cfg["weights"], dtype=numpy.float32)

    def __call__(self, guesses: Floats2d, truths: Union[Ints1d, Floats2d]) -> Tuple[Floats2d, float]:  # type: ignore[override]
        return self.get_grad_and_loss(guesses, truths)

    def get_grad(self, guesses: Floats2d, truths: Union[Ints1d, Floats2d]) -> Floats2d:  # type: ignore[override]
        return self.get_grad_and_loss(guesses, truths)[0]

    def get_loss(self, guesses: Floats2d, truths: Union[Ints1d, Floats2d]) -> float:  # type: ignore[override]
        return self.get_grad_and_loss(guesses, truths)[1]

    def get_grad_and_loss(
        self,
        guesses: Floats2d,
        truths: Union[Ints1d, Floats2d],
        mask: Optional[Floats1d] = None,
        denominator: Optional[float] = None,
    ) -> Tuple[Floats2d, float]:
        """Gradient w.r.t. the logits, and the loss value.

        guesses (Floats2d): (n, C) logits s(z).
        truths (Union[Ints1d, Floats2d]): (n,) class indices or (n, C) soft targets.
        mask (Optional[Floats1d]): (n,) 1 for spans that count, 0 for ignored ones.
        denominator (Optional[float]): what the sum is divided by (default: the number
            of counted spans, i.e. the mean).
        RETURNS (Tuple[Floats2d, float]): d_loss/d_logits and the loss.
        """
        if self.log_prior is None or self.weights is None:
            raise ValueError("ReweightedVMFLoss has no class counts: call set_counts (the component's initialize) first")
        xp = get_array_module(guesses)
        n, n_classes = guesses.shape
        if n_classes != self.log_prior.shape[0]:
            raise ValueError(f"the loss was set up for {self.log_prior.shape[0]} classes, the model gives {n_classes}")
        if truths.ndim == 1:
            hard = truths.astype("int64")
            target = xp.zeros((n, n_classes), dtype="float32")
            target[xp.arange(n), hard] = 1.0
        else:
            target = truths.astype("float32")
            hard = target.argmax(axis=1)
        weights = xp.asarray(self.weights)[hard]
        if mask is not None:
            weights = weights * mask
        count = float(mask.sum()) if mask is not None else float(n)
        denom = denominator if denominator is not None else max(count, 1.0)
        adjusted = guesses.astype("float32") + self.tau * xp.asarray(self.log_prior)[None, :]
        adjusted = adjusted - adjusted.max(axis=1, keepdims=True)
        log_z = xp.log(xp.exp(adjusted).sum(axis=1, keepdims=True))
        log_probs = adjusted - log_z
        loss = float(-(weights[:, None] * target * log_probs).sum() / denom)
        grad = weights[:, None] * (xp.exp(log_probs) - target) / denom
        return grad.astype("float32"), loss


@registry.misc("spacy_maral.ReweightedVMFLoss.v1")
def configure_reweighted_vmf_loss(tau: float = 1.0, class_weights: bool = True) -> ReweightedVMFLoss:
    """The loss of the maral_ner component.

    tau (float): strength of the logit adjustment by the log class prior (paper: 1.0 for
        the source language; 0 turns the reweighting off).
    class_weights (bool): weight each span by 1 / log(n_y), normalised to mean 1.
    RAISES (ValueError): a tau that is negative or not finite.
    """
    if not 0 <= tau < math.inf:
        raise ValueError(f"spacy_maral.ReweightedVMFLoss.v1: tau = {tau!r} is out of range: it must be >= 0 and finite")
    return ReweightedVMFLoss(tau=tau, class_weights=class_weights)
