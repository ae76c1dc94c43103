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
from itertools import islice
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import pyarrow
import pyarrow.parquet as pq
from spacy.language import Language
from spacy.tokens import Doc
from tqdm import tqdm

from .batching import pipe_length_sorted
from .fileio import atomic_open, atomic_write_text, check_manifest, model_id, remove_stale_temporaries
from .util import logger

FORMATS = ("auto", "text", "jsonl", "parquet")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")
OUTPUT_SCHEMA = pyarrow.schema(
    [
        ("id", pyarrow.string()), ("start", pyarrow.int64()), ("end", pyarrow.int64()),
        ("text", pyarrow.string()), ("label", pyarrow.string()), ("score", pyarrow.float64()),
    ]
)
META_KEY = b"spacy_maral.annotate"
SUMMARY = "_summary.json"
ERRORS = "_errors.jsonl"
EXIT_BAD_LINES = 3
LOGGED_BAD_LINES = 20

Record = Tuple[str, str, str, int]  # (id, text, file, line)


@dataclass(frozen=True)
class InputFile:
    """One input file.

    path (Path): where it is.
    name (str): its name in ids and error messages (relative to the input directory).
    format (str): "text", "jsonl" or "parquet".
    """

    path: Path
    name: str
    format: str

    @property
    def unit(self) -> str:
        return "row" if self.format == "parquet" else "line"


@dataclass
class BadLine:
    """An input line (or Parquet row) that was skipped.

    file (str): the input file's name.
    line (int): its 1-based line (or row) number.
    reason (str): what is wrong with it.
    unit (str): "line" or "row".
    """

    file: str
    line: int
    reason: str
    unit: str = "line"

    def __str__(self) -> str:
        return f"{self.file}, {self.unit} {self.line}: {self.reason}"


@dataclass
class Partition:
    """A partition of the input: `n_lines` consecutive lines, as read.

    index (int): its number (output file part-{index:06d}.parquet).
    units (List[Tuple[InputFile, int, Any]]): (file, 1-based line, raw content) of each
        line: the bytes of a text or JSONL line, the (id, text) of a Parquet row.
    """

    index: int
    units: List[Tuple[InputFile, int, Any]]

    @property
    def n_lines(self) -> int:
        return len(self.units)


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


# ------------------------------------------------------------------- inputs
def file_format(path: Path, fmt: str = "auto") -> str:
    """The format of an input file: `fmt`, or from its suffix when fmt is "auto".

    path (Path): the file.
    fmt (str): "auto", "text", "jsonl" or "parquet".
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown input format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    return "text"


def input_files(path: Union[str, Path], fmt: str = "auto") -> List[InputFile]:
    """The input files: `path` itself, or the files under a directory, sorted by path
    (hidden files and files starting with "_" left out).

    path (Union[str, Path]): a file or a directory.
    fmt (str): the format of every file, or "auto" (by suffix).
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*")
            if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts)
        )
        if not files:
            raise ValueError(f"the input directory {path} has no files")
        return [InputFile(p, p.relative_to(path).as_posix(), file_format(p, fmt)) for p in files]
    if not path.exists():
        raise ValueError(f"the input {path} does not exist")
    return [InputFile(path, path.name, file_format(path, fmt))]


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
        with file.path.open("rb") as f:
            for line_no, raw in enumerate(f, start=1):
                yield file, line_no, raw


def _parquet_rows(file: InputFile, text_field: str, id_field: str) -> Iterator[Tuple[InputFile, int, Any]]:
    try:
        reader = pq.ParquetFile(file.path)
    except (OSError, pyarrow.ArrowInvalid) as err:
        raise ValueError(f"{file.name}: not a readable Parquet file ({err})") from err
    names = reader.schema_arrow.names
    if text_field not in names:
        raise ValueError(f"{file.name}: no column {text_field!r} (columns: {names}); choose it with --text-field")
    text_type = reader.schema_arrow.field(text_field).type
    if not (pyarrow.types.is_string(text_type) or pyarrow.types.is_large_string(text_type)):
        raise ValueError(f"{file.name}: column {text_field!r} is {text_type}, not a string column")
    columns = [text_field] + ([id_field] if id_field in names else [])
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


