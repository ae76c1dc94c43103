"""Raw-text evaluation: what users get from `nlp(text)`, scored by exact character offsets.

The test sentences are detokenized (spacy_maral.corpora.detokenize), run through the whole
pipeline with `nlp.pipe(texts)` (its own tokenizer included), and every predicted
entity is compared with the gold entities by (start character, end character, label).
A predicted entity that matches no gold entity exactly is a false positive, also when
its boundary falls inside a gold token. (spaCy's scorer, on an Example whose predicted
tokens differ from the reference's, drops such entities instead of counting them.)

The evaluation also counts the gold entities the pipeline can never find: those whose
boundary falls inside one of its tokens, and those wider than its max_width tokens,
and the recall ceiling that implies.
"""
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.detokenize import detokenize
from spacy_maral.evaluation.calibration import reliability
from spacy_maral.pipeline.decoding import unfit_spans
from spacy_maral.pipeline.entity_scores import entity_scores, scores_key
from spacy_maral.prf import prf

CharSpan = Tuple[int, int, str]


@dataclass
class RawSentence:
    """A test sentence as raw text with its gold entities as character spans."""

    text: str
    gold: List[CharSpan]


def raw_sentences(docs: Sequence[Doc]) -> List[RawSentence]:
    """The raw text of gold docs (detokenized from their tokens) with character-offset entities.

    docs (Sequence[Doc]): gold docs, entities in doc.ents.
    RETURNS (List[RawSentence]): one per doc.
    """
    out = []
    for doc in docs:
        text, offsets = detokenize([t.text for t in doc])
        gold = [(offsets[e.start][0], offsets[e.end - 1][1], e.label_) for e in doc.ents]
        out.append(RawSentence(text, gold))
    return out


