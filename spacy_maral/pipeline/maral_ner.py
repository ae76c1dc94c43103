"""The `maral_ner` pipeline component: span NER with vMF classes and a large-margin loss.

It enumerates spans, scores them with `spacy_maral.SpanNER.v1`, decodes the best
non-overlapping entities into `doc.ents` (through a configurable filter when the doc
already has entities) and keeps every kept entity with its probability in
`doc.spans[spans_key]` (attrs["scores"]).
"""
from itertools import islice
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy
from spacy import util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.scorer import get_ner_prf
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer, get_array_module, xp2torch

from spacy_maral.adaptation.examples import Stage2Corpus
from spacy_maral.adaptation.progressive import AdaptationSettings, ProgressiveAdaptation
from spacy_maral.ml.decoding import DecodedEntity, check_inference_tau
from spacy_maral.ml.loss import ReweightedVMFLoss
from spacy_maral.ml.span_ner import CLASSES_ATTR, DEFAULT_MODEL, SpanScores, copy_span_ner_weights, drop_head, get_span_head
from spacy_maral.ml.vmf import collapsed_class_pairs, warn_collapsed
from spacy_maral.pipeline.decoding import ScoreMap, decode_docs, mapped_entity_scores, softmax
from spacy_maral.pipeline.maral_ner_io import MaralNERSerialization
from spacy_maral.pipeline.span_labels import count_classes, gold_span_labels
from spacy_maral.pipeline.stored_cfg import (
    NON_ENTITY_LABEL,
    format_version_for,
    initial_cfg,
)
from spacy_maral.pipeline.subwords import NO_SUBWORD_WARNING, listened_encoder_skipped, words_without_subwords
from spacy_maral.pipeline.tokenizer import refuse_unencodable, unencodable_error
from spacy_maral.threads import install_fork_guard
from spacy_maral.util import logger