def parse_unit(file: InputFile, line: int, raw: Any, text_field: str = "text", id_field: str = "id") -> Union[Record, BadLine, None]:
    """One input line as a record, a BadLine saying what is wrong, or None (blank).

    file (InputFile): the file it comes from.
    line (int): its 1-based line (or row) number.
    raw (Any): the line's bytes, or a Parquet row's (id, text).
    text_field (str): JSONL: the key of the text.
    id_field (str): JSONL: the key of the id (optional; default id "FILE:LINE").
    RETURNS: (id, text, file name, line), a BadLine, or None for a blank line.
    """
    default_id = f"{file.name}:{line}"
    if file.format == "parquet":
        doc_id, text = raw
        if text is None:
            return BadLine(file.name, line, f"{text_field!r} is null", file.unit)
        return (default_id if doc_id is None else str(doc_id), text, file.name, line)
    try:
        text = raw.decode("utf8")
    except UnicodeDecodeError as err:
        return BadLine(file.name, line, f"not valid UTF-8 ({err.reason} at byte {err.start})")
    if line == 1:
        text = text.lstrip("\ufeff")  # a byte-order mark
    text = text.rstrip("\r\n")
    if not text.strip():
        return None
    if file.format == "text":
        return (default_id, text, file.name, line)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        return BadLine(file.name, line, f"invalid JSON ({err.msg} at column {err.colno})")
    if not isinstance(obj, dict):
        return BadLine(file.name, line, f"not a JSON object but a {type(obj).__name__}")
    if text_field not in obj:
        return BadLine(file.name, line, f"no {text_field!r} field (keys: {sorted(obj)[:10]})")
    value = obj[text_field]
    if not isinstance(value, str):
        return BadLine(file.name, line, f"{text_field!r} is a {type(value).__name__}, not a string")
    doc_id = obj.get(id_field)
    if doc_id is None:
        doc_id = default_id
    elif isinstance(doc_id, bool) or not isinstance(doc_id, (str, int, float)):
        return BadLine(file.name, line, f"{id_field!r} is a {type(doc_id).__name__}, not a string or a number")
    return (str(doc_id), value, file.name, line)


def parse_partition(partition: Partition, text_field: str = "text", id_field: str = "id") -> Tuple[List[Record], List[BadLine]]:
    """The records and the bad lines of a partition (blank lines dropped).

    partition (Partition): the partition, as read.
    text_field (str): the key (column) of the text.
    id_field (str): the key (column) of the id.
    """
    records: List[Record] = []
    bad: List[BadLine] = []
    for file, line, raw in partition.units:
        parsed = parse_unit(file, line, raw, text_field, id_field)
        if isinstance(parsed, BadLine):
            bad.append(parsed)
        elif parsed is not None:
            records.append(parsed)
    return records, bad


# ------------------------------------------------------------ the worker side
def default_scores_key(nlp: Language) -> Optional[str]:
    """The doc.spans key where the pipeline stores entity scores: the spans_key of its
    first component that has one (maral_ner: "maral"), or None.

    nlp (Language): the pipeline.
    """
    return next((p.spans_key for _, p in nlp.pipeline if isinstance(getattr(p, "spans_key", None), str)), None)


def entity_rows(doc: Doc, scores_key: Optional[str]) -> List[Tuple[int, int, str, str, Optional[float]]]:
    """The entities of a processed Doc as (start, end, text, label, score) rows.

    doc (Doc): the Doc, after the pipeline.
    scores_key (Optional[str]): doc.spans key whose group has attrs["scores"] (one
        probability per span); an entity that is not in it gets score None.
    """
    scores: Dict[Tuple[int, int, str], float] = {}
    if scores_key and scores_key in doc.spans:
        group = doc.spans[scores_key]
        for span, score in zip(group, group.attrs.get("scores", [])):
            scores[(span.start_char, span.end_char, span.label_)] = float(score)
    return [
        (ent.start_char, ent.end_char, ent.text, ent.label_, scores.get((ent.start_char, ent.end_char, ent.label_)))
        for ent in doc.ents
    ]