def char_prf(gold: Sequence[Sequence[CharSpan]], predicted: Sequence[Sequence[CharSpan]]) -> Dict[str, object]:
    """Micro P/R/F1 over exact (start, end, label) matches, overall and per label.

    gold (Sequence[Sequence[CharSpan]]): the gold entities of each sentence.
    predicted (Sequence[Sequence[CharSpan]]): the predicted entities of each sentence.
    RETURNS (dict): ents_p, ents_r, ents_f (fractions, as spaCy's scorer), ents_per_type
        ({label: {p, r, f}}), tp/fp/fn counts, and per_sentence: [true positives,
        predicted, gold] of each sentence (for paired bootstraps).
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    counts: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0])  # tp, fp, fn
    per_sentence: List[List[int]] = []
    for g, p in zip(gold, predicted):
        g_set: Set[CharSpan] = set(g)
        p_set: Set[CharSpan] = set(p)
        per_sentence.append([len(p_set & g_set), len(p_set), len(g_set)])
        for span in p_set:
            counts[span[2]][0 if span in g_set else 1] += 1
        for span in g_set - p_set:
            counts[span[2]][2] += 1
    tp = sum(c[0] for c in counts.values())
    fp = sum(c[1] for c in counts.values())
    fn = sum(c[2] for c in counts.values())
    out: Dict[str, object] = dict(zip(("ents_p", "ents_r", "ents_f"), prf(tp, fp, fn)))
    out["ents_per_type"] = {
        label: dict(zip("prf", prf(*c))) for label, c in sorted(counts.items())
    }
    out.update({"tp": tp, "fp": fp, "fn": fn, "per_sentence": per_sentence})
    return out


def unreachable(nlp: Language, sentences: Sequence[RawSentence], max_width: Optional[int]) -> Dict[str, object]:
    """Gold entities the pipeline can't predict, after its own tokenization of the text.

    nlp (Language): the pipeline (only its tokenizer runs).
    sentences (Sequence[RawSentence]): the test sentences.
    max_width (Optional[int]): the widest entity the pipeline can predict, in tokens
        (None: no limit).
    RETURNS (dict): entities, misaligned (a boundary inside a token), too_wide (more
        than max_width tokens), non_text (spans decoding never gives: a whitespace token
        or a character that is not text where an entity may not have one,
        pipeline.decoding.unfit_spans), unreachable (their sum), recall_ceiling, and the
        counts of too_wide per label.
    """
    total = misaligned = too_wide = non_text = 0
    wide_by_label: Dict[str, int] = defaultdict(int)
    for sentence in sentences:
        doc = nlp.make_doc(sentence.text)
        reachable = []
        for start, end, label in sentence.gold:
            total += 1
            span = doc.char_span(start, end, alignment_mode="strict")
            if span is None:
                misaligned += 1
            elif max_width is not None and len(span) > max_width:
                too_wide += 1
                wide_by_label[label] += 1
            else:
                reachable.append((span.start, span.end))
        if reachable:  # of those, the ones decoding never gives
            starts, ends = numpy.array(reachable).T
            non_text += int(unfit_spans(doc, starts, ends).sum())
    lost = misaligned + too_wide + non_text
    return {
        "entities": total, "misaligned": misaligned, "too_wide": too_wide, "non_text": non_text, "unreachable": lost,
        "recall_ceiling": (total - lost) / total if total else 1.0, "max_width": max_width,
        "too_wide_by_label": dict(sorted(wide_by_label.items())),
    }


def pipeline_max_width(nlp: Language) -> Optional[int]:
    """The widest entity (in tokens) the pipeline's span component can predict: the
    max_width of its first pipe that has one (maral_ner), None when no pipe has one."""
    return next((int(p.max_width) for _, p in nlp.pipeline if hasattr(p, "max_width")), None)


def evaluate_raw_text(
    nlp: Language,
    docs: Sequence[Doc],
    batch_size: int = 64,
    max_width: Optional[int] = None,
    count_unreachable: bool = True,
) -> Dict[str, object]:
    """Score a pipeline on the raw text of gold docs, by exact character offsets.

    nlp (Language): the pipeline, run whole on the text (its tokenizer included).
    docs (Sequence[Doc]): gold docs (entities in doc.ents); their text is rebuilt from
        the tokens with spacy_maral.corpora.detokenize.
    batch_size (int): texts per nlp.pipe batch.
    max_width (Optional[int]): the widest predictable entity for the unreachable count;
        None: the pipeline's own (pipeline_max_width).
    count_unreachable (bool): also count the gold entities the pipeline cannot reach
        (it tokenizes every sentence once more); False leaves "unreachable" out.
    RETURNS (dict): ents_p/r/f, ents_per_type, tp/fp/fn and per_sentence (see
        `char_prf`), "unreachable" (see `unreachable`), and, when the pipeline writes
        entity scores (doc.spans[key].attrs["scores"]), "calibration" (see
        calibration.reliability).
    """
    sentences = raw_sentences(docs)
    spans_key = scores_key(nlp)
    predicted: List[List[CharSpan]] = []
    scores: List[float] = []
    correct: List[bool] = []
    for sentence, doc in zip(sentences, nlp.pipe([s.text for s in sentences], batch_size=batch_size)):
        ents = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
        predicted.append(ents)
        gold = set(sentence.gold)
        for span, score in zip(ents, entity_scores(doc, spans_key)):
            if score is not None:
                scores.append(score)
                correct.append(span in gold)
    result = char_prf([s.gold for s in sentences], predicted)
    if count_unreachable:
        width = max_width if max_width is not None else pipeline_max_width(nlp)
        result["unreachable"] = unreachable(nlp, sentences, width)
    if scores:
        result["calibration"] = reliability(scores, correct)
    return result


def entity_logits(nlp: Language, docs: Sequence[Doc], batch_size: int = 64) -> Tuple[object, object, object]:
    """The decision-rule logits of every entity maral_ner predicts on the raw text of
    gold docs, each with its class and whether it is exactly right: the data that
    calibration fits the score map on (fit_temperature, and fit_platt on their log-odds).

    nlp (Language): a pipeline with a maral_ner component.
    docs (Sequence[Doc]): gold docs (entities in doc.ents).
    batch_size (int): texts per batch.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]): (n, C) logits,
        (n,) class indices, (n,) correctness.
    """
    from spacy_maral.evaluation.calibration import stack_entity_logits
    from spacy_maral.pipeline.maral_ner import find_maral_ner

    ner = find_maral_ner(nlp)
    sentences = raw_sentences(docs)
    rows = []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        parsed = list(nlp.pipe([s.text for s in batch], disable=[ner.name]))
        runnable = [(s, d) for s, d in zip(batch, parsed) if len(d)]
        if not runnable:
            continue
        scores = ner.predict([d for _, d in runnable])
        logits = ner.decision_logits(scores)
        for (sentence, doc), kept in zip(runnable, ner.decode([d for _, d in runnable], scores)):
            gold = set(sentence.gold)
            for entity in kept:
                tokens = doc[entity.start : entity.end]
                span = (tokens.start_char, tokens.end_char, ner.classes[entity.class_id])
                rows.append((logits[entity.row], entity.class_id, span in gold))
    return stack_entity_logits(rows, len(ner.classes))
