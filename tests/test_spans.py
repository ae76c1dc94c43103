"""Tests of span enumeration and the per-span surface features (spacy_maral.ml.spans)."""
from typing import List

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_maral.ml.spans import (
    CASING_CLASSES,
    N_CASING,
    casing_class,
    casing_counts,
    count_spans,
    doc_span_slices,
    enumerate_spans,
    global_token_indices,
)

lengths_strategy = st.lists(st.integers(min_value=0, max_value=9), min_size=0, max_size=6)
width_strategy = st.integers(min_value=1, max_value=6)


@settings(max_examples=200, deadline=None)
@given(lengths=lengths_strategy, max_width=width_strategy)
def test_enumerate_spans_properties(lengths: List[int], max_width: int) -> None:
    spans = enumerate_spans(lengths, max_width)
    assert spans.dtype == numpy.int64
    assert spans.ndim == 2 and spans.shape[1] == 3
    assert spans.shape[0] == sum(count_spans(n, max_width) for n in lengths)
    # grouped by doc, in doc order
    assert (numpy.diff(spans[:, 0]) >= 0).all()
    widths = spans[:, 2] - spans[:, 1]
    assert ((widths >= 1) & (widths <= max_width)).all()
    for i, n in enumerate(lengths):
        mine = spans[spans[:, 0] == i]
        assert mine.shape[0] == count_spans(n, max_width)
        assert ((mine[:, 1] >= 0) & (mine[:, 2] <= n)).all()
        # exactly every (start, end) with 1 <= end - start <= max_width, once
        expected = {(s, e) for s in range(n) for e in range(s + 1, min(s + max_width, n) + 1)}
        got = [(int(s), int(e)) for s, e in mine[:, 1:]]
        assert len(got) == len(set(got))
        assert set(got) == expected
        # within a doc: by width, then by start
        assert got == sorted(got, key=lambda se: (se[1] - se[0], se[0]))


def test_count_spans_closed_form() -> None:
    for n in range(0, 15):
        for w in range(1, 8):
            m = min(n, w)
            assert count_spans(n, w) == m * n - m * (m - 1) // 2
    assert count_spans(6, 4) == 6 + 5 + 4 + 3


def test_enumerate_spans_rejects_bad_width() -> None:
    with pytest.raises(ValueError, match="max_width"):
        enumerate_spans([3], 0)


def test_zero_length_docs() -> None:
    empty = enumerate_spans([], 4)
    assert empty.shape == (0, 3) and empty.dtype == numpy.int64
    only_empty = enumerate_spans([0, 0], 4)
    assert only_empty.shape == (0, 3)
    assert doc_span_slices(2, only_empty) == [slice(0, 0), slice(0, 0)]
    assert casing_counts([[], []], only_empty).shape == (0, N_CASING)
    first, last = global_token_indices([0, 0], only_empty)
    assert first.shape == (0,) and last.shape == (0,)
    spans = enumerate_spans([0, 2, 0, 1, 0], 3)
    assert spans.tolist() == [[1, 0, 1], [1, 1, 2], [1, 0, 2], [3, 0, 1]]
    assert doc_span_slices(5, spans) == [slice(0, 0), slice(0, 3), slice(3, 3), slice(3, 4), slice(4, 4)]
    first, last = global_token_indices([0, 2, 0, 1, 0], spans)
    assert first.tolist() == [0, 1, 0, 2]
    assert last.tolist() == [0, 1, 1, 2]


def test_casing_class() -> None:
    expected = {
        "PARIS": "upper",
        "EU": "upper",
        "paris": "lower",
        "Paris": "title",
        "McDonald": "other",
        "2024": "digit",
        "3.5": "other",
        ".": "other",
        "U.S.": "upper",
        "Jean-Luc": "title",
        "é": "lower",
        "Ärger": "title",
    }
    for word, name in expected.items():
        assert CASING_CLASSES[casing_class(word)] == name, word


words_strategy = st.lists(
    st.lists(
        st.sampled_from(["Paris", "PARIS", "paris", "2024", "McDonald", ".", "eBay", "Ölkrise", "x", "X1", "3.5"]),
        min_size=0,
        max_size=8,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(words_per_doc=words_strategy, max_width=width_strategy)
def test_casing_counts_against_naive_loop(words_per_doc, max_width: int) -> None:
    spans = enumerate_spans([len(w) for w in words_per_doc], max_width)
    counts = casing_counts(words_per_doc, spans)
    assert counts.dtype == numpy.float32
    assert counts.shape == (spans.shape[0], N_CASING)
    naive = numpy.zeros((spans.shape[0], N_CASING), dtype=numpy.float32)
    for row, (d, s, e) in enumerate(spans):
        for word in words_per_doc[d][s:e]:
            naive[row, casing_class(word)] += 1
    numpy.testing.assert_array_equal(counts, naive)
    numpy.testing.assert_array_equal(counts.sum(axis=1), spans[:, 2] - spans[:, 1])


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_strategy, max_width=width_strategy)
def test_global_token_indices_and_slices(lengths: List[int], max_width: int) -> None:
    spans = enumerate_spans(lengths, max_width)
    first, last = global_token_indices(lengths, spans)
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(int)
    # Rebuild the concatenated token list and check every span's rows point at its tokens.
    tokens = [(d, t) for d, n in enumerate(lengths) for t in range(n)]
    for (d, s, e), f, la in zip(spans, first, last):
        assert tokens[f] == (d, s)
        assert tokens[la] == (d, e - 1)
        assert offsets[d] <= f <= la < offsets[d + 1]
    slices = doc_span_slices(len(lengths), spans)
    assert len(slices) == len(lengths)
    position = 0
    for i, sl in enumerate(slices):
        assert sl.start == position  # contiguous, in order, cover everything
        assert (spans[sl, 0] == i).all()
        assert sl.stop - sl.start == count_spans(lengths[i], max_width)
        position = sl.stop
    assert position == spans.shape[0]
