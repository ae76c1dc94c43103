"""Span enumeration and per-span surface features, vectorised with numpy.

Every word span of width 1..max_width is a candidate (docs/method.md, section 1). Spans of a
batch are laid out doc by doc; within a doc by width, then by start. All functions
work on token counts and arrays only, so they can be tested without a model.
"""
from typing import Iterable, List, Sequence, Tuple

import numpy

CASING_CLASSES = ("upper", "lower", "title", "digit", "other")
N_CASING = len(CASING_CLASSES)


def enumerate_spans(lengths: Sequence[int], max_width: int) -> numpy.ndarray:
    """All spans of width 1..max_width of a batch of docs.

    lengths (Sequence[int]): number of tokens of each doc.
    max_width (int): the largest span width (>= 1).
    RETURNS (numpy.ndarray): int64 array (n_spans, 3) of (doc index, start, end), end
        exclusive; spans of doc i come before those of doc i + 1.
    """
    if max_width < 1:
        raise ValueError(f"max_width must be >= 1, got {max_width}")
    blocks: List[numpy.ndarray] = []
    for i, n in enumerate(lengths):
        for width in range(1, min(max_width, n) + 1):
            starts = numpy.arange(0, n - width + 1, dtype=numpy.int64)
            block = numpy.empty((starts.shape[0], 3), dtype=numpy.int64)
            block[:, 0] = i
            block[:, 1] = starts
            block[:, 2] = starts + width
            blocks.append(block)
    if not blocks:
        return numpy.zeros((0, 3), dtype=numpy.int64)
    return numpy.concatenate(blocks)


def count_spans(n_tokens: int, max_width: int) -> int:
    """Number of spans of width 1..max_width in a doc of n_tokens tokens."""
    return sum(max(n_tokens - w + 1, 0) for w in range(1, max_width + 1))


def casing_class(word: str) -> int:
    """Index into CASING_CLASSES of a word's casing."""
    if word.isdigit():
        return 3
    if word.isupper():
        return 0
    if word.istitle():
        return 2
    if word.islower():
        return 1
    return 4


def casing_counts(words_per_doc: Iterable[Sequence[str]], spans: numpy.ndarray) -> numpy.ndarray:
    """How many words of each casing class every span contains.

    A span's casing feature is the sum of its words' casing embeddings, which equals
    these counts times the embedding matrix.

    words_per_doc (Iterable[Sequence[str]]): the words of each doc of the batch.
    spans (numpy.ndarray): (n_spans, 3) spans from enumerate_spans.
    RETURNS (numpy.ndarray): float32 array (n_spans, N_CASING).
    """
    return casing_lookup(casing_table(words_per_doc), spans)


def casing_table(words_per_doc: Iterable[Sequence[str]]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The cumulative casing counts of a batch's words, for casing_lookup: the table
    (n_words + n_docs, N_CASING) and each doc's first row in it."""
    cumulative: List[numpy.ndarray] = []
    offsets = [0]
    for words in words_per_doc:
        ids = numpy.fromiter((casing_class(w) for w in words), dtype=numpy.int64, count=len(words))
        onehot = numpy.zeros((len(words) + 1, N_CASING), dtype=numpy.float32)
        onehot[numpy.arange(1, len(words) + 1), ids] = 1.0
        cumulative.append(numpy.cumsum(onehot, axis=0))
        offsets.append(offsets[-1] + len(words) + 1)
    table = numpy.concatenate(cumulative) if cumulative else numpy.zeros((0, N_CASING), dtype=numpy.float32)
    return table, numpy.asarray(offsets[:-1], dtype=numpy.int64)


def casing_lookup(table: Tuple[numpy.ndarray, numpy.ndarray], spans: numpy.ndarray) -> numpy.ndarray:
    """casing_counts of `spans` (any rows of enumerate_spans) from casing_table."""
    if spans.shape[0] == 0:
        return numpy.zeros((0, N_CASING), dtype=numpy.float32)
    cumulative, offsets = table
    base = offsets[spans[:, 0]]
    return cumulative[base + spans[:, 2]] - cumulative[base + spans[:, 1]]


def global_token_indices(lengths: Sequence[int], spans: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Rows of a batch's concatenated token matrix for each span's first and last token.

    lengths (Sequence[int]): tokens per doc.
    spans (numpy.ndarray): (n_spans, 3) spans from enumerate_spans.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray]): first-token rows, last-token rows.
    """
    offsets = numpy.concatenate([[0], numpy.cumsum(numpy.asarray(lengths, dtype=numpy.int64))])
    base = offsets[spans[:, 0]]
    return base + spans[:, 1], base + spans[:, 2] - 1


def doc_span_slices(n_docs: int, spans: numpy.ndarray) -> List[slice]:
    """The slice of the span arrays that belongs to each doc.

    n_docs (int): number of docs in the batch.
    spans (numpy.ndarray): (n_spans, 3) spans, grouped by doc index.
    RETURNS (List[slice]): one slice per doc.
    """
    bounds = numpy.searchsorted(spans[:, 0], numpy.arange(n_docs + 1), side="left")
    return [slice(int(bounds[i]), int(bounds[i + 1])) for i in range(n_docs)]