def rows_table(ids: List[str], rows: List[List[Tuple[int, int, str, str, Optional[float]]]]) -> pyarrow.Table:
    """The output table: one row per entity, documents in order.

    ids (List[str]): the document ids.
    rows (List[List[...]]): each document's entity_rows.
    """
    columns: Dict[str, list] = {name: [] for name in OUTPUT_SCHEMA.names}
    for doc_id, doc_rows in zip(ids, rows):
        for start, end, text, label, score in doc_rows:
            columns["id"].append(doc_id)
            columns["start"].append(start)
            columns["end"].append(end)
            columns["text"].append(text)
            columns["label"].append(label)
            columns["score"].append(score)
    return pyarrow.Table.from_pydict(columns, schema=OUTPUT_SCHEMA)


def annotate_records(
    nlp: Language,
    records: Sequence[Record],
    batch_size: int = 64,
    scores_key: Optional[str] = None,
    sort_buffer: int = 0,
) -> Dict[str, Any]:
    """Run the pipeline over one partition's records: the worker's annotate task.

    The records are sorted by length and cut into batches (pipe_length_sorted); the rows
    come out in the records' order. If the pipeline raises on a batch, the partition's
    documents are run one at a time and those it fails on become bad lines.

    nlp (Language): the pipeline.
    records (Sequence[Record]): (id, text, file, line) of each document.
    batch_size (int): documents per nlp.pipe batch.
    scores_key (Optional[str]): doc.spans key with the scores (None: default_scores_key).
    sort_buffer (int): documents sorted together (0 = the whole partition).
    RETURNS (Dict[str, Any]): "table" (pyarrow.Table), "documents", "entities",
        "bad_lines" (List[BadLine]).
    """
    key = scores_key if scores_key is not None else default_scores_key(nlp)
    texts = [r[1] for r in records]
    bad: List[BadLine] = []
    try:
        rows = list(pipe_length_sorted(nlp, texts, batch_size=batch_size, buffer_size=sort_buffer,
                                       transform=lambda doc: entity_rows(doc, key)))
    except Exception as batch_err:  # find the documents it fails on
        logger.warning("the pipeline failed on a batch (%s); running the partition's documents one by one", batch_err)
        rows = []
        for doc_id, text, file, line in records:
            try:
                rows.append(entity_rows(nlp(text), key))
            except Exception as err:
                bad.append(BadLine(file, line, f"the pipeline failed: {type(err).__name__}: {err}"))
                rows.append([])
        if len(bad) == len(records) and not _runs_on_plain_text(nlp):  # the pipeline is broken, not the input
            raise batch_err
    table = rows_table([r[0] for r in records], rows)
    return {"table": table, "documents": len(records) - len(bad), "entities": table.num_rows, "bad_lines": bad}


def _runs_on_plain_text(nlp: Language) -> bool:
    """Whether the pipeline processes a short ordinary sentence: when every document of
    a partition failed, this tells a broken pipeline from bad documents (a partition of
    one bad document)."""
    try:
        nlp("This is a short test sentence.")
    except Exception:
        return False
    return True


# ---------------------------------------------------------- the driver side
def partition_path(output_dir: Path, index: int) -> Path:
    """OUTPUT/part-{index:06d}.parquet (six digits: names sort in partition order up to
    a million partitions)."""
    return Path(output_dir) / f"part-{index:06d}.parquet"


def errors_path(output_dir: Path, index: int) -> Path:
    """The bad lines of one partition: OUTPUT/_part-{index:06d}.errors.jsonl."""
    return Path(output_dir) / f"_part-{index:06d}.errors.jsonl"


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
        atomic_write_text(err_file, "".join(json.dumps(asdict(b), ensure_ascii=False) + "\n" for b in bad))
    elif err_file.exists():
        err_file.unlink()
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode("utf8")})
    with atomic_open(partition_path(output_dir, index), "wb") as f:
        pq.write_table(table, f)


