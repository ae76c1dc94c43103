"""Atomic file writes: a temporary file in the target folder, fsync, then os.replace.

A process killed at any moment leaves either the old file or the new one, never a
half-written file.
"""
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Dict, Iterator

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
    temporary directory). The swap is two renames; `path` is missing only between them,
    and a process killed there leaves the old directory as `.NAME.old`: the next call
    for `path` puts it back first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.with_name("." + path.name + ".old")
    if old.is_dir() and not path.exists():  # killed between the two renames
        os.replace(old, path)
    tmp = Path(tempfile.mkdtemp(prefix="." + path.name + ".", dir=str(path.parent)))
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


MANIFEST = "_manifest.json"


def model_id(model: Any) -> str:
    """A model's identity for a manifest: the resolved path of a directory, else the name
    (an installed package)."""
    path = Path(str(model))
    return str(path.resolve()) if path.exists() else str(model)


def check_manifest(
    output_dir: Path, manifest: Dict[str, Any], run: str, outputs: str,
    remedy: str = "use a new output directory, or delete it",
) -> None:
    """Write OUTPUT/_manifest.json, or check that the one there describes this run, so that
    a resumed run never mixes its outputs with those of another (other input, model or
    settings).

    output_dir (Path): the output directory of a resumable run.
    manifest (Dict[str, Any]): what the outputs are made from (JSON-serializable): the
        input files (name, size, mtime), the model, the settings that change them.
    run (str): the command's name, for the error message (e.g. "annotate").
    outputs (str): glob of the output files a resumed run keeps (e.g. "part-*.parquet").
    remedy (str): what the error tells the user to do.
    RAISES (ValueError): the directory holds outputs of another run, or outputs without
        a manifest. A directory without outputs takes the new manifest.
    """
    output_dir = Path(output_dir)
    path = output_dir / MANIFEST
    has_outputs = any(output_dir.glob(outputs))
    if path.exists() and has_outputs:
        try:
            old = json.loads(path.read_text(encoding="utf8"))
        except ValueError:
            old = None
        if old == manifest:
            return
        diffs = sorted(k for k in set(manifest) | set(old or {}) if (old or {}).get(k) != manifest.get(k))
        raise ValueError(
            f"{output_dir} holds the output of another {run} run (different: {', '.join(diffs) or 'unreadable manifest'}); "
            f"its files can't be resumed with these settings: {remedy}"
        )
    if has_outputs:
        raise ValueError(
            f"{output_dir} has {outputs} files but no {MANIFEST} (they were not written by this {run} "
            f"version, or by another command): {remedy}"
        )
    atomic_write_text(path, json.dumps(manifest, indent=2))
