"""A teacher ensemble for pseudo-labelling (docs/method.md, section 5).

Several teachers score the same spans of the same sentences; the soft labels come from
the mean of their span probabilities (each teacher's own decision rule), decoded once
as one teacher's would be. Averaging before decoding keeps one consistent set of
non-overlapping spans, which a vote over each teacher's decoded entities would not.
Each teacher's own decoding is still compared, sentence by sentence: `teachers_agree`
tells the sentences where every teacher finds the same entities (what the stage-2
reader's `agreed_only` keeps).
"""
from typing import List, Sequence, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.docbin import bare_copy
from spacy_maral.pipeline.decoding import decode_docs
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


def teacher_probabilities(
    teachers: Sequence[Tuple[Language, MaralNER]], docs: Sequence[Doc]
) -> Tuple[List[Doc], numpy.ndarray, List[numpy.ndarray]]:
    """Every teacher's span probabilities over the same spans (span_probabilities of each).

    teachers (Sequence[Tuple[Language, MaralNER]]): (pipeline, its maral_ner), the
        first one's docs and spans are returned; check_ensemble has passed.
    docs (Sequence[Doc]): the sentences.
    RETURNS (Tuple[List[Doc], numpy.ndarray, List[numpy.ndarray]]): the first teacher's
        docs, the (n_spans, 3) spans, and each teacher's (n_spans, C) probabilities.
    """
    (nlp, ner), *others = teachers
    predicted, spans, first = span_probabilities(nlp, ner, docs)
    probs = [first]
    for i, (member, member_ner) in enumerate(others, start=2):
        _, member_spans, member_probs = span_probabilities(member, member_ner, docs)
        if not numpy.array_equal(member_spans, spans):
            raise ValueError(f"ensemble teacher {i} enumerated other spans than the first teacher for the same sentences")
        probs.append(member_probs)
    return predicted, spans, probs


def mean_probabilities(probs: Sequence[numpy.ndarray]) -> numpy.ndarray:
    """The teachers' mean span probabilities (summed in float64, in the first's dtype).

    probs (Sequence[numpy.ndarray]): each teacher's (n_spans, C) probabilities.
    """
    if len(probs) == 1:
        return probs[0]
    total = probs[0].astype(numpy.float64)
    for member in probs[1:]:
        total += member
    return (total / len(probs)).astype(probs[0].dtype)


def teachers_agree(docs: Sequence[Doc], spans: numpy.ndarray, probs: Sequence[numpy.ndarray]) -> List[bool]:
    """Per doc, whether every teacher's own decoding finds the same entities: the same
    spans with the same classes (a doc where none finds an entity agrees).

    docs (Sequence[Doc]): the docs scored (the first teacher's, as decode_docs reads them).
    spans (numpy.ndarray): (n_spans, 3) their enumerated spans.
    probs (Sequence[numpy.ndarray]): each teacher's (n_spans, C) probabilities.
    """
    decoded = [
        [{(entity.start, entity.end, entity.class_id) for entity in doc} for doc in decode_docs(docs, spans, p)] for p in probs
    ]
    return [all(member[i] == decoded[0][i] for member in decoded[1:]) for i in range(len(docs))]