def finished_partition(output_dir: Path, index: int, n_lines: int) -> Optional[Dict[str, Any]]:
    """The metadata of partition `index` if it is on disk, complete and of `n_lines`
    lines (else None: it is (re)written).

    output_dir (Path): the output directory.
    index (int): the partition's number.
    n_lines (int): how many input lines the partition has in this run.
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
    if meta.get("bad_lines") and not errors_path(output_dir, index).exists():
        return None
    return meta


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

    engine: an engine from spacy_maral.engines.make_engine (already entered); its
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
    output_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "inputs": [{"name": f.name, "format": f.format, "bytes": f.path.stat().st_size, "mtime_ns": f.path.stat().st_mtime_ns} for f in files],
        "partition_size": partition_size, "model": model_id(engine.spec.model),
        "text_field": text_field, "id_field": id_field, "scores_key": scores_key,
    }
    check_manifest(output_dir, manifest, run="annotate", outputs="part-*.parquet")
    remove_stale_temporaries(output_dir)  # left by a run killed mid-write
    stats = AnnotateStats(engine=engine.name, n_workers=engine.n_workers)
    file_order = {f.name: i for i, f in enumerate(files)}
    bar = tqdm(desc="annotating", unit="line", disable=not progress)

    def note_bad(bad: Sequence[BadLine]) -> None:
        for b in bad:
            stats.bad_lines += 1
            if len(stats.first_bad_lines) < LOGGED_BAD_LINES:
                stats.first_bad_lines.append(str(b))
                logger.warning("skipped %s", b)
                if len(stats.first_bad_lines) == LOGGED_BAD_LINES:
                    logger.warning("more bad lines are not logged; all are in %s", output_dir / ERRORS)

    def finish(meta: Dict[str, Any], kept: bool) -> None:
        stats.lines += meta["lines"]
        stats.documents += meta["documents"]
        stats.entities += meta["entities"]
        if kept:
            stats.partitions_kept += 1
        else:
            stats.partitions_written += 1
        bar.update(meta["lines"])

    def pending() -> Iterator[Tuple[Dict[str, Any], List[Record]]]:
        for part in iter_partitions(iter_units(files, text_field, id_field), partition_size):
            meta = finished_partition(output_dir, part.index, part.n_lines)
            if meta is not None:
                if meta.get("bad_lines"):
                    note_bad([BadLine(**json.loads(l)) for l in errors_path(output_dir, part.index).read_text(encoding="utf8").splitlines()])
                finish(meta, kept=True)
                continue
            records, bad = parse_partition(part, text_field, id_field)
            meta = {"partition": part.index, "lines": part.n_lines, "bad_input_lines": bad}
            if not records:  # nothing for a worker to do
                meta.update(documents=0, entities=0, bad_lines=len(bad))
                note_bad(bad)
                write_partition(output_dir, part.index, OUTPUT_SCHEMA.empty_table(), _public(meta), bad)
                finish(meta, kept=False)
                continue
            yield meta, records

    try:
        for meta, result in engine.map("annotate", pending(), batch_size=batch_size, scores_key=scores_key, sort_buffer=sort_buffer):
            bad = sorted(meta["bad_input_lines"] + result["bad_lines"], key=lambda b: (file_order[b.file], b.line))
            meta.update(documents=result["documents"], entities=result["entities"], bad_lines=len(bad))
            note_bad(bad)
            write_partition(output_dir, meta["partition"], result["table"], _public(meta), bad)
            finish(meta, kept=False)
            pid = str(result["pid"])
            stats.workers[pid] = max(stats.workers.get(pid, 0.0), result["peak_rss_mb"])
            stats.workers_rss[pid] = result["rss_mb"]
            stats.workers_cpu_s[pid] = round(stats.workers_cpu_s.get(pid, 0.0) + result["cpu_seconds"], 2)
    finally:
        bar.close()
    stats.seconds = round(time.perf_counter() - start_time, 2)
    stats.first_bad_lines = [str(b) for b in _merge_errors(output_dir, LOGGED_BAD_LINES)]
    atomic_write_text(output_dir / SUMMARY, json.dumps(stats.to_dict(), indent=2))
    return stats


def _public(meta: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in meta.items() if k != "bad_input_lines"}


def _merge_errors(output_dir: Path, n_first: int) -> List[BadLine]:
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
