"""The factors of a weighted mean of pipelines' weights (checkpoint averaging, soups,
a teacher interpolated with its student), checked without importing spaCy, so that
`average` refuses bad weights before it loads anything."""
import math
from typing import List, Optional, Sequence


def mean_factors(weights: Optional[Sequence[float]], n: int) -> List[float]:
    """One factor per pipeline: the given weights, else 1 each (the uniform mean); the
    mean divides by their sum.

    weights (Optional[Sequence[float]]): one weight per pipeline, or None.
    n (int): how many pipelines are averaged.
    RAISES (ValueError): not one weight per pipeline, a weight that is negative, NaN or
        infinite, or weights that are all 0.
    """
    factors = [1.0] * n if weights is None else [float(w) for w in weights]
    if len(factors) != n or not all(math.isfinite(f) and f >= 0 for f in factors) or sum(factors) <= 0:
        raise ValueError(f"average: give one finite weight >= 0 per pipeline, not all 0 ({n} pipelines, weights {factors})")
    return factors
