"""The target corpus's soft span labels: the state of progressive adaptation.

One row per enumerated span of every target sentence (widths 1..max_width, the order of
`spans.enumerate_spans`), stored flat with per-sentence offsets, so the memory is
proportional to the real spans, never to a padded maximum. Saved atomically (a temporary
file, then os.replace), so a run killed at any moment keeps the last complete state.
"""
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy
from spacy.tokens import Doc, Span, SpanGroup

from spacy_maral.fileio import atomic_savez
from spacy_maral.ml.spans import count_spans, enumerate_spans

PSEUDO_KEY = "maral_pseudo"
TARGET_INDEX_KEY = "maral_target_index"
DIAGNOSTIC_GOLD_KEY = "maral_diagnostic_gold"
# attrs of the soft labels written from an ensemble: whether every teacher found these entities
AGREE_ATTR = "teachers_agree"


def attach_soft_labels(
    doc: Doc, spans: Sequence[Tuple[int, int]], probs: numpy.ndarray, classes: Sequence[str],
    teachers_agree: Optional[bool] = None,
) -> None:
    """Store a teacher's kept entity spans and their probability vectors on a doc.

    doc (Doc): the target sentence.
    spans (Sequence[Tuple[int, int]]): (start, end) of each kept entity span.
    probs (numpy.ndarray): (len(spans), C) probability vectors (O first).
    classes (Sequence[str]): the class names, O first.
    teachers_agree (Optional[bool]): for an ensemble's labels, whether every teacher's
        own entities were the same (recorded as attrs "teachers_agree"); None: one teacher.
    """
    ents = [Span(doc, s, e, label=classes[int(numpy.argmax(p))]) for (s, e), p in zip(spans, probs)]
    group = SpanGroup(doc, name=PSEUDO_KEY, spans=ents)
    group.attrs["probs"] = [[float(x) for x in p] for p in probs]
    group.attrs["classes"] = list(classes)
    if teachers_agree is not None:
        group.attrs[AGREE_ATTR] = bool(teachers_agree)
    doc.spans[PSEUDO_KEY] = group


def read_soft_labels(doc: Doc, classes: Sequence[str], max_width: int) -> numpy.ndarray:
    """The (n_spans, C) soft labels of one pseudo-labelled doc, in enumeration order.

    Kept entity spans get their stored probability vectors (mapped onto `classes`);
    every other span is one-hot O.

    doc (Doc): a doc written by the pseudo-labelling command.
    classes (Sequence[str]): the student's classes, O first.
    max_width (int): the student's max span width.
    RETURNS (numpy.ndarray): float32 soft labels.
    """
    spans = enumerate_spans([len(doc)], max_width)
    q = numpy.zeros((spans.shape[0], len(classes)), dtype=numpy.float32)
    q[:, 0] = 1.0
    if PSEUDO_KEY not in doc.spans:
        return q
    group = doc.spans[PSEUDO_KEY]
    teacher_classes = list(group.attrs.get("classes", []))
    missing = [c for c in teacher_classes if c not in classes]
    if missing:
        raise ValueError(
            f"the pseudo-labels carry the classes {missing}, which the student does not have "
            f"(student classes: {list(classes)}); the teacher and the student must share a label set"
        )
    column = numpy.asarray([list(classes).index(c) for c in teacher_classes], dtype=numpy.int64)
    row_of = {(int(s), int(e)): i for i, (_, s, e) in enumerate(spans)}
    for span, probs in zip(group, group.attrs.get("probs", [])):
        row = row_of.get((span.start, span.end))
        if row is None:  # wider than the student's max width: stays O
            continue
        q[row] = 0.0
        numpy.add.at(q[row], column, numpy.asarray(probs, dtype=numpy.float32))
    return q


