"""Annotate a corpus with any spaCy pipeline: inputs, partitions, Parquet output.

Input: a file or a directory of files (read in sorted order), each one of
- text: one document per line (blank lines are skipped); id "FILE:LINE";
- JSONL (.jsonl, .ndjson, .json): one object per line with "text" and optionally "id"
  (other field names: text_field, id_field); id "FILE:LINE" when it has none;
- Parquet (.parquet): a string column "text" and optionally "id"; id "FILE:ROW".

The input's lines (Parquet: rows), blank and bad ones included, are cut into partitions
of `partition_size`; partition i is written to OUTPUT/part-{i:06d}.parquet, one row per
entity: id, start and end (character offsets in the text), text, label, score (the
probability stored in doc.spans[scores_key].attrs["scores"], e.g. maral_ner's
doc.spans["maral"]; null when the pipeline stores none). Each file is written under a
temporary name and renamed into place, so a partition on disk is complete; a rerun
skips the finished partitions, and its output equals an uninterrupted run's.
`pyarrow.parquet.read_table(OUTPUT)` (or pandas, or Ray Data) reads the whole output.

A bad line (not UTF-8, invalid JSON, no "text" string, a document the pipeline fails
on) does not stop the run: it is logged with its file and 1-based line, recorded in
OUTPUT/_errors.jsonl, and counted; the command exits with status 3 at the end if there
were more bad lines than --max-bad-lines (default 0). OUTPUT/_summary.json has the
counts, OUTPUT/_manifest.json what the output was made from (a rerun with other input
files, partition size, model or fields is refused rather than mixed in).
"""
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from tqdm import tqdm

from spacy_maral.fileio import atomic_write_text
from spacy_maral.inference.annotate.inputs import BadLine, Partition, input_files, iter_partitions, iter_units, parse_partition
from spacy_maral.inference.annotate.output import (
    ERRORS,
    PARTITIONS,
    SUMMARY,
    errors_path,
    finished_partition,
    merge_errors,
    write_partition,
)
from spacy_maral.inference.annotate.worker import OUTPUT_SCHEMA, annotate_records
from spacy_maral.inference.runner import model_id, open_output, run_partitions
from spacy_maral.util import logger

EXIT_BAD_LINES = 3
LOGGED_BAD_LINES = 20


@dataclass
class AnnotateStats:
    """What an annotate run read and wrote."""

    lines: int = 0
    documents: int = 0
    entities: int = 0
    bad_lines: int = 0
    partitions_written: int = 0
    partitions_kept: int = 0
    seconds: float = 0.0
    engine: str = ""
    n_workers: int = 0
    workers: Dict[str, float] = field(default_factory=dict)  # pid -> peak RSS (MB)
    workers_rss: Dict[str, float] = field(default_factory=dict)  # pid -> RSS after its last partition (MB)
    workers_cpu_s: Dict[str, float] = field(default_factory=dict)  # pid -> CPU seconds on partitions
    first_bad_lines: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        out = asdict(self)
        out["documents_per_second"] = round(self.documents / self.seconds, 2) if self.seconds else None
        return out


