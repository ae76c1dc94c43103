"""annotate's input: text, JSONL and Parquet files, cut into partitions of lines, and
each line parsed into a record or a bad line (file, 1-based line, reason)."""
import io
import json
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, BinaryIO, Iterator, List, Optional, Tuple, Union

import pyarrow
import pyarrow.parquet as pq

from spacy_maral.corpora.lines import decode_line
from spacy_maral.corpora.target_path import CONLL_SUFFIXES, NOT_PLAIN_TEXT, conll_looking_line
from spacy_maral.fileio import check_output_dir
from spacy_maral.fingerprint import bytes_digest

FORMATS = ("auto", "text", "jsonl", "parquet")
DEFAULT_ID_FIELD = "id"  # the one id field that may be missing (then the id is FILE:LINE)
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")

Record = Tuple[str, str, str, int]  # (id, text, file, line)


@dataclass(frozen=True)
class InputFile:
    """One input file.

    path (Union[Path, str]): where it is: a local path, or the path inside `fs`.
    name (str): its name in ids and error messages (relative to the input directory).
    format (str): "text", "jsonl" or "parquet".
    fs (Any): the pyarrow filesystem that holds it (an input given as a URI: s3://,
        gs://, hdfs://, file://...), or None for a local path.
    """

    path: Union[Path, str]
    name: str
    format: str
    fs: Any = None

    @property
    def unit(self) -> str:
        return "row" if self.format == "parquet" else "line"

    def open(self) -> BinaryIO:
        """The file, opened for reading bytes (seekable)."""
        if self.fs is None:
            return Path(self.path).open("rb")
        return io.BufferedReader(self.fs.open_input_file(str(self.path)))

    def stat(self) -> Tuple[int, int]:
        """(size in bytes, modification time in ns) of the file."""
        if self.fs is None:
            st = Path(self.path).stat()
            return st.st_size, st.st_mtime_ns
        info = self.fs.get_file_info(str(self.path))
        return info.size, info.mtime_ns or 0


@dataclass
class BadLine:
    """An input line (or Parquet row) that was skipped.

    file (str): the input file's name.
    line (int): its 1-based line (or row) number.
    reason (str): what is wrong with it.
    unit (str): "line" or "row".
    id (Optional[str]): the document's id, for a document that was annotated but whose
        text passed the encoder's limit (None for a skipped line).
    words (int): how many of its words got no subword from the encoder (0 for a skipped
        line).
    """

    file: str
    line: int
    reason: str
    unit: str = "line"
    id: Optional[str] = None
    words: int = 0

    @property
    def truncated(self) -> bool:
        """A document annotated with words the encoder gave no subword (not skipped)."""
        return self.words > 0

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


def left_out(relative: PurePath) -> bool:
    """Whether a path inside an input folder is not input: one of its parts (a hidden
    file or folder, or one starting with "_", such as the run's own records) says so."""
    return any(part.startswith((".", "_")) for part in relative.parts)


def input_files(path: Union[str, Path], fmt: str = "auto") -> List[InputFile]:
    """The input files: `path` itself, or the files under a directory, sorted by path
    (hidden files and files starting with "_" left out).

    path (Union[str, Path]): a file or a directory: a local path, or a URI of any
        filesystem pyarrow supports (s3://bucket/corpus/, gs://..., file:///...).
    fmt (str): the format of every file, or "auto" (by suffix).
    """
    if isinstance(path, str) and "://" in path:
        return _uri_files(path, fmt)
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not left_out(p.relative_to(path)))
        if not files:
            raise ValueError(f"the input directory {path} has no files")
        return [InputFile(p, p.relative_to(path).as_posix(), file_format(p, fmt)) for p in files]
    if not path.exists():
        raise ValueError(f"the input {path} does not exist")
    if fmt == "auto" and file_format(path) == "text":
        check_not_a_corpus(path)
    return [InputFile(path, path.name, file_format(path, fmt))]


def check_not_a_corpus(path: Path) -> None:
    """Refuse a local file that `auto` would read as text, a document a line, but that is
    a `.spacy` corpus, compressed, or CoNLL-style (a document per token line otherwise).

    path (Path): the input file (given alone; --format text reads it as text anyway).
    """
    suffix = path.suffix.lower()
    if suffix == ".spacy" or suffix in NOT_PLAIN_TEXT:  # what is left of NOT_PLAIN_TEXT here: compressed
        raise ValueError(f"{path}: annotate reads text (a document a line), JSONL or Parquet, not {suffix}: "
                         "write its documents one a line to a .txt file first")
    advice = "write its sentences one a line to a .txt file first (or give --format text)"
    if suffix in CONLL_SUFFIXES:
        raise ValueError(f"{path}: a {suffix} file is CoNLL-style (a token a line), which annotate would read as "
                         f"a document a line: {advice}")
    found = conll_looking_line(path)
    if found is not None:
        raise ValueError(f"{path}, line {found[0]}: a CoNLL-style file (a token a line), which annotate would read as "
                         f"a document a line: {advice}")


