"""pseudo-label's task on a worker: a teacher (and its ensemble) labels one shard.

The teacher scores every span of every target sentence; the non-overlapping decoded
entity spans keep their full probability vectors as soft labels (doc.spans["maral_pseudo"],
attrs "probs" and "classes"); every other span is O. Tags the target corpus happens to
carry are moved to doc.spans["maral_diagnostic_gold"] (for diagnostics only) and
doc.ents is cleared. A shard is labelled in batches of similar length
(spacy_maral.inference.batching: less padding) and comes back in the corpus order; the
work depends on that shard alone, so every engine gives the same bytes.
"""
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

import numpy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, SpanGroup

from spacy_maral.adaptation.soft_labels import AGREE_ATTR, DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, attach_soft_labels
from spacy_maral.inference.batching import length_sorted_batches
from spacy_maral.inference.ensemble import mean_probabilities, teacher_probabilities, teachers_agree
from spacy_maral.pipeline.decoding import decode_docs
from spacy_maral.pipeline.maral_ner import MaralNER, find_maral_ner


@dataclass
class ShardCounts:
    """What one shard holds.

    sentences (int): its target sentences.
    entities (Dict[str, int]): its pseudo-labelled entity spans, per label.
    diagnostic_gold (int): the target tags kept aside for diagnostics.
    agreed (int): its sentences where an ensemble's teachers found the same entities.
    """

    sentences: int
    entities: Dict[str, int]
    diagnostic_gold: int
    agreed: int = 0

    @classmethod
    def of(cls, docs: Iterable[Doc]) -> "ShardCounts":
        """The counts of a shard's pseudo-labelled docs."""
        entities: Counter = Counter()
        sentences = diagnostic_gold = agreed = 0
        for doc in docs:
            sentences += 1
            if PSEUDO_KEY in doc.spans:
                entities.update(span.label_ for span in doc.spans[PSEUDO_KEY])
                agreed += doc.spans[PSEUDO_KEY].attrs.get(AGREE_ATTR) is True
            if DIAGNOSTIC_GOLD_KEY in doc.spans:
                diagnostic_gold += len(doc.spans[DIAGNOSTIC_GOLD_KEY])
        return cls(sentences, dict(entities), diagnostic_gold, agreed)


@dataclass
class LabelledShard:
    """The pseudo-label task's result (label_shard_bytes).

    shard (bytes): the labelled shard, as written to disk (DocBin bytes).
    counts (ShardCounts): what it holds.
    """

    shard: bytes
    counts: ShardCounts


def label_batch(nlp: Language, ner: MaralNER, docs: List[Doc], ensemble: Sequence[Language] = ()) -> List[Doc]:
    """Attach soft labels to a batch of target docs (in place) and return them.

    nlp (Language): the teacher.
    ner (MaralNER): its maral_ner component.
    docs (List[Doc]): the target sentences.
    ensemble (Sequence[Language]): more teachers: the soft labels come from the mean of
        all teachers' span probabilities (spacy_maral.inference.ensemble), and each
        sentence records whether every teacher's own entities are the same
        (attrs "teachers_agree" of its soft labels).
    """
    for doc in docs:
        if doc.ents:
            doc.spans[DIAGNOSTIC_GOLD_KEY] = SpanGroup(doc, name=DIAGNOSTIC_GOLD_KEY, spans=list(doc.ents))
        doc.ents = []
    runnable = [doc for doc in docs if len(doc)]
    if not runnable:
        return docs
    teachers = [(nlp, ner)] + [(member, find_maral_ner(member)) for member in ensemble]
    predicted, spans, each = teacher_probabilities(teachers, runnable)
    probs = mean_probabilities(each)
    agree: List[Optional[bool]] = list(teachers_agree(predicted, spans, each)) if ensemble else [None] * len(runnable)
    for doc, kept, agreed in zip(runnable, decode_docs(predicted, spans, probs), agree):
        rows = [entity.row for entity in kept]
        kept_spans = [(entity.start, entity.end) for entity in kept]
        attach_soft_labels(doc, kept_spans, probs[rows] if rows else numpy.zeros((0, len(ner.classes))), ner.classes,
                           teachers_agree=agreed)
    return docs


def label_shard(nlp: Language, ner: MaralNER, docs: List[Doc], batch_size: int, ensemble: Sequence[Language] = ()) -> List[Doc]:
    """Label one shard's docs (in place) in length-sorted batches; return them in order.

    nlp (Language): the teacher.
    ner (MaralNER): its maral_ner component.
    docs (List[Doc]): the shard's target sentences, in corpus order.
    batch_size (int): sentences per teacher batch.
    ensemble (Sequence[Language]): more teachers to average with (label_batch).
    """
    for batch in length_sorted_batches(docs, batch_size):
        label_batch(nlp, ner, batch, ensemble)
    return docs


def shard_bytes(docs: Iterable[Doc]) -> bytes:
    """The DocBin bytes of a shard (user data and span groups kept)."""
    out = DocBin(store_user_data=True)
    for doc in docs:
        out.add(doc)
    return out.to_bytes()


def label_shard_bytes(nlp: Language, payload: bytes, batch_size: int = 32, ensemble: Sequence[Language] = ()) -> LabelledShard:
    """The pseudo_label task of a worker: label a shard given as DocBin bytes.

    nlp (Language): the teacher.
    payload (bytes): the shard's target sentences (shard_bytes of the unlabelled docs).
    batch_size (int): sentences per teacher batch.
    ensemble (Sequence[Language]): more teachers to average with (the worker's
        WorkerSpec.ensemble, loaded once).
    RETURNS (LabelledShard): the labelled shard's bytes, as written to disk, and its counts.
    """
    docs = list(DocBin().from_bytes(payload).get_docs(nlp.vocab))
    label_shard(nlp, find_maral_ner(nlp), docs, batch_size, ensemble)
    return LabelledShard(shard_bytes(docs), ShardCounts.of(docs))
