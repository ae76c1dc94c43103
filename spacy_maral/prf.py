"""Precision, recall and F1 from counts: the one formula every score of the package uses
(raw-text evaluation, the guard's agreement, stage 2's pseudo-label diagnostics)."""
from typing import Tuple


def prf(tp: int, fp: int, fn: int) -> Tuple[float, float, float]:
    """(precision, recall, F1) of `tp` true positives, `fp` false positives and `fn`
    false negatives; 0.0 where a ratio has nothing to divide by."""
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f
