"""Transformer windows fitted to the encoder's subword limit, and the words it still gave
no subword.

`spacy_maral.encoder_windows.v1` is a span getter for `[components.transformer.model.encoder.get_spans]`:
strided windows (as spacy-transformers.strided_spans.v1), each window whose subwords pass the
encoder's real limit (the smaller of its tokenizer's model_max_length and its position
embeddings) split in halves until each part fits. Ordinary prose stays far below the limit and
its windows are left as they are; token-dense text (long rare words, URLs, code) is not cut
silently. The getter reads the limit and the tokenizer from the TransformerModel it belongs to:
`spacy_maral.EncoderRuntime.v1` tells it which one when the config builds the model
(EncoderWindows.bind). Only a single word longer than the limit is still cut, and counted: a
word the encoder gave no subword (a window cut at its maximum length, or characters its
tokenizer drops) has a zero vector and is never part of an entity; nothing else would say so.
"""
from typing import Any, List, Optional, Sequence

import numpy
from spacy.tokens import Doc, Span
from spacy_transformers.layers.listener import TransformerListener
from spacy_transformers.span_getters import get_strided_spans
from spacy_transformers.util import registry
from thinc.api import Model

from spacy_maral.pipeline.nontext import is_non_text_token
from spacy_maral.util import logger

NO_SUBWORD_WARNING = (
    "maral_ner '%s': %d word(s) in this batch got no subword from the encoder and cannot be "
    "entities: a window of [components.transformer.model.encoder.get_spans] passed the encoder's maximum "
    "length (lower its window and stride), or its tokenizer drops their characters. "
    "Said once per component."
)


def words_without_subwords(docs: Sequence[Doc]) -> int:
    """How many non-space words of `docs` got no subword (after the transformer ran).

    docs (Sequence[Doc]): docs with `doc._.trf_data` (spacy-transformers); others count 0.
    RETURNS (int): the number of such words.
    """
    return sum(len(lost_words(doc)) for doc in docs)


def listened_encoder_skipped(model: Model, docs: Sequence[Doc]) -> bool:
    """Whether `model` listens to a transformer component (a TransformerListener inside
    it) that did not run on a non-empty doc of `docs` (disabled, or not in the pipeline):
    the listener would give zero vectors, and every prediction from them is noise.

    model (Model): a component's model.
    docs (Sequence[Doc]): the docs it is about to predict.
    """
    if not any(len(doc) for doc in docs):
        return False
    # no transformer component was made in this process (a pipeline whose maral_ner has its
    # own copy of the encoder): the extension does not exist, and nothing fed a listener
    fed = Doc.has_extension("trf_data") and all(doc._.trf_data is not None for doc in docs if len(doc))
    if fed:  # the common case, without walking the model
        return False
    return any(isinstance(node, TransformerListener) for node in model.walk())


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


class EncoderWindows:
    """The span getter of `spacy_maral.encoder_windows.v1`: strided windows of `window`
    words every `stride` words, each split in halves (by words) until its subwords fit the
    encoder's limit.

    window (int): words per window.
    stride (int): words from one window's start to the next.
    """

    def __init__(self, window: int, stride: int) -> None:
        if window < 1 or stride < 1:
            raise ValueError(f"encoder_windows: window and stride must be at least 1, not {window} and {stride}")
        self.window = int(window)
        self.stride = int(stride)
        self.encoder: Any = None
        self._warned_unbound = False

    def bind(self, encoder: Any) -> None:
        """Read the tokenizer and the limit from `encoder` (a spacy-transformers
        TransformerModel; they exist once it is initialized or loaded). Called by
        spacy_maral.EncoderRuntime.v1 when the config builds it, or when it is copied (the
        copy gets a getter of its own); a getter already bound keeps its encoder.
        """
        if self.encoder is None:
            self.encoder = encoder

    def __call__(self, docs: List[Doc]) -> List[List[Span]]:
        nested = get_strided_spans(docs, window=self.window, stride=self.stride)
        if self.encoder is None:
            if not self._warned_unbound:
                logger.warning(
                    "spacy_maral.encoder_windows.v1 is not inside spacy_maral.EncoderRuntime.v1: its windows "
                    "are not fitted to the encoder's limit (plain strided windows)"
                )
                self._warned_unbound = True
            return nested
        limit = encoder_limit(self.encoder)
        if limit is None:
            return nested
        return [split_to_fit(spans, self.encoder.tokenizer, limit) for spans in nested]


@registry.span_getters("spacy_maral.encoder_windows.v1")
def configure_encoder_windows(window: int = 128, stride: int = 96) -> EncoderWindows:
    """Strided windows fitted to the encoder's subword limit (EncoderWindows), for
    `[components.transformer.model.encoder.get_spans]` under spacy_maral.EncoderRuntime.v1.

    window (int): words per window.
    stride (int): words from one window's start to the next (below `window`: the windows
        overlap, and each word gets context on both sides).
    """
    return EncoderWindows(window, stride)


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
