"""A teacher ensemble for pseudo-labelling (docs/method.md, section 5).

Several teachers score the same spans of the same sentences; the soft labels come from
the mean of their span probabilities (each teacher's own decision rule), decoded once
as one teacher's would be. Averaging before decoding keeps one consistent set of
non-overlapping spans, which a vote over each teacher's decoded entities would not.
"""
from typing import List, Sequence, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.docbin import bare_copy
from spacy_maral.pipeline.maral_ner import MaralNER, find_maral_ner


def check_ensemble(nlp: Language, members: Sequence[Language]) -> None:
    """Raise ValueError unless every member can be averaged with the teacher `nlp`: a
    maral_ner with the same classes, in the same order, and the same max_width (the
    same enumerated spans).

    nlp (Language): the teacher whose tokenizer reads the corpus.
    members (Sequence[Language]): the other teachers of the ensemble.
    """
    ner = find_maral_ner(nlp)
    for i, member in enumerate(members, start=2):
        name = member.meta.get("name", "pipeline")
        other = find_maral_ner(member)
        if tuple(other.classes) != tuple(ner.classes):
            raise ValueError(
                f"ensemble teacher {i} ({name}) has the classes {list(other.classes)}, the first "
                f"teacher {list(ner.classes)}: an ensemble needs one label scheme"
            )
        if other.max_width != ner.max_width:
            raise ValueError(
                f"ensemble teacher {i} ({name}) scores spans up to {other.max_width} tokens, "
                f"the first teacher up to {ner.max_width}: an ensemble needs the same max_width"
            )


def span_probabilities(nlp: Language, ner: MaralNER, docs: Sequence[Doc]) -> Tuple[List[Doc], numpy.ndarray, numpy.ndarray]:
    """One teacher's class probabilities of every span of `docs` (not empty).

    nlp (Language): the teacher.
    ner (MaralNER): its maral_ner component.
    docs (Sequence[Doc]): the sentences (their annotation is not read).
    RETURNS (Tuple[List[Doc], numpy.ndarray, numpy.ndarray]): the teacher's copies of
        the docs (as its other components annotated them), the (n_spans, 3) spans and
        their (n_spans, C) probabilities (MaralNER.probabilities).
    """
    predicted = list(nlp.pipe([bare_copy(d, nlp.vocab) for d in docs], disable=[ner.name]))
    scores = ner.predict(predicted)
    return predicted, scores.spans, ner.probabilities(scores)


def ensemble_probabilities(
    teachers: Sequence[Tuple[Language, MaralNER]], docs: Sequence[Doc]
) -> Tuple[List[Doc], numpy.ndarray, numpy.ndarray]:
    """The mean span probabilities of several teachers (span_probabilities of each).

    teachers (Sequence[Tuple[Language, MaralNER]]): (pipeline, its maral_ner), the
        first one's docs and spans are returned; check_ensemble has passed.
    docs (Sequence[Doc]): the sentences.
    RETURNS: as span_probabilities, with the probabilities averaged over the teachers.
    """
    (nlp, ner), *others = teachers
    predicted, spans, first = span_probabilities(nlp, ner, docs)
    if not others:
        return predicted, spans, first
    total = first.astype(numpy.float64)
    for i, (member, member_ner) in enumerate(others, start=2):
        _, member_spans, probs = span_probabilities(member, member_ner, docs)
        if not numpy.array_equal(member_spans, spans):
            raise ValueError(f"ensemble teacher {i} enumerated other spans than the first teacher for the same sentences")
        total += probs
    return predicted, spans, (total / len(teachers)).astype(first.dtype)
