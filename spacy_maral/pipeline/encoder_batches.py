"""Length-sorted sub-batches: the documents of a transformer batch sorted by length and
run in sub-batches, each padded only to its own longest window, and the sub-batches'
outputs put back together as the one FullTransformerBatch that the whole batch would have
given (documents in their order, every window padded to the batch's longest). In training,
the merged output's gradient goes back to each sub-batch's own backprop, cut to its rows
and width: the gradients are those of the whole batch, without its padding's work.

spacy_maral.EncoderRuntime.v1 runs this at prediction time (`sort_by_length`, so that
plain `nlp.pipe` in arrival order pays little for padding) and in training
(`train_bucket_rows`).
"""
from typing import Any, Callable, List, Sequence, Tuple

import numpy
import torch
from spacy.tokens import Doc
from spacy_transformers.data_classes import FullTransformerBatch, WordpieceBatch
from thinc.api import get_array_module
from thinc.types import Ragged

Part = Tuple[List[int], FullTransformerBatch]


def length_sorted(
    run: Callable[[List[Doc]], Tuple[FullTransformerBatch, Callable]], docs: Sequence[Doc], bucket_rows: int,
    tokenizer: Any = None, pad_id: int = 0, pad_token: str = "",
) -> Tuple[FullTransformerBatch, Callable[[FullTransformerBatch], List[Doc]]]:
    """Run `run` on sub-batches of at most `bucket_rows` documents of similar length, merge
    the outputs in the documents' order, and return the merged output with its backprop.

    run (Callable): the inner model on a list of docs: its output and its backprop.
    docs (Sequence[Doc]): the batch.
    bucket_rows (int): documents per sub-batch (a sentence is one window; a longer document
        brings all its windows).
    tokenizer: the encoder's tokenizer: documents are sorted by their subwords (by their
        characters without it).
    pad_id (int): the tokenizer's padding id, for the merged input_ids.
    pad_token (str): its padding token, for the merged wordpiece strings.
    RETURNS (Tuple[FullTransformerBatch, Callable]): the output as `run(docs)` would give it,
        and the backprop that takes the gradient of that output (rows in the merged order,
        padded to the merged width) to each sub-batch's backprop.
    """
    kept = [i for i, doc in enumerate(docs) if len(doc)]
    lengths = subword_lengths(tokenizer, [docs[i].text for i in kept])
    order = [i for _, i in sorted(zip(lengths, kept))]
    if not order:
        return FullTransformerBatch.empty(len(docs)), lambda d_output: list(docs)
    parts: List[Part] = []
    backprops: List[Callable] = []
    for start in range(0, len(order), bucket_rows):
        indices = order[start : start + bucket_rows]
        output, backprop = run([docs[i] for i in indices])
        parts.append((indices, output))
        backprops.append(backprop)
    row_maps, n_rows = _row_maps(parts, len(docs))
    merged = merge_batches(parts, len(docs), row_maps, n_rows, pad_id, pad_token)

    def backprop_merged(d_output: FullTransformerBatch) -> List[Doc]:
        for (_, batch), rows, backprop in zip(parts, row_maps, backprops):
            width = batch.wordpieces.input_ids.shape[1]
            d_part = type(d_output.model_output)(
                **{key: _rows_of(value, rows, width) for key, value in d_output.model_output.items()}
            )
            backprop(FullTransformerBatch(spans=batch.spans, wordpieces=batch.wordpieces, model_output=d_part,
                                          align=batch.align))
        return list(docs)

    return merged, backprop_merged


def _rows_of(value: Any, rows: numpy.ndarray, width: int) -> Any:
    """A sub-batch's rows of a merged gradient field (rows first, padded to the merged
    width), cut to the sub-batch's own width; a tuple field field by field."""
    if isinstance(value, tuple):
        return tuple(_rows_of(v, rows, width) for v in value)
    if not isinstance(value, torch.Tensor):
        return value
    part = value[torch.as_tensor(rows, dtype=torch.long, device=value.device)]
    return part[:, :width] if part.dim() == 3 else part


def subword_lengths(tokenizer: Any, texts: List[str]) -> List[int]:
    """The number of subwords of each text (its characters without a tokenizer)."""
    if tokenizer is None or not texts:
        return [len(text) for text in texts]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]


def merge_batches(
    parts: List[Part], n_docs: int, row_maps: List[numpy.ndarray], n_rows: int, pad_id: int = 0, pad_token: str = ""
) -> FullTransformerBatch:
    """One FullTransformerBatch from the batches of sub-batches of documents.

    parts (List[Tuple[List[int], FullTransformerBatch]]): each sub-batch's document
        indices (into the whole batch) and its output.
    n_docs (int): documents in the whole batch (those in no part have no windows).
    row_maps (List[numpy.ndarray]), n_rows (int): each part's rows in the merged batch and
        its number of rows (`_row_maps`).
    pad_id (int): the tokenizer's padding id.
    pad_token (str): its padding token.
    """
    spans: List[list] = [[] for _ in range(n_docs)]
    for indices, batch in parts:
        for i, doc_spans in zip(indices, batch.spans):
            spans[i] = doc_spans
    width = max(batch.wordpieces.input_ids.shape[1] for _, batch in parts)
    return FullTransformerBatch(
        spans=spans,
        wordpieces=_merge_wordpieces(parts, row_maps, n_rows, width, pad_id, pad_token),
        model_output=_merge_model_output(parts, row_maps, n_rows, width),
        align=_merge_align(parts, row_maps, n_docs, width),
    )


