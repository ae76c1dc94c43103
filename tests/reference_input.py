"""The input read whole, the simple way: every line of the files in order, cut into
partitions. The reference that annotate's planned partitions (plan.py: line counts,
checkpoints, segments read by the workers) must equal, line for line.
"""
from itertools import islice
from typing import Any, Iterable, Iterator, Sequence, Tuple

from spacy_maral.inference.annotate.inputs import InputFile, Partition, open_parquet, parquet_columns


def iter_units(files: Sequence[InputFile], text_field: str = "text", id_field: str = "id") -> Iterator[Tuple[InputFile, int, Any]]:
    """Every line (Parquet: row) of the input files, unparsed, in order.

    files (Sequence[InputFile]): the input files.
    text_field (str): Parquet: the text column.
    id_field (str): Parquet: the id column (optional).
    YIELDS (Tuple[InputFile, int, Any]): (file, 1-based line, raw): the bytes of a line,
        or (id or None, text or None) of a Parquet row.
    """
    for file in files:
        if file.format == "parquet":
            yield from _parquet_rows(file, text_field, id_field)
            continue
        with file.open() as f:
            for line_no, raw in enumerate(f, start=1):
                yield file, line_no, raw


def _parquet_rows(file: InputFile, text_field: str, id_field: str) -> Iterator[Tuple[InputFile, int, Any]]:
    reader = open_parquet(file)
    columns = parquet_columns(file, reader, text_field, id_field)
    row = 0
    for batch in reader.iter_batches(batch_size=4096, columns=columns):
        texts = batch.column(0).to_pylist()
        ids = batch.column(1).to_pylist() if len(columns) > 1 else [None] * len(texts)
        for doc_id, text in zip(ids, texts):
            row += 1
            yield file, row, (doc_id, text)


def iter_partitions(units: Iterable[Tuple[InputFile, int, Any]], partition_size: int) -> Iterator[Partition]:
    """Cut the input's lines into partitions of `partition_size` lines.

    units (Iterable): the lines (iter_units).
    partition_size (int): lines per partition (the last one may have fewer).
    """
    if partition_size < 1:
        raise ValueError(f"partition_size must be at least 1, not {partition_size}")
    iterator = iter(units)
    index = 0
    while True:
        chunk = list(islice(iterator, partition_size))
        if not chunk:
            return
        yield Partition(index, chunk)
        index += 1
