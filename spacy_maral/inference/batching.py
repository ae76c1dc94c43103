"""Length-sorted batching: batches of similar length, results in the original order.

A transformer pads every sentence of a batch to the longest one, so a batch in arrival
order spends most of its time on padding when sentence lengths vary (a 60-word sentence
makes 63 short ones pay for 60 words). Sorting a buffer of documents by length before
cutting it into batches removes most of the padding; the results are put back in the
order the documents came in. The buffer bounds the memory; its batches, and so the
results, depend only on the buffer's contents, which is what makes two engines that
process the same buffers give bit-identical output.
"""
from itertools import islice
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, TypeVar, Union

from spacy.language import Language
from spacy.tokens import Doc

T = TypeVar("T")
R = TypeVar("R")


def text_length(item: Union[str, Doc]) -> int:
    """The sort key: the length in characters of a text or of a Doc's text.

    item (Union[str, Doc]): a text or a Doc.
    RETURNS (int): its number of characters (a proxy for its number of word pieces).
    """
    return len(item.text) if isinstance(item, Doc) else len(item)


def length_order(items: Sequence[T], key: Callable[[T], int] = text_length) -> List[int]:
    """The indices of `items`, shortest first; equal lengths keep their order (stable).

    items (Sequence[T]): texts or Docs.
    key (Callable[[T], int]): the length of one item.
    RETURNS (List[int]): a permutation of range(len(items)).
    """
    return sorted(range(len(items)), key=lambda i: key(items[i]))


def length_sorted_batches(
    items: Sequence[T], batch_size: int, key: Callable[[T], int] = text_length
) -> Iterator[List[T]]:
    """Cut `items` into batches of `batch_size` items of similar length.

    items (Sequence[T]): the buffer (texts or Docs).
    batch_size (int): items per batch (the last batch may be smaller).
    key (Callable[[T], int]): the length of one item.
    YIELDS (List[T]): the batches, shortest first.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    order = length_order(items, key)
    for start in range(0, len(order), batch_size):
        yield [items[i] for i in order[start : start + batch_size]]


def pipe_length_sorted(
    nlp: Language,
    items: Iterable[Union[str, Doc]],
    *,
    batch_size: int = 64,
    buffer_size: int = 2048,
    transform: Optional[Callable[[Doc], R]] = None,
    key: Callable[[Union[str, Doc]], int] = text_length,
    **pipe_kwargs,
) -> Iterator[Union[Doc, R]]:
    """nlp.pipe over length-sorted batches, yielding the results in the input order.

    Reads `buffer_size` items at a time, sorts them by length, runs nlp.pipe over them in
    that order with `batch_size`, and yields the buffer's results in the order the items
    came in. With `transform`, each Doc is replaced by transform(doc) as soon as it
    leaves the pipeline, so only the (small) transformed results are held while the
    buffer is restored to its order, not the Docs and their transformer outputs.

    nlp (Language): the pipeline.
    items (Iterable[Union[str, Doc]]): texts or Docs, in arrival order.
    batch_size (int): documents per nlp.pipe batch.
    buffer_size (int): documents sorted together (0 or less: all of `items`, in memory).
    transform (Optional[Callable[[Doc], R]]): applied to each processed Doc.
    key (Callable): the length of one item (characters by default).
    pipe_kwargs: passed on to nlp.pipe (e.g. disable=[...]); not n_process, which would
        batch across buffers (use one process per worker instead).
    YIELDS (Union[Doc, R]): one result per item, in input order.
    """
    if "n_process" in pipe_kwargs and pipe_kwargs["n_process"] not in (None, 1):
        raise ValueError("pipe_length_sorted runs in one process: start one worker per process instead of n_process")
    pipe_kwargs.pop("n_process", None)
    iterator = iter(items)
    while True:
        buffer = list(islice(iterator, buffer_size)) if buffer_size > 0 else list(iterator)
        if not buffer:
            return
        order = length_order(buffer, key)
        results: List[object] = [None] * len(buffer)
        docs = nlp.pipe((buffer[i] for i in order), batch_size=batch_size, **pipe_kwargs)
        for i, doc in zip(order, docs):
            results[i] = transform(doc) if transform is not None else doc
        yield from results  # type: ignore[misc]
        if buffer_size <= 0:
            return
