"""Decoding the entities of a batch of Docs: the spans that can't be entities masked
(whitespace, characters that are not text), then each doc decoded into non-overlapping
entities (spacy_maral.ml.decoding), and the reported entity scores (a score map: a
temperature, then Platt's slope and offset).
"""
import math
import numbers
from dataclasses import dataclass
from typing import List, Sequence

import numpy
import scipy.special
from spacy.attrs import IS_SPACE
from spacy.tokens import Doc

from spacy_maral.ml.decoding import DecodedEntity, decode_doc
from spacy_maral.ml.spans import doc_span_slices
from spacy_maral.pipeline.nontext import entity_bounds


def decode_docs(docs: Sequence[Doc], spans: numpy.ndarray, probs: numpy.ndarray) -> List[List[DecodedEntity]]:
    """The non-overlapping entities of each doc of a batch (decode_doc per doc, with the
    spans that can't be entities masked: mask_unfit_spans).

    docs (Sequence[Doc]): the docs scored.
    spans (numpy.ndarray): (n_spans, 3) their enumerated spans (doc index, start, end),
        doc by doc, as in SpanScores.
    probs (numpy.ndarray): (n_spans, C) the spans' class probabilities, O first (one
        model's, or the average of several models' over the same spans).
    RETURNS (List[List[DecodedEntity]]): per doc, every kept entity by start, its row
        that of its span in `spans`.
    """
    out = []
    for doc, sl in zip(docs, doc_span_slices(len(docs), spans)):
        doc_spans = spans[sl]
        kept = decode_doc(doc_spans[:, 1], doc_spans[:, 2], mask_unfit_spans(doc, doc_spans, probs[sl]), len(doc))
        out.append([entity._replace(row=sl.start + entity.row) for entity in kept])
    return out


def mask_unfit_spans(doc: Doc, spans: numpy.ndarray, probs: numpy.ndarray) -> numpy.ndarray:
    """Probabilities with all mass on O for the spans that can't be entities: those that
    start or end on a whitespace token (as in spaCy's own NER), and those that start,
    end or contain characters that are not text where an entity may not have them
    (spacy_maral.pipeline.nontext.entity_bounds).

    doc (Doc): the doc.
    spans (numpy.ndarray): (n, 3) its spans (doc index, start, end).
    probs (numpy.ndarray): (n, C) their class probabilities.
    RETURNS (numpy.ndarray): probs, or a masked copy.
    """
    if not len(doc):
        return probs
    bad = unfit_spans(doc, spans[:, 1], spans[:, 2])
    if not bad.any():
        return probs
    masked = probs.copy()
    masked[bad] = 0.0
    masked[bad, 0] = 1.0
    return masked


def unfit_spans(doc: Doc, starts: numpy.ndarray, ends: numpy.ndarray) -> numpy.ndarray:
    """Which spans of a non-empty `doc` can't be entities (mask_unfit_spans' rule): a
    whitespace token or a character that is not text at an edge, or such a character
    inside where an entity may not have one.

    doc (Doc): the doc.
    starts, ends (numpy.ndarray): (n,) the spans' token starts and ends (exclusive).
    RETURNS (numpy.ndarray): (n,) bool.
    """
    no_start = no_end = doc.to_array(IS_SPACE).astype(bool).reshape(-1)  # vectorised: no Token objects
    bounds = entity_bounds(doc)
    if bounds is not None:
        no_start, no_end = no_start | bounds[0], no_end | bounds[1]
    bad = no_start[starts] | no_end[ends - 1]
    if bounds is not None and bounds[2].any():
        inside = numpy.concatenate([[0], numpy.cumsum(bounds[2])])
        bad |= inside[ends] > inside[starts]
    return bad


def softmax(logits: numpy.ndarray) -> numpy.ndarray:
    """Row-wise softmax of (n, C) logits (scipy's)."""
    return scipy.special.softmax(logits, axis=1)