def _row_maps(parts: List[Part], n_docs: int) -> Tuple[List[numpy.ndarray], int]:
    """Each sub-batch's rows (windows) in the merged batch, whose rows are the documents'
    windows in the documents' order; and the merged batch's number of rows."""
    n_windows = [0] * n_docs
    for indices, batch in parts:
        for i, doc_spans in zip(indices, batch.spans):
            n_windows[i] = len(doc_spans)
    first_row = numpy.concatenate([[0], numpy.cumsum(n_windows)]).astype(int)
    row_maps = [
        numpy.concatenate([numpy.arange(first_row[i], first_row[i + 1]) for i in indices]).astype(int)
        for indices, _ in parts
    ]
    return row_maps, int(first_row[-1])


def _merge_wordpieces(
    parts: List[Part], row_maps: List[numpy.ndarray], n_rows: int, width: int, pad_id: int, pad_token: str
) -> WordpieceBatch:
    sample = parts[0][1].wordpieces
    xp = get_array_module(sample.input_ids)
    strings: List[List[str]] = [[] for _ in range(n_rows)]
    lengths = [0] * n_rows
    input_ids = xp.full((n_rows, width), pad_id, dtype=sample.input_ids.dtype)
    attention_mask = xp.zeros((n_rows, width), dtype=sample.attention_mask.dtype)
    has_types = sample.token_type_ids is not None
    token_type_ids = xp.zeros((n_rows, width), dtype=sample.token_type_ids.dtype) if has_types else None
    for (_, batch), rows in zip(parts, row_maps):
        wps = batch.wordpieces
        w = wps.input_ids.shape[1]
        index = xp.asarray(rows)
        input_ids[index, :w] = wps.input_ids
        attention_mask[index, :w] = wps.attention_mask
        if has_types:
            token_type_ids[index, :w] = wps.token_type_ids
        for row, string, length in zip(rows.tolist(), wps.strings, wps.lengths):
            strings[row] = list(string) + [pad_token] * (width - len(string))
            lengths[row] = length
    return WordpieceBatch(strings=strings, input_ids=input_ids, attention_mask=attention_mask,
                          lengths=lengths, token_type_ids=token_type_ids)


def _merge_model_output(parts: List[Part], row_maps: List[numpy.ndarray], n_rows: int, width: int):
    first = parts[0][1].model_output
    merged = {}
    for key in first.keys():
        merged[key] = _merge_field([(rows, batch.model_output[key]) for (_, batch), rows in zip(parts, row_maps)], n_rows, width)
    return type(first)(**merged)


def _merge_field(parts: List[Tuple[numpy.ndarray, object]], n_rows: int, width: int):
    """One output field (a tensor with rows first, or a tuple of them, e.g. hidden states),
    in the batch's row order, padded to `width`."""
    sample = parts[0][1]
    if isinstance(sample, tuple):
        return tuple(_merge_field([(rows, value[i]) for rows, value in parts], n_rows, width) for i in range(len(sample)))
    if not isinstance(sample, torch.Tensor):
        return sample
    shape = list(sample.shape)
    shape[0] = n_rows
    if sample.dim() == 3:  # (rows, length, width)
        shape[1] = width
    elif sample.dim() == 4:  # attentions: (rows, heads, length, length)
        shape[2] = shape[3] = width
    out = sample.new_zeros(shape)
    for rows, value in parts:
        index = torch.as_tensor(rows, dtype=torch.long, device=value.device)
        if value.dim() == 3:
            out[index, : value.shape[1]] = value
        elif value.dim() == 4:
            out[index, :, : value.shape[2], : value.shape[3]] = value
        else:
            out[index] = value
    return out


def _tokens_covered(spans: list) -> int:
    """How many distinct tokens a document's windows cover (overlaps counted once)."""
    covered, end = 0, -1
    for start, stop in sorted((span.start, span.end) for span in spans):
        if stop > max(start, end):
            covered += stop - max(start, end)
            end = stop
    return covered


def _merge_align(parts: List[Part], row_maps: List[numpy.ndarray], n_docs: int, width: int) -> Ragged:
    """The tokens' alignment to the merged wordpieces: each sub-batch's indices (row * its
    width + column) moved to their row and width in the merged batch, the documents' tokens
    in the documents' order."""
    per_doc: List[Tuple[numpy.ndarray, numpy.ndarray]] = [None] * n_docs  # type: ignore[list-item]
    for (indices, batch), rows in zip(parts, row_maps):
        w = batch.wordpieces.input_ids.shape[1]
        align = batch.align
        data = numpy.asarray(align.dataXd.get() if hasattr(align.dataXd, "get") else align.dataXd).astype(int)
        lengths = numpy.asarray(align.lengths.get() if hasattr(align.lengths, "get") else align.lengths).astype(int)
        moved = rows[data // w] * width + data % w if data.size else data
        starts = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(int)
        first = 0
        for i, doc_spans in zip(indices, batch.spans):
            if not doc_spans or not len(doc_spans[0]):
                continue
            last = first + _tokens_covered(doc_spans)  # the document's tokens, each once
            per_doc[i] = (moved[starts[first] : starts[last]], lengths[first:last])
            first = last
    kept = [entry for entry in per_doc if entry is not None]
    if not kept:
        return Ragged(numpy.zeros((0,), dtype="i"), numpy.zeros((0,), dtype="i"))
    data = numpy.concatenate([d for d, _ in kept]).astype("i")
    lengths = numpy.concatenate([n for _, n in kept]).astype("i")
    return Ragged(data, lengths)