def annotate(
    engine,
    input_path: Union[str, Path],
    output_dir: Union[str, Path],
    *,
    fmt: str = "auto",
    text_field: str = "text",
    id_field: str = "id",
    partition_size: int = 10000,
    batch_size: int = 64,
    sort_buffer: int = 0,
    scores_key: Optional[str] = None,
    progress: bool = True,
) -> AnnotateStats:
    """Annotate a corpus, partition by partition, with an engine's workers.

    engine: an engine from spacy_maral.inference.engines.base.make_engine (already entered); its
        spec.model is the pipeline.
    input_path (Union[str, Path]): a text, JSONL or Parquet file, or a directory of them.
    output_dir (Union[str, Path]): the output directory (created; resumed if it holds
        partitions of the same run).
    fmt (str): input format: "auto" (by suffix), "text", "jsonl" or "parquet".
    text_field (str): JSONL key / Parquet column of the text.
    id_field (str): JSONL key / Parquet column of the id.
    partition_size (int): input lines per partition (output file).
    batch_size (int): documents per nlp.pipe batch.
    sort_buffer (int): documents sorted by length together (0 = a whole partition).
    scores_key (Optional[str]): doc.spans key with the scores (None: the pipeline's
        maral_ner spans_key, if any).
    progress (bool): show a progress bar (lines).
    RETURNS (AnnotateStats): the counts; also written to OUTPUT/_summary.json.
    """
    start_time = time.perf_counter()
    output_dir = Path(output_dir)
    files = input_files(input_path, fmt)
    manifest = {
        "inputs": [
            {"name": f.name, "format": f.format, "bytes": f.path.stat().st_size, "mtime_ns": f.path.stat().st_mtime_ns}
            for f in files
        ],
        "partition_size": partition_size, "model": model_id(engine.spec.model),
        "text_field": text_field, "id_field": id_field, "scores_key": scores_key,
    }
    open_output(output_dir, manifest, run="annotate", outputs=PARTITIONS)
    stats = AnnotateStats(engine=engine.name, n_workers=engine.n_workers)
    file_order = {f.name: i for i, f in enumerate(files)}
    bad_input: Dict[int, List[BadLine]] = {}  # partition -> its unparsable lines, until written
    bar = tqdm(desc="annotating", unit="line", disable=not progress)

    def note_bad(bad: Sequence[BadLine]) -> None:
        for b in bad:
            stats.bad_lines += 1
            if len(stats.first_bad_lines) < LOGGED_BAD_LINES:
                stats.first_bad_lines.append(str(b))
                logger.warning("skipped %s", b)
                if len(stats.first_bad_lines) == LOGGED_BAD_LINES:
                    logger.warning("more bad lines are not logged; all are in %s", output_dir / ERRORS)

    def finished(part: Partition) -> Optional[Dict[str, Any]]:
        meta = finished_partition(output_dir, part.index, part.n_lines)
        if meta is not None and meta.get("bad_lines"):
            lines = errors_path(output_dir, part.index).read_text(encoding="utf8").splitlines()
            note_bad([BadLine(**json.loads(line)) for line in lines])
        return meta

    def prepare(part: Partition) -> Optional[List[Any]]:
        records, bad_input[part.index] = parse_partition(part, text_field, id_field)
        return records or None  # None: nothing for a worker to do

    def write(part: Partition, result: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        if result is None:
            result = {"table": OUTPUT_SCHEMA.empty_table(), "documents": 0, "entities": 0, "bad_lines": []}
        else:
            pid = str(result["pid"])
            stats.workers[pid] = max(stats.workers.get(pid, 0.0), result["peak_rss_mb"])
            stats.workers_rss[pid] = result["rss_mb"]
            stats.workers_cpu_s[pid] = round(stats.workers_cpu_s.get(pid, 0.0) + result["cpu_seconds"], 2)
        bad = sorted(bad_input.pop(part.index) + result["bad_lines"], key=lambda b: (file_order[b.file], b.line))
        meta = {"partition": part.index, "lines": part.n_lines, "documents": result["documents"],
                "entities": result["entities"], "bad_lines": len(bad)}
        note_bad(bad)
        write_partition(output_dir, part.index, result["table"], meta, bad)
        return meta

    def on_done(part: Partition, meta: Dict[str, Any], kept: bool) -> None:
        stats.lines += meta["lines"]
        stats.documents += meta["documents"]
        stats.entities += meta["entities"]
        if kept:
            stats.partitions_kept += 1
        else:
            stats.partitions_written += 1
        bar.update(meta["lines"])

    try:
        run_partitions(
            engine, annotate_records, iter_partitions(iter_units(files, text_field, id_field), partition_size),
            finished=finished, prepare=prepare, write=write, on_done=on_done,
            batch_size=batch_size, scores_key=scores_key, sort_buffer=sort_buffer,
        )
    finally:
        bar.close()
    stats.seconds = round(time.perf_counter() - start_time, 2)
    stats.first_bad_lines = [str(b) for b in merge_errors(output_dir, LOGGED_BAD_LINES)]
    atomic_write_text(output_dir / SUMMARY, json.dumps(stats.to_dict(), indent=2))
    return stats
