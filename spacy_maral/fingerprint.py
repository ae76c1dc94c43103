"""Fingerprints of files and folders: what a resumable step records of its inputs, so
that a later run keeps an earlier output only where its inputs are unchanged. The one
module for it: `annotate` and `pseudo-label` (their manifests), `train-teachers` and
`train-students` (each run's inputs) and `languages` (each language's) use it.

Two kinds: `path_digest(..., content=False)` reads only each file's size and
modification time (cheap: a model folder changed in place is another model), and
`content=True` reads the bytes (the same bytes rewritten are the same input).
"""
import hashlib
from pathlib import Path
from typing import Collection, Dict, Iterable, List, Union

ABSENT = "absent"  # path_digest of a path that does not exist


def _files(path: Path, skip: Collection[str] = ()) -> List[Path]:
    """A folder's files (sorted by their path within it; those named in `skip` left
    out), or the file itself."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name not in skip)


def path_digest(path: Union[str, Path], *, content: bool = False, skip: Collection[str] = ()) -> str:
    """SHA-256 of a file, or of a folder's files: each file's path within the folder (a
    file's own name) with its size and modification time, or with its bytes.

    path (Union[str, Path]): the file or folder.
    content (bool): digest the bytes (True) or only sizes and modification times (False).
    skip (Collection[str]): names of a folder's files to leave out, at any depth (the
        records of how a run went, rewritten by a run that changed nothing else).
    RETURNS (str): the hex digest; ABSENT where `path` does not exist.
    """
    path = Path(path)
    if not path.exists():
        return ABSENT
    digest = hashlib.sha256()
    for file in _files(path, skip):
        name = (file.relative_to(path).as_posix() if path.is_dir() else file.name).encode("utf8")
        stat = file.stat()
        if not content:
            digest.update(name + b"\0" + f"{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf8"))
            continue
        digest.update(len(name).to_bytes(8, "little") + name + stat.st_size.to_bytes(8, "little"))
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def file_stats(files: Iterable[Path]) -> List[Dict[str, object]]:
    """Name, size and modification time of each file (what a run records of its input
    files, which a resumed run must find unchanged).

    files (Iterable[Path]): the files, in their order.
    """
    records: List[Dict[str, object]] = []
    for file in files:
        stat = Path(file).stat()
        records.append({"name": Path(file).name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return records


def bytes_digest(parts: Iterable[bytes]) -> str:
    """SHA-256 of byte strings, each one length-prefixed (no two different sequences
    give the same digest): a partition's lines, or a shard's payload.

    parts (Iterable[bytes]): the byte strings.
    """
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()
