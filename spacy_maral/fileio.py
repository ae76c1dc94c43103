"""Atomic file writes: a temporary file in the target folder, fsync, then os.replace.

A process killed at any moment leaves either the old file or the new one, never a
half-written file.
"""
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Dict, Iterator

import numpy


@contextmanager
def atomic_open(path: Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to `path`; on success it replaces `path`.

    path (Path): the final file.
    mode (str): "wb" or "w" (text, UTF-8).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_savez(path: Path, arrays: Dict[str, numpy.ndarray]) -> None:
    """numpy.savez to `path`, atomically."""
    with atomic_open(path, "wb") as f:
        numpy.savez(f, **arrays)


def atomic_write_text(path: Path, text: str) -> None:
    """Write text to `path` (UTF-8), atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


@contextmanager
def replace_dir(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory next to `path`; on success it replaces `path`.

    A failure inside the block leaves the old `path` untouched (and removes the
    temporary directory). The swap is two renames; `path` is missing only between them.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="." + path.name + ".", dir=str(path.parent)))
    old = path.with_name("." + path.name + ".old")
    try:
        yield tmp
        if old.exists():
            shutil.rmtree(old)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def remove_stale_temporaries(directory: Path, pattern: str = "*") -> int:
    """Delete the temporary files that atomic_open left in `directory` when its process
    was killed mid-write (".NAME.XXXXXX.tmp" for a NAME matching `pattern`).

    Call it at the start of a run that owns `directory` (no other process writing there).
    directory (Path): the folder.
    pattern (str): glob of the final file names whose temporaries to remove.
    RETURNS (int): how many were removed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    removed = 0
    for tmp in directory.glob(f".{pattern}.*.tmp"):
        if tmp.is_file():
            tmp.unlink()
            removed += 1
    return removed
