"""Training targets of maral_ner from gold entities: the class of every enumerated span
and its mask (unannotated tokens, entities wider than max_width), and the class counts
that the loss's prior and weights come from."""
from typing import Iterable, List, Sequence, Tuple

import numpy
from spacy.training import Example

from spacy_maral.ml.spans import count_spans, doc_span_slices


def gold_span_labels(
    examples: Sequence[Example], spans_all: numpy.ndarray, classes: Sequence[str], max_width: int, component: str = "maral_ner"
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Class index per enumerated span from the reference entities.

    A gold entity wider than max_width can't be predicted; the spans inside it are
    neither trained as O nor as the entity: they get mask 0 (spans that cross its
    boundary stay O).

    examples (Sequence[Example]): the batch.
    spans_all (numpy.ndarray): (n_spans, 3) its spans (doc index, start, end).
    classes (Sequence[str]): the classes, O first.
    max_width (int): the widest span.
    component (str): the component's name, for the error message.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray]): (n_spans,) int64 labels (0 = O)
        and a float32 mask that is 0 for spans touching unannotated tokens and for
        spans inside a gold entity wider than max_width.
    """
    class_ids = {label: i for i, label in enumerate(classes)}
    labels = numpy.zeros(spans_all.shape[0], dtype=numpy.int64)
    mask = numpy.ones(spans_all.shape[0], dtype=numpy.float32)
    for eg, sl in zip(examples, doc_span_slices(len(examples), spans_all)):
        n = len(eg.predicted)
        grid = numpy.zeros((n + 1, max_width + 1), dtype=numpy.int64)
        wide = numpy.full(n + 1, -1, dtype=numpy.int64)  # token -> id of the wide entity over it
        for k, ent in enumerate(eg.get_aligned_spans_y2x(eg.reference.ents, allow_overlap=False)):
            if ent.label_ not in class_ids:
                raise ValueError(
                    f"maral_ner '{component}': the training data has the entity label "
                    f"'{ent.label_}', which is not among the component's labels {tuple(classes[1:])}. "
                    "Initialize with the full label set (spacy init labels) or fix the data."
                )
            width = ent.end - ent.start
            if width <= max_width:
                grid[ent.start, width] = class_ids[ent.label_]
            else:
                wide[ent.start : ent.end] = k
        spans = spans_all[sl]
        labels[sl] = grid[spans[:, 1], spans[:, 2] - spans[:, 1]]
        inside = (wide[spans[:, 1]] >= 0) & (wide[spans[:, 1]] == wide[spans[:, 2] - 1])
        missing = _missing_tokens(eg)
        if missing.any():
            covered = numpy.concatenate([[0], numpy.cumsum(missing)])
            mask[sl] = ((covered[spans[:, 2]] - covered[spans[:, 1]]) == 0).astype(numpy.float32)
        if inside.any():
            mask[sl] = numpy.where(inside, 0.0, mask[sl])
    return labels, mask


def count_classes(examples: Iterable[Example], classes: Sequence[str], max_width: int) -> Tuple[List[float], int, int]:
    """Span counts per class over all enumerated spans, and entity width counts.

    examples (Iterable[Example]): the training examples (their reference entities).
    classes (Sequence[str]): the classes, O first.
    max_width (int): the widest span.
    RETURNS (Tuple[List[float], int, int]): counts (O first; spans inside an entity
        wider than max_width are not counted: training masks them), number of gold
        entities, number of gold entities wider than max_width.
    """
    class_ids = {label: i for i, label in enumerate(classes)}
    counts = numpy.zeros(len(classes), dtype=numpy.float64)
    n_entities = n_wide = 0
    for eg in examples:
        n_spans = count_spans(len(eg.reference), max_width)
        n_fit = 0
        for ent in eg.reference.ents:
            n_entities += 1
            if len(ent) > max_width:
                n_wide += 1
                n_fit += count_spans(len(ent), max_width)  # masked in training, not O
            elif ent.label_ in class_ids:
                counts[class_ids[ent.label_]] += 1
                n_fit += 1
        counts[0] += n_spans - n_fit
    return counts.tolist(), n_entities, n_wide


def _missing_tokens(eg: Example) -> numpy.ndarray:
    """Boolean array over the predicted tokens: True where the reference has no NER annotation."""
    ref = eg.reference
    if len(ref) == len(eg.predicted) and all(a.text == b.text for a, b in zip(ref, eg.predicted)):
        return numpy.asarray([t.ent_iob == 0 for t in ref], dtype=bool)
    iob = eg.get_aligned("ENT_IOB")
    return numpy.asarray([v is None or v == 0 for v in iob], dtype=bool)