def tempered_scores(logits: numpy.ndarray, classes: numpy.ndarray, temperature: float) -> numpy.ndarray:
    """The score of an entity: softmax(logits / T)[class], per row; what maral_ner stores
    and what calibration fits T on.

    logits (numpy.ndarray): (n, C) the decision rule's logits of the predicted entities.
    classes (numpy.ndarray): (n,) each entity's class index.
    temperature (float): T > 0.
    RETURNS (numpy.ndarray): (n,) the scores.
    """
    if temperature <= 0:
        raise ValueError(f"the score temperature must be > 0, got {temperature}")
    log_p = scipy.special.log_softmax(logits / temperature, axis=1)
    return numpy.exp(log_p[numpy.arange(logits.shape[0]), numpy.asarray(classes, dtype=numpy.int64)])


@dataclass(frozen=True)
class ScoreMap:
    """How an entity's reported score is computed from the decision rule's logits l:
    sigmoid(slope * logit(p) + offset) with p = softmax(l / temperature)[class].

    temperature (float): T > 0.
    slope (float): Platt's slope a > 0 on the log-odds of p (1.0: p itself).
    offset (float): Platt's offset b (0.0: p itself).

    No map changes a prediction (the decoder decides on the uncalibrated probabilities),
    and Platt's part is strictly increasing in p, so it keeps the order of the tempered
    scores; the identity (1, 1, 0) reports the probabilities as decoded.
    """

    temperature: float = 1.0
    slope: float = 1.0
    offset: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("temperature", self.temperature), ("slope", self.slope), ("offset", self.offset)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"the score {name} must be a finite number, got {value!r}")
        if not self.temperature > 0:
            raise ValueError(f"the score temperature must be > 0, got {self.temperature}")
        if not self.slope > 0:
            raise ValueError(f"the score slope must be > 0, got {self.slope}")

    @property
    def is_platt(self) -> bool:
        """Whether the slope or the offset changes the tempered probability."""
        return self.slope != 1.0 or self.offset != 0.0

    def scores(self, logits: numpy.ndarray, classes: numpy.ndarray) -> numpy.ndarray:
        """The scores of entities from their (n, C) logits and (n,) class indices."""
        if not self.is_platt:
            return tempered_scores(logits, classes, self.temperature)
        return scipy.special.expit(self.slope * class_log_odds(logits, classes, self.temperature) + self.offset)


def class_log_odds(logits: numpy.ndarray, classes: numpy.ndarray, temperature: float = 1.0) -> numpy.ndarray:
    """logit(p) of each entity's class, p = softmax(logits / T)[class], computed from the
    logits in float64: l_k / T - logsumexp_{j != k} l_j / T, finite however sure the
    entity (where p itself rounds to 1). What Platt's map is fitted on and applied to.

    logits (numpy.ndarray): (n, C) the decision rule's logits, C >= 2.
    classes (numpy.ndarray): (n,) each entity's class index.
    temperature (float): T > 0.
    """
    scaled = numpy.asarray(logits, dtype=numpy.float64) / temperature
    rows = numpy.arange(scaled.shape[0])
    k = numpy.asarray(classes, dtype=numpy.int64)
    own = scaled[rows, k]
    others = scaled.copy()
    others[rows, k] = -numpy.inf
    return own - scipy.special.logsumexp(others, axis=1)


def mapped_entity_scores(decision_logits: numpy.ndarray, kept: Sequence[DecodedEntity], score_map: ScoreMap) -> List[float]:
    """The reported score of each kept entity under a score map.

    decision_logits (numpy.ndarray): (n_spans, C) logits of the decision rule.
    kept (Sequence[DecodedEntity]): the kept entities, rows into decision_logits
        (MaralNER.decode).
    score_map (ScoreMap): the map (ScoreMap(): the probabilities as decoded).
    """
    if not kept:
        return []
    if score_map == ScoreMap():
        return [float(entity.prob) for entity in kept]
    rows = numpy.asarray([entity.row for entity in kept], dtype=numpy.int64)
    classes = numpy.asarray([entity.class_id for entity in kept], dtype=numpy.int64)
    return [float(p) for p in score_map.scores(decision_logits[rows], classes)]
