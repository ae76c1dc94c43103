"""Non-overlapping decoding of one doc's span predictions (docs/method.md, section 4).

Each span takes its argmax class; non-O spans are kept greedily in order of falling
probability, and a span is kept only when none of its tokens is already covered.
(The authors' pruning always kept the last entity span even when it overlapped; this
interval check has no such case.) Arrays only: spacy_maral.pipeline.decoding masks the
spans of a Doc that can't be entities first.
"""
import math
from typing import List, NamedTuple

import numpy

NON_ENTITY = 0


class DecodedEntity(NamedTuple):
    """An entity the decoding kept.

    start (int): its first token.
    end (int): the token after its last (exclusive).
    class_id (int): its class index (never NON_ENTITY).
    prob (float): the probability of that class.
    row (int): its span's row in the arrays decoded (starts, ends, probs; for a batch,
        spacy_maral.pipeline.decoding.decode_docs: in the batch's spans).
    """

    start: int
    end: int
    class_id: int
    prob: float
    row: int


def decode_doc(starts: numpy.ndarray, ends: numpy.ndarray, probs: numpy.ndarray, n_tokens: int) -> List[DecodedEntity]:
    """Decode one doc's spans into non-overlapping entities.

    starts (numpy.ndarray): (n,) span starts (token index).
    ends (numpy.ndarray): (n,) span ends (exclusive).
    probs (numpy.ndarray): (n, C) class probabilities; column 0 is O.
    n_tokens (int): the doc's length.
    RETURNS (List[DecodedEntity]): the kept entities, sorted by start.
    """
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
    kept: List[DecodedEntity] = []
    for i in order:
        s, e = int(starts[i]), int(ends[i])
        if not taken[s:e].any():
            taken[s:e] = True
            kept.append(DecodedEntity(s, e, int(best[i]), float(best_prob[i]), int(i)))
    kept.sort()
    return kept


def check_inference_tau(value: float) -> None:
    """Refuse an inference_tau that is not a finite number >= 0 (a NaN makes every
    decision logit NaN: no entity at all, silently).

    value (float): the weight of the source class prior in the decision rule.
    """
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"inference_tau must be a finite number >= 0, not {value!r}")
