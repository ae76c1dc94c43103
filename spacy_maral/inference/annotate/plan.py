"""annotate's partitions planned from the input's line counts, so that a worker reads
its own partition from the files: the driver (or the Ray tasks it starts) counts each
file's lines once and notes the byte offset of every CHECKPOINT_LINES-th line; a
partition is then a list of segments (file, first line, how many lines, where to start
reading), and the worker that processes it reads those lines and nothing else.

The partitions are the same as cutting the lines of all files, in order, into pieces of
`partition_size`: a partition's lines, numbers, raw
content and so its input digest do not depend on who reads it.
"""
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy

from spacy_maral.inference.annotate.ids import DigestList, count_repeats, repeated_pairs
from spacy_maral.inference.annotate.inputs import BadLine, InputFile, Partition, open_parquet, parquet_columns, parse_unit

CHECKPOINT_LINES = 4096  # a worker skips at most this many lines to reach its first one


@dataclass(frozen=True)
class FileIndex:
    """What planning knows of one input file.

    file (InputFile): the file.
    n_units (int): its lines (Parquet: rows).
    checkpoints (Tuple[int, ...]): text and JSONL: the byte offset of line
        k * CHECKPOINT_LINES + 1, for k = 0, 1, ...; empty for Parquet.
    id_digests (Optional[numpy.ndarray]): the digest of each line's document id
        (spacy_maral.inference.annotate.ids; 0 for a line that is no document).
    """

    file: InputFile
    n_units: int
    checkpoints: Tuple[int, ...] = ()
    id_digests: Optional[numpy.ndarray] = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Segment:
    """Consecutive lines of one file that belong to one partition.

    file (InputFile): the file.
    first (int): the 1-based number of the first line (row).
    count (int): how many lines (rows).
    offset (int): text and JSONL: the byte offset where reading starts (a checkpoint at
        or before `first`); 0 for Parquet.
    offset_line (int): the number of the line that starts at `offset`.
    """

    file: InputFile
    first: int
    count: int
    offset: int = 0
    offset_line: int = 1


@dataclass(frozen=True)
class PartitionPlan:
    """A partition as its segments: index (int), segments (Tuple[Segment, ...])."""

    index: int
    segments: Tuple[Segment, ...]

    @property
    def n_lines(self) -> int:
        return sum(s.count for s in self.segments)


def index_file(file: InputFile, text_field: str = "text", id_field: str = "id") -> FileIndex:
    """Count a file's lines (Parquet: rows, from its footer, with its columns checked) and
    note its checkpoints.

    file (InputFile): the file.
    text_field (str): Parquet: the text column.
    id_field (str): Parquet: the id column (optional).
    """
    if file.format == "parquet":
        reader = open_parquet(file)
        parquet_columns(file, reader, text_field, id_field)
        return FileIndex(file, reader.metadata.num_rows, (), _parquet_id_digests(file, reader, text_field, id_field))
    checkpoints: List[int] = []
    digests = DigestList()
    offset = n = 0
    with file.open() as f:
        for raw in f:  # the file's lines, split after b"\n"
            if n % CHECKPOINT_LINES == 0:
                checkpoints.append(offset)
            n += 1
            offset += len(raw)
            digests.add(_record_id(parse_unit(file, n, raw, text_field, id_field)))
    return FileIndex(file, n, tuple(checkpoints), digests.to_numpy())


def _record_id(parsed: object) -> Optional[str]:
    """The id of parse_unit's record; None for a blank or bad line."""
    return None if parsed is None or isinstance(parsed, BadLine) else parsed[0]  # type: ignore[index]


def _parquet_id_digests(file: InputFile, reader, text_field: str, id_field: str) -> numpy.ndarray:
    """The id digests of a Parquet file's rows: its id column (when it has one) and, only
    for row groups whose statistics don't rule out nulls, its text column (a null text is
    a bad row, no document)."""
    digests = DigestList()
    has_id = id_field in reader.schema_arrow.names
    row = 0
    for group in range(reader.metadata.num_row_groups):
        meta = reader.metadata.row_group(group)
        ids = reader.read_row_group(group, columns=[id_field]).column(0).to_pylist() if has_id else [None] * meta.num_rows
        stats = next((meta.column(j).statistics for j in range(meta.num_columns) if meta.column(j).path_in_schema == text_field), None)
        if stats is not None and stats.has_null_count and stats.null_count == 0:
            present = [True] * meta.num_rows
        else:
            present = reader.read_row_group(group, columns=[text_field]).column(0).is_valid().to_pylist()
        for i, (doc_id, there) in enumerate(zip(ids, present)):
            digests.add(_record_id(parse_unit(file, row + i + 1, (doc_id, "" if there else None), text_field, id_field)))
        row += meta.num_rows
    return digests.to_numpy()


