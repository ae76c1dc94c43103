"""Words the encoder gave no subword: a transformer window cut at its maximum length (a
window of many long or rare words), or characters its tokenizer drops. Such a word has a
zero vector and is never part of an entity; nothing else would say so.

The windows are sized from the encoder's real limit (fit_windows_to_encoder): spacy-transformers
cuts a window of [components.transformer.model.get_spans] (e.g. strided spans of 128 words) at
the encoder's maximum number of subwords; ordinary prose stays far below it, token-dense text
(long rare words, URLs, code) does not. A window whose subwords pass the limit is split in halves
until each part fits; windows that fit are left as they are (the output on ordinary text does not
change). Only a single word longer than the limit is still cut, and counted."""
from typing import Any, Callable, List, Optional, Sequence

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Span

from spacy_maral.pipeline.nontext import is_non_text_token

NO_SUBWORD_WARNING = (
    "maral_ner '%s': %d word(s) in this batch got no subword from the encoder and cannot be "
    "entities: a window of [components.transformer.model.get_spans] passed the encoder's maximum "
    "length (lower its window and stride), or its tokenizer drops their characters. "
    "Said once per component."
)


def words_without_subwords(docs: Sequence[Doc]) -> int:
    """How many non-space words of `docs` got no subword (after the transformer ran).

    docs (Sequence[Doc]): docs with `doc._.trf_data` (spacy-transformers); others count 0.
    RETURNS (int): the number of such words.
    """
    return sum(len(lost_words(doc)) for doc in docs)


def lost_words(doc: Doc) -> List[int]:
    """The indices of the words of `doc` that got no subword (whitespace tokens and
    tokens of characters that are not text, which can't be entities, left out).

    doc (Doc): a doc after the transformer ran (`doc._.trf_data`); others have none.
    RETURNS (List[int]): token indices, in order.
    """
    if not Doc.has_extension("trf_data"):
        return []
    trf = doc._.trf_data
    if trf is None or not len(doc) or len(trf.align.lengths) != len(doc):
        return []
    lengths = trf.align.lengths
    lengths = lengths.get() if hasattr(lengths, "get") else numpy.asarray(lengths)
    empty = numpy.flatnonzero(lengths == 0)
    return [i for i in empty.tolist() if not doc[i].is_space and not is_non_text_token(doc[i].text)]


SpanGetter = Callable[[List[Doc]], List[List[Span]]]


def encoder_limit(model: Any) -> Optional[int]:
    """The most subwords (special tokens included) a transformer model's encoder takes:
    the smaller of its tokenizer's model_max_length and its position embeddings; None
    before the model has its encoder (initialize or from_disk).

    model: a spacy-transformers TransformerModel.
    """
    try:
        tokenizer, config = model.tokenizer, model.transformer.config
    except (AttributeError, IndexError):
        return None
    if tokenizer is None or config is None:
        return None
    limits = [int(n) for n in (getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None))
              if isinstance(n, int) and 0 < n < 10**9]
    return min(limits) if limits else None


class EncoderFittedSpans:
    """A span getter that splits the windows of `inner` that pass the encoder's limit.

    inner (SpanGetter): the configured span getter (e.g. spacy-transformers.strided_spans.v1).
    model: the TransformerModel whose tokenizer and limit are used (read at each call:
        they exist only once the model is initialized or loaded).
    """

    def __init__(self, inner: SpanGetter, model: Any) -> None:
        self.inner = inner
        self.model = model

    def __call__(self, docs: List[Doc]) -> List[List[Span]]:
        nested = self.inner(docs)
        limit = encoder_limit(self.model)
        if limit is None:
            return nested
        return [split_to_fit(spans, self.model.tokenizer, limit) for spans in nested]


def split_to_fit(spans: List[Span], tokenizer: Any, limit: int) -> List[Span]:
    """`spans`, with each span of more than `limit` subwords split in halves (by words)
    until every part fits or is one word long; the order is kept.

    spans (List[Span]): one doc's windows.
    tokenizer: the encoder's Hugging Face tokenizer.
    limit (int): the most subwords of a window, special tokens included.
    """
    out: List[Span] = []
    pending = list(spans)
    while pending:
        lengths = [len(ids) for ids in tokenizer([s.text for s in pending], add_special_tokens=True, verbose=False)["input_ids"]]
        todo: List[Span] = []
        for span, n in zip(pending, lengths):
            if n <= limit or len(span) < 2:
                out.append(span)
            else:
                mid = span.start + len(span) // 2
                todo.extend([span.doc[span.start:mid], span.doc[mid:span.end]])
        pending = todo
    return sorted(out, key=lambda s: (s.start, s.end))


def fit_windows_to_encoder(nlp: Language) -> int:
    """Wrap the span getter of every spacy-transformers component already in `nlp`
    (EncoderFittedSpans), once.

    nlp (Language): the pipeline (maral_ner calls this when it is created: the
        transformer comes before it).
    RETURNS (int): how many span getters were wrapped now.
    """
    wrapped = 0
    for _, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        attrs = getattr(model, "attrs", None)
        if not isinstance(attrs, dict) or not callable(attrs.get("get_spans")) or not hasattr(type(model), "tokenizer"):
            continue
        if isinstance(attrs["get_spans"], EncoderFittedSpans):
            continue
        attrs["get_spans"] = EncoderFittedSpans(attrs["get_spans"], model)
        wrapped += 1
    return wrapped
