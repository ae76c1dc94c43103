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

Every document needs its own id: an input with two documents of one id (as the output
writes it: 1 and "1" are one) is refused before any partition is annotated, naming both
lines (spacy_maral.inference.annotate.ids).

A bad line (not UTF-8, invalid JSON, no "text" string, a document the pipeline fails
on) does not stop the run: it is logged with its file and 1-based line, recorded in
OUTPUT/_errors.jsonl, and counted; the command exits with status 3 at the end if there
were more bad lines than --max-bad-lines (default 0). OUTPUT/_summary.json has the
counts, OUTPUT/_manifest.json what the output was made from (a rerun with other input
files, partition size, model or fields is refused rather than mixed in). Each partition's
metadata also holds the digest of that manifest and of the partition's own input lines:
a partition made from other input is never kept. A run holds OUTPUT/_lock
(spacy_maral.inference.lock): a second run into the same folder fails at once.

A document with words the encoder gave no subword (its text passes the encoder's length
limit even in the smallest window: spacy_maral.pipeline.subwords) is annotated, but
counted in _summary.json (truncated_documents, words_without_subwords) and listed in
_errors.jsonl with its id and how many words; --max-bad-lines counts it too.
"""
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Union

import numpy
from tqdm import tqdm

from spacy_maral.fileio import atomic_write_text
from spacy_maral.inference.annotate.inputs import InputFile, check_output_outside, input_files
from spacy_maral.inference.annotate.output import ERRORS, PARTITIONS, SUMMARY, merge_errors
from spacy_maral.inference.annotate.plan import FileIndex, PartitionPlan, index_file, plan_partitions, refuse_repeated_ids
from spacy_maral.inference.annotate.task import AnnotatedPartition, annotate_partition
from spacy_maral.inference.engines.base import Done, Engine, model_id
from spacy_maral.inference.engines.ray import RayEngine
from spacy_maral.inference.lock import folder_lock
from spacy_maral.inference.runner import Manifest, manifest_digest, model_files, open_output, run_partitions
from spacy_maral.pipeline.entity_scores import check_scores_key
from spacy_maral.pipeline.folder import pipeline_config
from spacy_maral.pipeline.location import pipeline_folder
from spacy_maral.util import logger

EXIT_BAD_LINES = 3
LOGGED_BAD_LINES = 20


def check_model_scores_key(model: Union[str, Path], scores_key: Optional[str]) -> None:
    """Before any work: `scores_key` (None: the pipeline's own) must be a doc.spans key a
    component of `model` writes, read from its config without loading it; a model not
    found here (a path only the cluster's nodes have) is left to its loading.

    RAISES (ScoresKeyError): no component writes it; the message names the keys they do.
    """
    if scores_key is None or pipeline_folder(model) is None:
        return
    check_scores_key(pipeline_config(model), scores_key, model)


@dataclass
class AnnotateStats:
    """What an annotate run read and wrote."""

    lines: int = 0
    documents: int = 0
    entities: int = 0
    bad_lines: int = 0
    truncated_documents: int = 0  # annotated, but with words the encoder gave no subword (_errors.jsonl)
    words_without_subwords: int = 0
    partitions_written: int = 0
    partitions_kept: int = 0
    seconds: float = 0.0
    engine: str = ""
    n_workers: int = 0
    workers: Dict[str, float] = field(default_factory=dict)  # pid -> peak RSS (MB)
    workers_rss: Dict[str, float] = field(default_factory=dict)  # pid -> RSS after its last partition (MB)
    workers_cpu_s: Dict[str, float] = field(default_factory=dict)  # pid -> CPU seconds on partitions
    precisions: List[str] = field(default_factory=list)  # the precisions the partitions were made at
    first_bad_lines: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        out = asdict(self)
        out["documents_per_second"] = round(self.documents / self.seconds, 2) if self.seconds else None
        return out


def annotate(
    engine: Engine,
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
    indexes: Optional[List[FileIndex]] = None,
) -> AnnotateStats:
    """Annotate a corpus, partition by partition, with an engine's workers.

    engine (Engine): an entered engine (spacy_maral.inference.engines.make_engine); its
        spec.model is the pipeline.
    input_path (Union[str, Path]): a text, JSONL or Parquet file, or a directory of them: a
        local path, or a URI of a filesystem pyarrow supports (s3://bucket/corpus/).
    output_dir (Union[str, Path]): the output directory (created; resumed if it holds
        partitions of the same run).
    fmt (str): input format: "auto" (by suffix), "text", "jsonl" or "parquet".
    text_field (str): JSONL key / Parquet column of the text.
    id_field (str): JSONL key / Parquet column of the id.
    partition_size (int): input lines per partition (output file).
    batch_size (int): documents per nlp.pipe batch.
    sort_buffer (int): documents sorted by length together (0 = a whole partition).
    scores_key (Optional[str]): doc.spans key with the scores (None: the pipeline's
        maral_ner spans_key, if any); one that no component writes is refused
        (ScoresKeyError) before any work.
    progress (bool): show a progress bar (lines).
    indexes (Optional[List[FileIndex]]): the input's checked_input, where the caller
        checked it before starting the engine (None: checked here).
    RETURNS (AnnotateStats): the counts; also written to OUTPUT/_summary.json.
    """
    start_time = time.perf_counter()
    for name, value, least in (("partition_size", partition_size, 1), ("batch_size", batch_size, 1), ("sort_buffer", sort_buffer, 0)):
        if not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer of at least {least}, not {value!r}")
    output_dir = Path(output_dir)
    files = input_files(input_path, fmt)
    check_output_outside(input_path, output_dir)
    check_model_scores_key(engine.spec.model, scores_key)
    manifest = {
        "inputs": [
            {"name": f.name, "format": f.format, "bytes": size, "mtime_ns": mtime_ns}
            for f, (size, mtime_ns) in ((f, f.stat()) for f in files)
        ],
        "partition_size": partition_size, "model": model_id(engine.spec.model),
        "model_files": model_files(engine.spec.model),  # a model changed in place is another model
        "text_field": text_field, "id_field": id_field, "scores_key": scores_key,
        "precision": engine.spec.precision,
    }
    with folder_lock(output_dir, run="annotate"):  # one run at a time in a folder
        return _annotate_owned(engine, files, output_dir, manifest, indexes, text_field=text_field, id_field=id_field,
                               partition_size=partition_size, batch_size=batch_size, sort_buffer=sort_buffer,
                               scores_key=scores_key, progress=progress, start_time=start_time)


def _annotate_owned(
    engine: Engine, files: List[InputFile], output_dir: Path, manifest: Manifest, indexes: Optional[List[FileIndex]], *,
    text_field: str, id_field: str,
    partition_size: int, batch_size: int, sort_buffer: int, scores_key: Optional[str], progress: bool, start_time: float,
) -> AnnotateStats:
    """annotate's run in a folder it holds the lock of (see annotate for the arguments):
    the partitions are planned from the files' line counts, and each worker reads,
    annotates and writes its own (spacy_maral.inference.annotate.task); this process only
    adds up their summaries."""
    if indexes is None:
        indexes = checked_input(files, text_field, id_field, engine)  # before the folder is made this run's
    elif [i.file.name for i in indexes] != [f.name for f in files]:
        raise ValueError("the indexes given are not those of the input's files (checked_input of the same input)")
    open_output(output_dir, manifest, run="annotate", outputs=PARTITIONS)
    stats = AnnotateStats(engine=engine.name, n_workers=engine.n_workers)
    plans = plan_partitions(indexes, partition_size)
    settings = dict(output_dir=str(output_dir), run_digest=manifest_digest(manifest), text_field=text_field,
                    id_field=id_field, batch_size=batch_size, scores_key=scores_key, sort_buffer=sort_buffer)
    with tqdm(desc="annotating", unit="line", disable=not progress) as bar:
        run_partitions(engine, annotate_partition, AnnotateRun(stats, output_dir, bar), plans, **settings)
    stats.seconds = round(time.perf_counter() - start_time, 2)
    stats.first_bad_lines = [str(b) for b in merge_errors(output_dir, LOGGED_BAD_LINES)]
    atomic_write_text(output_dir / SUMMARY, json.dumps(stats.to_dict(), indent=2))
    return stats


class AnnotateRun:
    """annotate's part in run_partitions (runner.PartitionRun): every partition goes to a
    worker as its plan, and the worker keeps or writes it; this process adds up the
    summaries that come back.

    stats (AnnotateStats): the run's counts, added to.
    output_dir (Path): the output folder (named in the log of bad lines).
    bar (tqdm): the progress bar, in lines.
    """

    def __init__(self, stats: AnnotateStats, output_dir: Path, bar: tqdm) -> None:
        self.stats = stats
        self.output_dir = output_dir
        self.bar = bar

    def reuse(self, plan: PartitionPlan) -> bool:
        return False  # the worker checks

    def payload(self, plan: PartitionPlan) -> PartitionPlan:
        return plan

    def finish(self, plan: PartitionPlan, done: Done[AnnotatedPartition]) -> None:
        _add(self.stats, done, self.output_dir)
        self.bar.update(done.result.lines)


def checked_input(files: List[InputFile], text_field: str, id_field: str, engine: Optional[Engine] = None) -> List[FileIndex]:
    """The input files indexed (index_files) and checked: no id is two documents', and
    there is a document. What `annotate` does first; a caller whose files are local calls
    it before it starts an engine, so that bad input fails before the model loads.

    files (List[InputFile]): the input files (input_files).
    text_field, id_field (str): as annotate's.
    engine (Optional[Engine]): a Ray engine indexes on its cluster; None or a local one, here.
    RETURNS (List[FileIndex]): the indexes, for annotate's `indexes`.
    """
    indexes = index_files(engine, files, text_field, id_field)
    refuse_repeated_ids(indexes, text_field, id_field)
    # a line of a text file is a document unless it is blank; a JSONL or Parquet line
    # that is none may be a bad one, which the run reports with its file and line
    if all(i.file.format == "text" or not i.n_units for i in indexes) and not sum(_documents(i) for i in indexes):
        lines = sum(i.n_units for i in indexes)
        names = ", ".join(i.file.name for i in indexes)
        raise ValueError(f"no document to annotate: the input ({names}) has {lines} lines, none of them a document (all blank)")
    return indexes


def _documents(index: FileIndex) -> int:
    """How many lines of an indexed file are documents (their id's digest is not 0)."""
    return int(numpy.count_nonzero(index.id_digests)) if index.id_digests is not None else index.n_units


def index_files(engine: Optional[Engine], files: List[InputFile], text_field: str, id_field: str) -> List[FileIndex]:
    """Every input file's line count and checkpoints: counted here for the local engines
    (this machine's files), by Ray tasks on the cluster for the Ray engine."""
    if not isinstance(engine, RayEngine) or engine.ray is None:
        return [index_file(f, text_field, id_field) for f in files]
    ray = engine.ray
    count = ray.remote(num_cpus=1)(index_file)
    try:
        return ray.get([count.remote(f, text_field, id_field) for f in files])
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)  # the task's own exception, without Ray's traceback
        if isinstance(cause, (ValueError, OSError)):
            raise ValueError(str(cause)) from err
        raise


def _add(stats: AnnotateStats, done: Done[AnnotatedPartition], output_dir: Path) -> None:
    """Add one partition's summary (annotate_partition's result) to the run's counts."""
    part, worker = done.result, done.worker
    stats.lines += part.lines
    stats.documents += part.documents
    stats.entities += part.entities
    stats.bad_lines += part.bad_lines
    if part.precision is not None and part.precision not in stats.precisions:
        stats.precisions = sorted([*stats.precisions, part.precision])
    stats.truncated_documents += part.truncated
    stats.words_without_subwords += part.words_without_subwords
    if part.kept:
        stats.partitions_kept += 1
    else:
        stats.partitions_written += 1
    pid = str(worker.pid)
    stats.workers[pid] = max(stats.workers.get(pid, 0.0), worker.peak_rss_mb)
    stats.workers_rss[pid] = worker.rss_mb
    stats.workers_cpu_s[pid] = round(stats.workers_cpu_s.get(pid, 0.0) + worker.cpu_seconds, 2)
    for line in part.first_bad:
        if len(stats.first_bad_lines) < LOGGED_BAD_LINES:
            stats.first_bad_lines.append(line)
            logger.warning("skipped %s", line)
            if len(stats.first_bad_lines) == LOGGED_BAD_LINES:
                logger.warning("more bad lines are not logged; all are in %s", output_dir / ERRORS)