def refuse_repeated_ids(indexes: Sequence[FileIndex], text_field: str = "text", id_field: str = "id") -> None:
    """A ValueError naming the first line (file and number) whose document id an earlier
    line of the input has, and that line, when there is one (spacy_maral.inference.annotate.ids).

    indexes (Sequence[FileIndex]): every input file, in input order (index_file).
    text_field, id_field (str): the JSONL keys / Parquet columns.
    """
    digests = [fi.id_digests if fi.id_digests is not None else numpy.zeros(fi.n_units, numpy.uint64) for fi in indexes]
    for (file_a, line_a), (file_b, line_b) in repeated_pairs(digests):
        first, again = indexes[file_a], indexes[file_b]
        doc_id = _record_id(_read_unit(again, line_b, text_field, id_field))
        if doc_id is None or doc_id != _record_id(_read_unit(first, line_a, text_field, id_field)):
            continue  # two ids with one digest
        raise ValueError(
            f"{again.file.name}, {again.file.unit} {line_b}: the id {doc_id!r} is already the id of {first.file.name}, "
            f"{first.file.unit} {line_a} ({count_repeats(digests)} line(s) of the input repeat an earlier line's id). "
            "annotate writes each document's entities under its id, so every document needs its own: fix the ids, "
            "or leave the id field out (each document's id is then FILE:LINE). Nothing was annotated."
        )


def _read_unit(fi: FileIndex, line: int, text_field: str, id_field: str) -> object:
    """One line (row) of a file, parsed (parse_unit)."""
    k = (line - 1) // CHECKPOINT_LINES
    offset = fi.checkpoints[k] if fi.checkpoints else 0
    [(file, number, raw)] = list(read_segment(Segment(fi.file, line, 1, offset, k * CHECKPOINT_LINES + 1), text_field, id_field))
    return parse_unit(file, number, raw, text_field, id_field)


def plan_partitions(indexes: Sequence[FileIndex], partition_size: int) -> Iterator[PartitionPlan]:
    """Cut the lines of all files, in order, into partitions of `partition_size` lines.

    indexes (Sequence[FileIndex]): the files, in input order.
    partition_size (int): lines per partition (the last one may have fewer).
    """
    if partition_size < 1:
        raise ValueError(f"partition_size must be at least 1, not {partition_size}")
    index, segments, room = 0, [], partition_size
    for fi in indexes:
        line = 1
        while line <= fi.n_units:
            count = min(room, fi.n_units - line + 1)
            k = (line - 1) // CHECKPOINT_LINES
            offset = fi.checkpoints[k] if fi.checkpoints else 0
            segments.append(Segment(fi.file, line, count, offset, k * CHECKPOINT_LINES + 1))
            line += count
            room -= count
            if room == 0:
                yield PartitionPlan(index, tuple(segments))
                index, segments, room = index + 1, [], partition_size
    if segments:
        yield PartitionPlan(index, tuple(segments))


def read_segment(segment: Segment, text_field: str = "text", id_field: str = "id") -> Iterator[Tuple[InputFile, int, object]]:
    """The lines of a segment: (file, 1-based line, raw bytes; a Parquet row: (id, text)).

    segment (Segment): what to read.
    text_field (str): Parquet: the text column.
    id_field (str): Parquet: the id column (optional).
    """
    file, last = segment.file, segment.first + segment.count - 1
    if file.format == "parquet":
        yield from _parquet_segment(segment, text_field, id_field)
        return
    with file.open() as f:
        f.seek(segment.offset)
        line = segment.offset_line
        for raw in f:
            if line > last:
                return
            if line >= segment.first:
                yield file, line, raw
            line += 1
    if line <= last:
        raise ValueError(f"{file.name}: has {line - 1} lines, not the {last} it had when the run was planned (it changed)")


def _parquet_segment(segment: Segment, text_field: str, id_field: str) -> Iterator[Tuple[InputFile, int, object]]:
    file = segment.file
    reader = open_parquet(file)
    columns = parquet_columns(file, reader, text_field, id_field)
    first, last = segment.first, segment.first + segment.count - 1
    row = 0  # rows before the current row group
    for group in range(reader.metadata.num_row_groups):
        n = reader.metadata.row_group(group).num_rows
        if row + n >= first and row < last:
            table = reader.read_row_group(group, columns=columns)
            texts = table.column(0).to_pylist()
            ids = table.column(1).to_pylist() if len(columns) > 1 else [None] * len(texts)
            for i, (doc_id, text) in enumerate(zip(ids, texts)):
                number = row + i + 1
                if first <= number <= last:
                    yield file, number, (doc_id, text)
        row += n
        if row >= last:
            return
    if row < last:
        raise ValueError(f"{file.name}: has {row} rows, not the {last} it had when the run was planned (it changed)")


def load_partition(plan: PartitionPlan, text_field: str = "text", id_field: str = "id") -> Partition:
    """A planned partition read from its files (by the worker that processes it)."""
    return Partition(plan.index, [unit for s in plan.segments for unit in read_segment(s, text_field, id_field)])
