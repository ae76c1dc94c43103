"""Non-overlapping decoding of one doc's span predictions (docs/method.md, section 4).

Each span takes its argmax class; non-O spans are kept greedily in order of falling
probability, and a span is kept only when none of its tokens is already covered.
(The authors' pruning always kept the last entity span even when it overlapped; this
interval check has no such case.) Arrays only: spacy_maral.pipeline.decoding masks the
spans of a Doc that can't be entities first.
"""
from typing import List, Tuple

import numpy

NON_ENTITY = 0


def decode_doc(
    starts: numpy.ndarray,
    ends: numpy.ndarray,
    probs: numpy.ndarray,
    n_tokens: int,
) -> List[Tuple[int, int, int, float]]:
    """Decode one doc's spans into non-overlapping entities.

    starts (numpy.ndarray): (n,) span starts (token index).
    ends (numpy.ndarray): (n,) span ends (exclusive).
    probs (numpy.ndarray): (n, C) class probabilities; column 0 is O.
    n_tokens (int): the doc's length.
    RETURNS (List[Tuple[int, int, int, float]]): (start, end, class index, probability)
        of the kept entities, sorted by start.
    """
    return [kept[:4] for kept in decode_doc_rows(starts, ends, probs, n_tokens)]


def decode_doc_rows(
    starts: numpy.ndarray, ends: numpy.ndarray, probs: numpy.ndarray, n_tokens: int
) -> List[Tuple[int, int, int, float, int]]:
    """decode_doc, with the row (index into starts, ends, probs) of each kept entity last."""
    if probs.shape[0] == 0:
        return []
    best = probs.argmax(axis=1)
    best_prob = probs[numpy.arange(probs.shape[0]), best]
    candidates = numpy.flatnonzero(best != NON_ENTITY)
    if candidates.shape[0] == 0:
        return []
    # Stable sort: ties are broken by enumeration order (shorter, then earlier spans).
    order = candidates[numpy.argsort(-best_prob[candidates], kind="stable")]
    taken = numpy.zeros(n_tokens, dtype=bool)
    kept: List[Tuple[int, int, int, float, int]] = []
    for i in order:
        s, e = int(starts[i]), int(ends[i])
        if not taken[s:e].any():
            taken[s:e] = True
            kept.append((s, e, int(best[i]), float(best_prob[i]), int(i)))
    kept.sort()
    return kept
