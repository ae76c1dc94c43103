"""annotate's document ids are unique: the output has one row per entity, keyed by id,
so two documents with one id would mix their entities (with offsets into different
texts) under it. The id is the output's: `str` of a JSONL or Parquet id (1 and "1" are
one id), else "FILE:LINE". While planning counts a file's lines, every line that is a
record gets a 64-bit digest of its id (0: no record: blank, bad); the driver sorts the
digests of all files together, and a repeated digest is confirmed on the two lines' ids
(plan.refuse_repeated_ids) before any partition is annotated. 8 bytes per input line.
"""
import hashlib
from array import array
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy

NO_RECORD = 0


def id_digest(doc_id: Optional[str]) -> int:
    """The 64-bit digest of a record's id (never NO_RECORD); NO_RECORD for no record.

    doc_id (Optional[str]): the id, or None for a line that is no record.
    """
    if doc_id is None:
        return NO_RECORD
    digest = int.from_bytes(hashlib.blake2b(doc_id.encode("utf8", "surrogatepass"), digest_size=8).digest(), "little")
    return digest or 1


class DigestList:
    """The id digests of one file's lines, in order, collected as they are read."""

    def __init__(self) -> None:
        self._values = array("Q")

    def add(self, doc_id: Optional[str]) -> None:
        self._values.append(id_digest(doc_id))

    def to_numpy(self) -> numpy.ndarray:
        return numpy.frombuffer(self._values, dtype=numpy.uint64).copy() if len(self._values) else numpy.zeros(0, numpy.uint64)


def repeated_pairs(digests: Sequence[numpy.ndarray]) -> Iterator[Tuple[Tuple[int, int], Tuple[int, int]]]:
    """The lines whose id digest an earlier line has, each with the first such line, in
    input order: ((file index, 1-based line) of the earlier line, (file index, line) of
    the repeating one).

    digests (Sequence[numpy.ndarray]): each file's id digests (DigestList), in input order.
    """
    if not digests:
        return
    sizes = numpy.asarray([len(d) for d in digests], dtype=numpy.int64)
    values = numpy.concatenate([numpy.asarray(d, dtype=numpy.uint64) for d in digests]) if sizes.sum() else numpy.zeros(0, numpy.uint64)
    positions = numpy.flatnonzero(values != NO_RECORD)
    order = positions[numpy.argsort(values[positions], kind="stable")]  # by digest, then input position
    if order.shape[0] < 2:
        return
    sorted_values = values[order]
    same = sorted_values[1:] == sorted_values[:-1]
    if not same.any():
        return
    starts = numpy.flatnonzero(numpy.concatenate([[True], ~same]))  # first row of each run of one digest
    run_of = numpy.cumsum(numpy.concatenate([[True], ~same])) - 1
    repeats = numpy.flatnonzero(numpy.concatenate([[False], same]))  # rows that repeat their run's first
    firsts = order[starts[run_of[repeats]]]
    later = order[repeats]
    bounds = numpy.concatenate([[0], numpy.cumsum(sizes)])
    for i in numpy.argsort(later, kind="stable").tolist():
        yield _file_line(int(firsts[i]), bounds), _file_line(int(later[i]), bounds)


def _file_line(position: int, bounds: numpy.ndarray) -> Tuple[int, int]:
    """(file index, 1-based line) of a position in the concatenated digests."""
    file = int(numpy.searchsorted(bounds, position, side="right")) - 1
    return file, position - int(bounds[file]) + 1


def count_repeats(digests: List[numpy.ndarray]) -> int:
    """How many lines repeat an earlier line's id digest (all files together)."""
    values = numpy.concatenate(digests) if digests else numpy.zeros(0, numpy.uint64)
    values = values[values != NO_RECORD]
    return int(values.shape[0] - numpy.unique(values).shape[0])
