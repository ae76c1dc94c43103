"""The one reader of stored entity scores (spacy_maral.pipeline.entity_scores): each
entity gets the score of its own span, whatever the order of the scored group."""
import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span

from spacy_maral.pipeline.entity_scores import entity_scores, scores_key


def _doc() -> Doc:
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=["Angela", "Merkel", "met", "Siemens", "in", "Berlin"])
    doc.ents = [Span(doc, 0, 2, "PER"), Span(doc, 3, 4, "ORG"), Span(doc, 5, 6, "LOC")]
    # scored in another order than doc.ents, with a span of the same offsets but another
    # label, and no score for Berlin (another component's entity)
    doc.spans["maral"] = [Span(doc, 3, 4, "ORG"), Span(doc, 0, 2, "PER"), Span(doc, 0, 2, "ORG")]
    doc.spans["maral"].attrs["scores"] = [0.7, 0.9, 0.2]
    return doc


def test_each_entity_gets_its_own_spans_score():
    assert entity_scores(_doc(), "maral") == [0.9, 0.7, None]


def test_no_key_or_no_group_gives_no_scores():
    doc = _doc()
    assert entity_scores(doc, None) == [None, None, None]
    assert entity_scores(doc, "other") == [None, None, None]


class _Scored:
    """A stand-in component that stores scores under a spans_key, as maral_ner does."""

    def __init__(self, key):
        self.spans_key = key

    def __call__(self, doc):
        return doc


def test_the_key_is_the_first_components_spans_key():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    assert scores_key(nlp) is None
    Language.component("_no_key", func=lambda doc: doc)
    nlp.add_pipe("_no_key")
    assert scores_key(nlp) is None
    for name, key in (("_first", "maral"), ("_second", "other")):
        Language.factory(name, func=lambda nlp, name, key=key: _Scored(key))
        nlp.add_pipe(name)
    assert scores_key(nlp) == "maral"


def test_maral_ner_s_key_wins_over_a_span_ruler_before_it(tiny_encoder):
    """spaCy's span_ruler keeps unscored spans under spans_key "ruler"; a pipeline with
    one before maral_ner still reads maral_ner's scores."""
    from helpers import build_nlp

    nlp = build_nlp(tiny_encoder)
    nlp.add_pipe("span_ruler", first=True)
    assert scores_key(nlp) == "maral"