@Language.factory(
    "maral_ner",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type", "doc.spans"],
    default_config={
        "model": DEFAULT_MODEL,
        "loss": {"@misc": "spacy_maral.ReweightedVMFLoss.v1", "tau": 1.0, "class_weights": True},
        "spans_key": "maral",
        "ents_filter": {"@misc": "spacy.prioritize_new_ents_filter.v1"},
        "scorer": {"@scorers": "spacy.ner_scorer.v1"},
        "adaptation": None,
        "inference_tau": 0.0,
    },
    default_score_weights={"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None},
)
def make_maral_ner(
    nlp: Language,
    name: str,
    model: Model[List[Doc], SpanScores],
    loss: ReweightedVMFLoss,
    spans_key: str,
    ents_filter: Callable[[Iterable[Span], Iterable[Span]], Iterable[Span]],
    scorer: Optional[Callable],
    adaptation: Optional[AdaptationSettings],
    inference_tau: float,
) -> "MaralNER":
    """Create a maral_ner component.

    model (Model[List[Doc], SpanScores]): the span model (spacy_maral.SpanNER.v1).
    loss (ReweightedVMFLoss): the training loss (spacy_maral.ReweightedVMFLoss.v1).
    spans_key (str): doc.spans key that receives the predicted entities with their
        probabilities in attrs["scores"].
    ents_filter (Callable): decides between the doc's existing entities and the new
        ones, e.g. spacy.prioritize_new_ents_filter.v1 or
        spacy.prioritize_existing_ents_filter.v1.
    scorer (Optional[Callable]): scoring method (spacy.ner_scorer.v1).
    adaptation (Optional[AdaptationSettings]): stage-2 progressive adaptation settings
        (spacy_maral.Adaptation.v1); null for source-only training (stage 1).
    inference_tau (float): weight of the source class prior added to the logits at prediction time (0 = argmax s(z)).
    """
    return MaralNER(
        nlp.vocab, model, name, loss=loss, spans_key=spans_key, ents_filter=ents_filter,
        scorer=scorer, adaptation=adaptation, inference_tau=inference_tau,
    )


class MaralNER(MaralNERSerialization, TrainablePipe):
    """Span NER whose classes are von Mises-Fisher distributions on the unit sphere."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[Doc], SpanScores],
        name: str = "maral_ner",
        *,
        loss: Optional[ReweightedVMFLoss] = None,
        spans_key: str = "maral",
        ents_filter: Optional[Callable[[Iterable[Span], Iterable[Span]], Iterable[Span]]] = None,
        scorer: Optional[Callable] = get_ner_prf,
        adaptation: Optional[AdaptationSettings] = None,
        inference_tau: float = 0.0,
    ) -> None:
        """Initialise the component; see make_maral_ner for the arguments."""
        self.vocab = vocab
        self.model = model
        self.name = name
        self.loss = loss if loss is not None else ReweightedVMFLoss()
        self.ents_filter = ents_filter if ents_filter is not None else util.registry.misc.get("spacy.prioritize_new_ents_filter.v1")()
        self.scorer = scorer
        self.cfg: Dict[str, Any] = initial_cfg(spans_key)
        check_inference_tau(inference_tau)
        self.inference_tau = inference_tau
        self.adaptation = ProgressiveAdaptation(adaptation) if adaptation is not None else None
        self._warned_no_subwords = False
        install_fork_guard()  # nlp.pipe(n_process=N) forks this process

    # ------------------------------------------------------------------ labels
    @property
    def labels(self) -> Tuple[str, ...]:
        """The entity labels (without O)."""
        return tuple(self.cfg["labels"])

    @property
    def classes(self) -> Tuple[str, ...]:
        """The model's classes: O first, then the labels."""
        return (NON_ENTITY_LABEL,) + self.labels

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    @property
    def spans_key(self) -> str:
        return self.cfg["spans_key"]

    @property
    def max_width(self) -> int:
        return int(self.model.attrs["max_width"])

    def add_label(self, label: str) -> int:
        """Add an entity label before initialize. Returns 1 if it was new, else 0."""
        if not isinstance(label, str):
            raise ValueError(f"maral_ner labels must be strings, got {label!r}")
        if label == NON_ENTITY_LABEL:
            raise ValueError(f"'{NON_ENTITY_LABEL}' is the non-entity class of maral_ner and can't be a label")
        if label in self.labels:
            return 0
        if self.model.has_ref("head"):
            raise ValueError(
                f"maral_ner '{self.name}' is already initialized with labels {self.labels}; "
                f"can't add '{label}'. Re-initialize (spacy train) with the new label set."
            )
        self.cfg["labels"] = list(self.labels) + [label]
        self.vocab.strings.add(label)
        return 1

    # -------------------------------------------------------------- prediction
    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """TrainablePipe.pipe, except that a doc whose text UTF-8 can't encode (marked by
        spacy_maral.tokenizer.v1) goes to the error handler alone: the others of its batch come back."""
        error_handler = self.get_error_handler()
        for batch in util.minibatch(enumerate(stream), size=batch_size):
            docs = []
            for i, doc in batch:
                err = unencodable_error(doc, f"maral_ner '{self.name}'", i)
                if err is None:
                    docs.append(doc)
                else:
                    error_handler(self.name, self, [doc], err)
            try:
                self.set_annotations(docs, self.predict(docs))
                yield from docs
            except Exception as e:
                error_handler(self.name, self, docs, e)

    def predict(self, docs: Iterable[Doc]) -> SpanScores:
        """Score every span of every doc. RETURNS (SpanScores): spans, logits, vectors."""
        docs = list(docs)
        refuse_unencodable(docs, f"maral_ner '{self.name}'")  # alone, in pipe
        if not any(len(doc) for doc in docs):
            ops = self.model.ops
            return SpanScores(numpy.zeros((0, 3), dtype=numpy.int64), ops.alloc2f(0, len(self.classes)),
                              ops.alloc2f(0, self.model.attrs["projection_dim"]), [len(doc) for doc in docs])
        if listened_encoder_skipped(self.model, docs):
            raise ValueError(f"maral_ner '{self.name}': the transformer component it listens to did not run on these docs "
                             "(disabled or removed): run the pipeline with it, or give maral_ner its own copy (nlp.replace_listeners)")
        scores = self.model.predict(docs)
        self._warn_words_without_subwords(docs)
        return scores

    def _warn_words_without_subwords(self, docs: Sequence[Doc]) -> None:
        """Warn (once) when words got no subword from the encoder (words_without_subwords):
        such a word has a zero vector and is never part of an entity."""
        if self._warned_no_subwords:
            return
        lost = words_without_subwords(docs)
        if lost:
            self._warned_no_subwords = True
            logger.warning(NO_SUBWORD_WARNING, self.name, lost)

    @property
    def score_map(self) -> ScoreMap:
        """The map of the reported entity scores, set by `python -m spacy_maral calibrate`:
        the temperature, then Platt's slope and offset (`score_temperature`, `score_slope`,
        `score_offset` in the cfg; 1, 1 and 0 when not calibrated)."""
        cfg = self.cfg
        return ScoreMap(float(cfg.get("score_temperature", 1.0)), float(cfg.get("score_slope", 1.0)), float(cfg.get("score_offset", 0.0)))

    @score_map.setter
    def score_map(self, value: ScoreMap) -> None:
        self.cfg["score_temperature"] = float(value.temperature)
        self.cfg["score_slope"] = float(value.slope)
        self.cfg["score_offset"] = float(value.offset)
        self.cfg["format_version"] = format_version_for(value.is_platt)  # an older reader refuses Platt's map

    def decision_logits(self, scores: SpanScores) -> numpy.ndarray:
        """The logits of the decision rule: s(z) + inference_tau * log pi_src, (n_spans, C)."""
        logits = self.model.ops.to_numpy(scores.logits)
        if self.inference_tau and self.loss.log_prior is not None:
            logits = logits + self.inference_tau * self.loss.log_prior[None, :]
        return logits

    def probabilities(self, scores: SpanScores) -> numpy.ndarray:
        """Class probabilities of every span: softmax(s(z) + inference_tau * log pi_src).

        With inference_tau = 0 (the default, as in the paper) this is softmax of the
        vMF logits; tau > 0 adds back part of the source class prior at prediction time.
        These drive decoding and the soft pseudo-labels; the score temperature is not
        applied to them.
        """
        return softmax(self.decision_logits(scores))

    def decode(self, docs: Sequence[Doc], scores: SpanScores) -> List[List[DecodedEntity]]:
        """The non-overlapping entities of each doc.

        docs (Sequence[Doc]): the docs scored.
        scores (SpanScores): their span scores (from predict).
        RETURNS (List[List[DecodedEntity]]): per doc, every kept entity by start, its
            row that of its span in scores. The probability is the uncalibrated one
            (see `entity_scores`).
        """
        return decode_docs(docs, scores.spans, self.probabilities(scores))

    def entity_scores(self, scores: SpanScores, kept: Sequence[DecodedEntity]) -> List[float]:
        """The reported score of each kept entity under the component's score_map."""
        return mapped_entity_scores(self.decision_logits(scores), kept, self.score_map)

    def set_annotations(self, docs: Iterable[Doc], scores: SpanScores) -> None:
        """Write the decoded entities to doc.ents and doc.spans[spans_key] (with scores)."""
        docs = list(docs)
        classes = self.classes
        for doc, kept in zip(docs, self.decode(docs, scores)):
            new_ents = [Span(doc, s, e, label=classes[c]) for s, e, c, _, _ in kept]
            group = SpanGroup(doc, name=self.spans_key, spans=new_ents)
            group.attrs["scores"] = self.entity_scores(scores, kept)
            doc.spans[self.spans_key] = group
            doc.ents = list(self.ents_filter(doc.ents, new_ents))

    # ---------------------------------------------------------------- training
    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Learn from a batch of examples; updates the vMF class statistics too.

        examples (Iterable[Example]): the batch.
        drop (float): dropout rate of the span head.
        sgd (Optional[Optimizer]): the optimizer.
        losses (Optional[Dict[str, float]]): accumulated losses, by component name.
        RETURNS (Dict[str, float]): the updated losses.
        """
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        validate_examples(examples, "MaralNER.update")
        examples = list(examples)
        if not any(len(eg.predicted) for eg in examples):
            return losses
        head = get_span_head(self.model)
        head.set_dropout(drop)
        scores, backprop = self.model.begin_update([eg.predicted for eg in examples])
        labels, mask = self.gold_span_labels(examples, scores)
        loss, d_logits = self.get_loss(examples, scores, labels=labels, mask=mask)
        terms = None
        if self.adaptation is not None:  # stage 2: the target loss of the batch's target sentences
            ops = self.model.ops
            terms = self.adaptation.target_terms(examples, scores.spans, ops.to_numpy(scores.logits))
            loss += terms.loss
            d_logits = d_logits + ops.asarray2f(terms.d_logits)
        backprop(d_logits)
        if sgd is not None:
            self.finish_update(sgd)
        if terms is not None:
            labels, mask = terms.relabel(labels, mask)
        self.accumulate_class_stats(scores, labels, mask)
        if terms is not None:
            ops = self.model.ops
            self.adaptation.after_update(terms, ops.to_numpy(scores.logits), ops.to_numpy(scores.vectors), labels, mask)
        losses[self.name] += loss
        return losses

    def accumulate_class_stats(self, scores: SpanScores, labels: numpy.ndarray, mask: numpy.ndarray) -> None:
        """Add labelled span vectors to the running class means."""
        head = get_span_head(self.model)
        xp = get_array_module(scores.vectors)
        head.accumulate(
            xp2torch(xp.ascontiguousarray(scores.vectors)),
            xp2torch(xp.asarray(labels, dtype="int64")),
            xp2torch(xp.asarray(mask, dtype="float64")),
        )

    def end_epoch(self) -> None:
        """Called at the end of a training epoch: rolls the class-mean estimators.

        Warns when two class means have (nearly) merged: see `collapsed_class_pairs`.
        """
        if not self.model.has_ref("head"):
            return
        head = get_span_head(self.model)
        head.end_epoch()
        mu, _ = head.class_distributions()
        cosines = (mu @ mu.T).cpu().numpy()
        warn_collapsed(collapsed_class_pairs(cosines, self.classes))
        if self.adaptation is not None and self.adaptation.store is not None:
            self.adaptation.end_epoch(class_cosines=cosines, classes=self.classes)

    def gold_span_labels(self, examples: Sequence[Example], scores: SpanScores) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """The class and mask of every enumerated span from the reference entities
        (spacy_maral.pipeline.span_labels.gold_span_labels)."""
        return gold_span_labels(examples, scores.spans, self.classes, self.max_width, component=self.name)

    def get_loss(
        self,
        examples: Iterable[Example],
        scores: SpanScores,
        labels: Optional[numpy.ndarray] = None,
        mask: Optional[numpy.ndarray] = None,
    ) -> Tuple[float, Any]:
        """The reweighted vMF loss of a batch and its gradient w.r.t. the logits."""
        examples = list(examples)
        if labels is None or mask is None:
            labels, mask = self.gold_span_labels(examples, scores)
        ops = self.model.ops
        d_logits, loss = self.loss.get_grad_and_loss(ops.to_numpy(scores.logits), labels, mask=mask)
        return loss, ops.asarray2f(d_logits)

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[List[str]] = None,
        adaptation_corpus: Optional[Stage2Corpus] = None,
    ) -> None:
        """Set the labels, count the class prior over all enumerated spans, build the model;
        in stage 2, also build the soft-label store of the target sentences.

        get_examples (Callable[[], Iterable[Example]]): the training data (stage 1).
        nlp (Optional[Language]): the pipeline.
        labels (Optional[List[str]]): the entity labels (e.g. from spacy init labels);
            by default read from the examples.
        adaptation_corpus (Optional[Stage2Corpus]): stage 2 (an `adaptation` block):
            the stage-2 corpus (spacy_maral.AdaptationCorpus.v1), `[initialize.components.maral_ner] adaptation_corpus =
            ${corpora.train}`; its source sentences give the labels, class prior and
            weights, its target sentences the soft labels.
        """
        validate_get_examples(get_examples, "MaralNER.initialize")
        drop_head(self.model)  # initialized again: new weights, for the labels it has now
        if self.adaptation is not None:
            if adaptation_corpus is None:
                raise ValueError(
                    f"maral_ner '{self.name}' has an adaptation block (stage 2) but no stage-2 corpus to "
                    "initialize from: add `adaptation_corpus = ${corpora.train}` to "
                    "[initialize.components.maral_ner] (configs/adapt.cfg does)"
                )
            if nlp is None:
                raise ValueError(f"maral_ner '{self.name}': stage 2's initialize needs the pipeline (nlp)")
            corpus, pipeline = adaptation_corpus, nlp

            def get_examples() -> Iterable[Example]:  # every source sentence once, as stage 1 counts
                return corpus.source_examples(pipeline)

        if labels is not None:
            for label in labels:
                self.add_label(label)
        else:
            for eg in get_examples():
                for ent in eg.reference.ents:
                    self.add_label(ent.label_)
        if not self.labels:
            raise ValueError(
                f"maral_ner '{self.name}' has no labels: the training examples carry no entities "
                "and no labels were given ([initialize.components.maral_ner.labels])."
            )
        counts, n_entities, n_wide = count_classes(get_examples(), self.classes, self.max_width)
        if n_wide:
            logger.warning(
                "%d of %d gold entities (%.2f%%) are wider than max_width=%d tokens: maral_ner "
                "can never predict them; the spans inside them are left out of training (neither "
                "O nor entity), and they still count as misses in evaluation.",
                n_wide, n_entities, 100.0 * n_wide / max(n_entities, 1), self.max_width,
            )
        self.loss.set_counts(counts)
        self.cfg["class_counts"] = [float(c) for c in counts]
        self.cfg["loss_state"] = self.loss.to_cfg()
        self.cfg["entities_total"] = n_entities
        self.cfg["entities_too_wide"] = n_wide
        self.model.set_dim("nO", len(self.classes), force=True)
        sample = [eg.predicted for eg in islice(get_examples(), 10)]
        self.model.initialize(X=sample)
        self.model.attrs[CLASSES_ATTR] = list(self.classes)  # saved with the weights, checked on load
        self.cfg["nI"] = self.model.get_dim("nI")
        if self.adaptation is not None and adaptation_corpus is not None and nlp is not None:
            self.adaptation.initialize(adaptation_corpus.target_examples(nlp), self.classes, self.max_width)

    def copy_weights_from(self, other: "MaralNER") -> None:
        """Start from the weights and class statistics of another maral_ner (a warm start).

        The two may have added their labels in different orders (each in the order its
        training data showed them): the class-indexed state (the class means) is mapped
        by class name. This pipe keeps its own labels, class prior and adaptation state.

        other (MaralNER): a trained maral_ner with the same classes and architecture.
        """
        if set(other.classes) != set(self.classes):
            raise ValueError(
                f"maral_ner '{self.name}': can't start from a model with other classes "
                f"({list(other.classes)} vs {list(self.classes)})"
            )
        copy_span_ner_weights(self.model, self.classes, other.model, other.classes)


def find_maral_ner(nlp: Language) -> MaralNER:
    """The (first) maral_ner component of a pipeline, whatever its name.

    nlp (Language): the pipeline.
    RETURNS (MaralNER): the component; a ValueError names the pipes if there is none.
    """
    for _, pipe in nlp.pipeline:
        if isinstance(pipe, MaralNER):
            return pipe
    raise ValueError(f"the pipeline has no maral_ner component (pipes: {nlp.pipe_names})")