class SoftLabelStore:
    """Soft labels, anchors and last-pass scores of every target span.

    lengths (numpy.ndarray): (n_docs,) tokens of each target sentence.
    q (numpy.ndarray): (n_spans, C) soft labels, the spans of each sentence in
        enumeration order.
    max_width (int): the max span width the spans were enumerated with.
    """

    def __init__(self, lengths: numpy.ndarray, q: numpy.ndarray, max_width: int) -> None:
        self.lengths = numpy.asarray(lengths, dtype=numpy.int64)
        self.max_width = int(max_width)
        counts = [count_spans(int(n), self.max_width) for n in self.lengths]
        self.offsets = numpy.concatenate([[0], numpy.cumsum(counts, dtype=numpy.int64)]).astype(numpy.int64)
        if int(self.offsets[-1]) != q.shape[0]:
            raise ValueError(f"soft labels have {q.shape[0]} rows, the sentence lengths imply {int(self.offsets[-1])}")
        self.q = numpy.asarray(q, dtype=numpy.float32)
        n = self.q.shape[0]
        self.anchor = numpy.zeros(n, dtype=bool)
        self.scores = numpy.full(n, numpy.nan, dtype=numpy.float32)
        self.epoch = 0

    @classmethod
    def from_docs(cls, docs: Iterable[Doc], classes: Sequence[str], max_width: int) -> "SoftLabelStore":
        """Build the store from the pseudo-labelled target docs, in corpus order."""
        blocks: List[numpy.ndarray] = []
        lengths: List[int] = []
        for doc in docs:
            blocks.append(read_soft_labels(doc, classes, max_width))
            lengths.append(len(doc))
        q_all = numpy.concatenate(blocks) if blocks else numpy.zeros((0, len(classes)), dtype=numpy.float32)
        return cls(numpy.asarray(lengths), q_all, max_width)

    @property
    def n_docs(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_classes(self) -> int:
        return int(self.q.shape[1])

    def rows(self, doc_indices: Sequence[int]) -> numpy.ndarray:
        """Row indices of all spans of the given target sentences, in order."""
        if len(doc_indices) == 0:
            return numpy.zeros(0, dtype=numpy.int64)
        return numpy.concatenate([numpy.arange(self.offsets[i], self.offsets[i + 1]) for i in doc_indices])

    def check_lengths(self, doc_indices: Sequence[int], lengths: Sequence[int]) -> None:
        """Raise if a sentence's span count does not match the store (wrong corpus)."""
        for i, n in zip(doc_indices, lengths):
            if i < 0 or i >= self.n_docs:
                raise ValueError(f"target sentence index {i} is outside the soft-label store ({self.n_docs} sentences)")
            if int(self.lengths[i]) != n:
                raise ValueError(
                    f"target sentence {i} has {n} tokens, which does not match the soft-label store; "
                    "the pseudo-labelled corpus changed since the adaptation started"
                )

    def prior_mass(self) -> numpy.ndarray:
        """Total soft-label mass per class (for the target prior pi_tgt)."""
        return self.q.sum(axis=0).astype(numpy.float64)

    def hard_labels(self) -> numpy.ndarray:
        return self.q.argmax(axis=1)

    def save(self, path: Path) -> None:
        """Write the state atomically to `path` (.npz)."""
        atomic_savez(
            Path(path),
            {
                "lengths": self.lengths, "q": self.q, "anchor": self.anchor, "scores": self.scores,
                "epoch": numpy.asarray(self.epoch), "max_width": numpy.asarray(self.max_width),
            },
        )

    @classmethod
    def load(cls, path: Path) -> "SoftLabelStore":
        """Read a state written by save(); a damaged file gives a clear error."""
        try:
            with numpy.load(Path(path)) as data:
                store = cls(data["lengths"], data["q"], int(data["max_width"]))
                store.anchor = data["anchor"].astype(bool)
                store.scores = data["scores"].astype(numpy.float32)
                store.epoch = int(data["epoch"])
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"can't read the soft-label state {path}: {err}") from err
        return store

    def summary(self, classes: Sequence[str]) -> Dict[str, Dict[str, float]]:
        """Per-class hard-label counts and anchor fractions."""
        hard = self.hard_labels()
        out: Dict[str, Dict[str, float]] = {}
        for c, name in enumerate(classes):
            mask = hard == c
            n = int(mask.sum())
            out[name] = {"spans": n, "anchor_fraction": float(self.anchor[mask].mean()) if n else 0.0}
        return out
