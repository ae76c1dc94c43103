"""annotate's output folder: one Parquet file per partition (written last, so its
presence means the partition is complete), its bad lines beside it, and the merged
_errors.jsonl."""
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pyarrow
import pyarrow.parquet as pq

from spacy_maral.fileio import atomic_open, atomic_write_text
from spacy_maral.inference.annotate.inputs import BadLine

META_KEY = b"spacy_maral.annotate"  # the Parquet metadata key of a partition (kept: resumes older outputs)
SUMMARY = "_summary.json"
ERRORS = "_errors.jsonl"
PARTITIONS = "part-*.parquet"


def partition_path(output_dir: Path, index: int) -> Path:
    """OUTPUT/part-{index:06d}.parquet (six digits: names sort in partition order up to
    a million partitions)."""
    return Path(output_dir) / f"part-{index:06d}.parquet"


def errors_path(output_dir: Path, index: int) -> Path:
    """The bad lines of one partition: OUTPUT/_part-{index:06d}.errors.jsonl."""
    return Path(output_dir) / f"_part-{index:06d}.errors.jsonl"


def error_record(bad: BadLine) -> Dict[str, Any]:
    """A BadLine as a line of the errors file: file, line, reason, unit, and for a
    document whose words got no subword its id and how many words."""
    record = asdict(bad)
    if not bad.truncated:
        del record["id"], record["words"]
    return record


def write_partition(output_dir: Path, index: int, table: pyarrow.Table, meta: Dict[str, Any], bad: Sequence[BadLine]) -> None:
    """Write one partition: its bad lines (if any), then its Parquet file, each to a
    temporary name renamed into place; the Parquet file comes last, so its presence
    means the partition is complete.

    output_dir (Path): the output directory.
    index (int): the partition's number.
    table (pyarrow.Table): its entity rows.
    meta (Dict[str, Any]): counts stored in the file's metadata (lines, documents...).
    bad (Sequence[BadLine]): its bad lines.
    """
    err_file = errors_path(output_dir, index)
    if bad:
        atomic_write_text(err_file, "".join(json.dumps(error_record(b), ensure_ascii=False) + "\n" for b in bad))
    elif err_file.exists():
        err_file.unlink()
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode("utf8")})
    with atomic_open(partition_path(output_dir, index), "wb") as f:
        pq.write_table(table, f)


def finished_partition(output_dir: Path, index: int, n_lines: int, identity: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """The metadata of partition `index` if it is on disk, complete, of `n_lines` lines
    and made from this input with these settings (else None: it is (re)written).

    output_dir (Path): the output directory.
    index (int): the partition's number.
    n_lines (int): how many input lines the partition has in this run.
    identity (Dict[str, str]): what the partition's metadata must hold to be kept: the
        run's manifest digest and the partition's input digest.
    """
    path = partition_path(output_dir, index)
    if not path.exists():
        return None
    try:
        meta = json.loads(pq.read_schema(path).metadata[META_KEY])
    except Exception:  # damaged, or not ours: written again
        return None
    if meta.get("lines") != n_lines or meta.get("partition") != index:
        return None
    if any(meta.get(key) != value for key, value in identity.items()):  # another input's, or older
        return None
    if (meta.get("bad_lines") or meta.get("truncated")) and not errors_path(output_dir, index).exists():
        return None
    return meta


def merge_errors(output_dir: Path, n_first: int) -> List[BadLine]:
    """Write OUTPUT/_errors.jsonl: the bad lines of every partition, in input order.

    output_dir (Path): the output directory.
    n_first (int): how many of the first bad lines to return.
    RETURNS (List[BadLine]): the first `n_first` bad lines.
    """
    first: List[BadLine] = []
    with atomic_open(output_dir / ERRORS, "w") as out:
        for part in sorted(output_dir.glob("_part-*.errors.jsonl")):
            text = part.read_text(encoding="utf8")
            out.write(text)
            for line in text.splitlines()[: max(0, n_first - len(first))]:
                first.append(BadLine(**json.loads(line)))
    return first