def check_output_outside(input_path: Union[str, Path], output_dir: Union[str, Path]) -> None:
    """Refuse an output folder that can't be written (fileio.check_output_dir), or one
    inside a local input folder where a rerun would read its partitions as input (not
    under a folder starting with "_" or ".", which input_files leaves out; a URI input
    is not checked).

    input_path (Union[str, Path]): the input file or folder.
    output_dir (Union[str, Path]): the output folder.
    """
    check_output_dir(Path(output_dir), "the output folder")
    if isinstance(input_path, str) and "://" in input_path or not Path(input_path).is_dir():
        return
    inside, out = Path(input_path).resolve(), Path(output_dir).resolve()
    if out == inside or (inside in out.parents and not left_out(out.relative_to(inside))):
        raise ValueError(f"the output folder {output_dir} is inside the input folder {input_path}: a rerun would read "
                         "its partitions as input; choose a folder outside it")


def _uri_files(uri: str, fmt: str) -> List[InputFile]:
    """input_files for a URI, through pyarrow's filesystems."""
    import pyarrow.fs

    try:
        fs, root = pyarrow.fs.FileSystem.from_uri(uri)
        info = fs.get_file_info(root)
    except (pyarrow.ArrowException, OSError, ValueError) as err:
        raise ValueError(f"the input {uri} can't be read ({err})") from err
    if info.type == pyarrow.fs.FileType.NotFound:
        raise ValueError(f"the input {uri} does not exist")
    if info.type == pyarrow.fs.FileType.File:
        name = root.rstrip("/").rsplit("/", 1)[-1]
        return [InputFile(root, name, file_format(Path(name), fmt), fs)]
    base = root.rstrip("/") + "/"
    found = []
    for entry in fs.get_file_info(pyarrow.fs.FileSelector(root, recursive=True)):
        relative = entry.path[len(base):] if entry.path.startswith(base) else entry.base_name
        if entry.type == pyarrow.fs.FileType.File and not left_out(PurePosixPath(relative)):
            found.append(InputFile(entry.path, relative, file_format(Path(relative), fmt), fs))
    if not found:
        raise ValueError(f"the input directory {uri} has no files")
    return sorted(found, key=lambda f: f.name)


def parquet_columns(file: InputFile, reader: "pq.ParquetFile", text_field: str, id_field: str) -> List[str]:
    """The columns annotate reads from a Parquet file (text, then id if there is one);
    ValueError naming the file when the text column is missing or not a string, or an id
    column other than the default is missing."""
    names = reader.schema_arrow.names
    if text_field not in names:
        raise ValueError(f"{file.name}: no column {text_field!r} (columns: {names}); choose it with --text-field")
    text_type = reader.schema_arrow.field(text_field).type
    if not (pyarrow.types.is_string(text_type) or pyarrow.types.is_large_string(text_type)):
        raise ValueError(f"{file.name}: column {text_field!r} is {text_type}, not a string column")
    if id_field not in names and id_field != DEFAULT_ID_FIELD:  # named by the user: it must be there
        raise ValueError(f"{file.name}: no column {id_field!r} (columns: {names}); only the default id column, "
                         f"{DEFAULT_ID_FIELD!r}, may be missing")
    return [text_field] + ([id_field] if id_field in names else [])


def open_parquet(file: InputFile) -> "pq.ParquetFile":
    """The Parquet file, or a ValueError naming it."""
    try:
        return pq.ParquetFile(file.path if file.fs is None else file.fs.open_input_file(str(file.path)))
    except (OSError, pyarrow.ArrowInvalid) as err:
        raise ValueError(f"{file.name}: not a readable Parquet file ({err})") from err


def parse_unit(file: InputFile, line: int, raw: Any, text_field: str = "text", id_field: str = "id") -> Union[Record, BadLine, None]:
    """One input line as a record, a BadLine saying what is wrong, or None (blank).

    file (InputFile): the file it comes from.
    line (int): its 1-based line (or row) number.
    raw (Any): the line's bytes, or a Parquet row's (id, text).
    text_field (str): JSONL: the key of the text.
    id_field (str): JSONL: the key of the id; under its default name "id" it may be
        missing (then the id is "FILE:LINE"), under any other a line without it is bad.
    RETURNS: (id, text, file name, line), a BadLine, or None for a blank line.
    """
    default_id = f"{file.name}:{line}"
    if file.format == "parquet":
        doc_id, text = raw
        if text is None:
            return BadLine(file.name, line, f"{text_field!r} is null", file.unit)
        return (default_id if doc_id is None else str(doc_id), text, file.name, line)
    try:
        text = decode_line(raw, line)  # corpora.lines: the one decoder of text lines
    except ValueError as err:
        return BadLine(file.name, line, str(err))
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
    if id_field not in obj and id_field != DEFAULT_ID_FIELD:  # named by the user: it must be there
        return BadLine(file.name, line, f"no {id_field!r} field (keys: {sorted(obj)[:10]})")
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


def partition_digest(partition: Partition) -> str:
    """SHA-256 of a partition's input: each line's file name, number and raw content
    (the bytes of a text or JSONL line, the id and text of a Parquet row). Stored with the
    partition's output, so that a partition made from other input is never kept.

    partition (Partition): the partition, as read.
    """
    def parts() -> Iterator[bytes]:
        for file, line, raw in partition.units:
            yield f"{file.name}\n{line}".encode("utf8")
            yield raw if isinstance(raw, bytes) else json.dumps(list(raw), ensure_ascii=False, default=str).encode("utf8")

    return bytes_digest(parts())
