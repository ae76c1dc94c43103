"""Tests of the non-overlapping greedy decoder (spacy_maral.ml.decoding, docs/method.md section 4)."""
from typing import List, Tuple

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_maral.ml.decoding import NON_ENTITY, decode_doc
from spacy_maral.ml.spans import enumerate_spans

Kept = List[Tuple[int, int, int, float]]


def brute_force_greedy(starts, ends, probs) -> Kept:
    """Reference: argmax per span, sort non-O spans by probability (stable), keep if disjoint."""
    candidates = []
    for i in range(probs.shape[0]):
        c = int(numpy.argmax(probs[i]))
        if c != NON_ENTITY:
            candidates.append((float(probs[i, c]), i, c))
    candidates = sorted(candidates, key=lambda t: -t[0])  # sorted() is stable
    kept: Kept = []
    for p, i, c in candidates:
        s, e = int(starts[i]), int(ends[i])
        if all(e <= ks or ke <= s for ks, ke, _, _ in kept):
            kept.append((s, e, c, p))
    return sorted(kept)


@st.composite
def doc_predictions(draw):
    """A doc's enumerated spans (possibly a random subset, in random order) and probabilities."""
    n_tokens = draw(st.integers(min_value=0, max_value=12))
    max_width = draw(st.integers(min_value=1, max_value=5))
    n_classes = draw(st.integers(min_value=2, max_value=5))
    spans = enumerate_spans([n_tokens], max_width)
    if spans.shape[0] and draw(st.booleans()):
        perm = draw(st.permutations(list(range(spans.shape[0]))))
        keep = draw(st.integers(min_value=0, max_value=len(perm)))
        spans = spans[numpy.asarray(perm[:keep], dtype=numpy.int64).reshape(-1)]
    n = spans.shape[0]
    # Coarse values make ties (and argmax ties) common, so tie handling is exercised too.
    raw = draw(
        st.lists(
            st.lists(st.integers(min_value=0, max_value=6), min_size=n_classes, max_size=n_classes),
            min_size=n,
            max_size=n,
        )
    )
    logits = numpy.asarray(raw, dtype=numpy.float64).reshape(n, n_classes)
    if draw(st.booleans()):  # sometimes real probabilities, sometimes arbitrary scores
        exp = numpy.exp(logits)
        probs = exp / exp.sum(axis=1, keepdims=True)
    else:
        probs = logits / 6.0
    return spans[:, 1].copy(), spans[:, 2].copy(), probs.astype(numpy.float32), n_tokens


@settings(max_examples=300, deadline=None)
@given(doc_predictions())
def test_decode_properties(data) -> None:
    starts, ends, probs, n_tokens = data
    kept = decode_doc(starts, ends, probs, n_tokens)
    # sorted by start, no two kept spans overlap
    assert kept == sorted(kept)
    covered = numpy.zeros(n_tokens, dtype=int)
    for s, e, *_ in kept:
        assert 0 <= s < e <= n_tokens
        covered[s:e] += 1
    assert (covered <= 1).all()
    # every kept span is an input span whose argmax is that non-O class, with that probability
    index = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(starts, ends))}
    for s, e, c, p, row in kept:
        i = index[(s, e)]
        assert row == i
        assert c != NON_ENTITY
        assert c == int(numpy.argmax(probs[i]))
        assert p == float(probs[i, c])
        assert isinstance(p, float) and isinstance(c, int)
    # equals the brute-force greedy reference
    assert [entity[:4] for entity in kept] == brute_force_greedy(starts, ends, probs)
    # the most probable non-O span is always kept (or one tied with it)
    best = probs.argmax(axis=1) if probs.shape[0] else numpy.zeros(0, dtype=int)
    entity = numpy.flatnonzero(best != NON_ENTITY)
    if entity.shape[0]:
        top = max(float(probs[i, best[i]]) for i in entity)
        assert kept and max(entity.prob for entity in kept) == top
    else:
        assert kept == []
    # maximality: every non-O span left out overlaps a kept span with at least its probability
    for i in entity:
        s, e = int(starts[i]), int(ends[i])
        if (s, e, int(best[i]), float(probs[i, best[i]]), int(i)) in kept:
            continue
        blockers = [entity.prob for entity in kept if entity.start < e and s < entity.end]
        assert blockers and max(blockers) >= float(probs[i, best[i]])


def test_authors_bug_case_last_overlapping_span_is_not_kept() -> None:
    # The authors' pruning always kept the last entity span, even when it overlapped an
    # earlier kept one. Here the last span (1, 3) overlaps the kept (0, 2).
    starts = numpy.array([0, 2, 0, 1])
    ends = numpy.array([1, 3, 2, 3])
    probs = numpy.array(
        [
            [0.9, 0.05, 0.05],  # (0, 1): O
            [0.8, 0.1, 0.1],  # (2, 3): O
            [0.05, 0.9, 0.05],  # (0, 2): class 1, kept
            [0.1, 0.1, 0.8],  # (1, 3): class 2, overlaps (0, 2): dropped
        ],
        dtype=numpy.float32,
    )
    kept = decode_doc(starts, ends, probs, 3)
    assert [(entity.start, entity.end, entity.class_id) for entity in kept] == [(0, 2, 1)]


def test_nested_and_adjacent_spans() -> None:
    # (1, 2) is nested in the more probable (0, 3) -> dropped; (3, 4) is adjacent -> kept.
    starts = numpy.array([1, 0, 3])
    ends = numpy.array([2, 3, 4])
    probs = numpy.array([[0.1, 0.7, 0.2], [0.05, 0.05, 0.9], [0.2, 0.6, 0.2]], dtype=numpy.float32)
    kept = decode_doc(starts, ends, probs, 5)
    assert [(entity.start, entity.end, entity.class_id) for entity in kept] == [(0, 3, 2), (3, 4, 1)]
    assert kept[0].prob == numpy.float32(0.9)


def test_ties_go_to_the_earlier_enumerated_span() -> None:
    starts = numpy.array([0, 1, 0])
    ends = numpy.array([1, 2, 2])
    probs = numpy.array([[0.2, 0.8], [0.2, 0.8], [0.2, 0.8]], dtype=numpy.float32)
    kept = decode_doc(starts, ends, probs, 2)
    assert [(entity.start, entity.end) for entity in kept] == [(0, 1), (1, 2)]


def test_empty_inputs() -> None:
    empty = numpy.zeros(0, dtype=numpy.int64)
    assert decode_doc(empty, empty, numpy.zeros((0, 5), dtype=numpy.float32), 0) == []
    assert decode_doc(empty, empty, numpy.zeros((0, 5), dtype=numpy.float32), 4) == []
    # all spans O
    spans = enumerate_spans([3], 2)
    probs = numpy.tile(numpy.array([[0.7, 0.2, 0.1]], dtype=numpy.float32), (spans.shape[0], 1))
    assert decode_doc(spans[:, 1], spans[:, 2], probs, 3) == []
