"""Atomic file and folder writes: the one way spacy-maral writes what it keeps.

Everything is written to a temporary name in the destination's folder and renamed into
place, so a process killed at any moment leaves either the old file or the new one,
never a half-written one. Files and folders get the modes a plain `open()` or `mkdir()`
would give them under the process's umask (one permission rule for every writer).
"""
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Dict, Iterable, Iterator, Optional, Set

import numpy


def current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode of a new file: 0o666 under the umask, as open() gives."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode of a new folder: 0o777 under the umask, as mkdir() gives."""
    return 0o777 & ~current_umask()


@contextmanager
def atomic_open(path: Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to `path`; on success it replaces `path`.

    path (Path): the final file; its folder is created if needed.
    mode (str): "wb" or "w" (text, UTF-8).
    A failure inside the block leaves `path` as it was and no temporary file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write bytes to `path`, atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    """Write text to `path` (UTF-8), atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_savez(path: Path, arrays: Dict[str, numpy.ndarray]) -> None:
    """numpy.savez to `path`, atomically."""
    with atomic_open(path, "wb") as f:
        numpy.savez(f, **arrays)


def old_dir(path: Path) -> Path:
    """Where replace_dir keeps the previous folder during its swap: `.NAME.old`."""
    path = Path(path)
    return path.with_name("." + path.name + ".old")


def recover_dir(path: Path) -> None:
    """Put back the folder a process killed between replace_dir's two renames left only
    as `.NAME.old`."""
    old = old_dir(path)
    if old.is_dir() and not Path(path).exists():
        os.replace(old, path)


def _apply_modes(directory: Path) -> None:
    """Give a folder made by mkdtemp (mode 0700) and everything in it the usual modes."""
    directory.chmod(dir_mode())
    for root, dirs, _ in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(root, name), dir_mode())


@contextmanager
def replace_dir(path: Path, command: str = "spacy_maral") -> Iterator[Path]:
    """Yield a fresh temporary folder next to `path`; on success it replaces `path`, with
    the files of `path` that the command did not write carried over (keep_other_files).

    path (Path): the folder to replace.
    command (str): what writes it (recorded in its OWNER_MARKER with the files written).
    A failure inside the block leaves the old `path` untouched (and removes the
    temporary folder `.NAME.tmp-XXXX`; those a killed call left are removed first). The
    swap is two renames; `path` is missing only between them, and
    a process killed there leaves the old folder as `.NAME.old`: the next call (or
    recover_dir) puts it back first. The new folder gets the modes mkdir() would give.
    RAISES (ValueError): `path` is a file, or a file of `path` the command did not write
        has the name of one it writes now (keep_other_files); `path` is left as it was.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{command}: {path} is a file, not a folder; nothing was written (choose a folder)")
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(path)
    old = old_dir(path)
    for stale in path.parent.glob("." + path.name + ".tmp-*"):  # left by a killed call
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix="." + path.name + ".tmp-", dir=str(path.parent)))
    try:
        yield tmp
        written = sorted(files_under(tmp) - {OWNER_MARKER})
        if path.is_dir():
            keep_other_files(path, tmp, written_files(path))
        atomic_write_text(tmp / OWNER_MARKER, json.dumps({"written_by": command, "files": written}, indent=1) + "\n")
        _apply_modes(tmp)
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


OWNER_MARKER = ".spacy_maral_output"  # in a folder replace_dir wrote: the command and the files it wrote
# the owner of a folder calibrated in place by versions that did not keep its owner (the
# workflow's soup, teacher and fallback folders too): any command may replace it, as then
LEGACY_OWNER = "calibrate"
IN_PLACE_OWNER = "calibrate (in place)"  # a folder no command wrote (spacy train's), calibrated in place


class OutputError(ValueError):
    """A file a command is to write can't be written there; the message names it."""


def check_output_file(path: Optional[Path], option: str = "") -> None:
    """Refuse, before any work, a file a command is to write that it can't: `path` is a
    folder, a file (or a link to nothing) stands where one of its folders would go, or the
    nearest existing folder on its way is not writable (the file itself is replaced, never
    written into: fileio's atomic writes). Nothing is created.

    path (Optional[Path]): the file (None: none asked for).
    option (str): how the command names it (e.g. "--report"), for the message; "" for none.
    RAISES (OutputError): naming the option and the path.
    """
    if path is None:
        return
    path = Path(path)
    name = f"{option} {path}" if option else str(path)
    if path.is_dir():
        raise OutputError(f"{name} is a folder: give the path of a file")
    _check_the_way(name, path.parents)


def check_output_dir(path: Path, option: str = "") -> None:
    """Refuse, before any work, a folder a command is to write into that it can't: a file
    (or a link to nothing) stands there or where one of its folders would go, or it (or
    the nearest existing folder on its way) is not writable. Nothing is created.

    path (Path): the folder.
    option (str): how the command names it (e.g. "OUTPUT_DIR"), for the message; "" for none.
    RAISES (OutputError): naming the option and the path.
    """
    path = Path(path)
    _check_the_way(f"{option} {path}" if option else str(path), [path, *path.parents], asked=path)


def _check_the_way(name: str, folders: Iterable[Path], asked: Optional[Path] = None) -> None:
    """Raise an OutputError naming `name` unless the first of `folders` (from the deepest
    up) that exists is a folder this process may write in; a link to nothing, or a file,
    before it is refused. `asked`: the folder the command was given, if it is the first."""
    for folder in folders:
        what = name if folder == asked else f"{name}: {folder}"  # the folder asked for itself, or one on its way
        try:
            link, exists = folder.is_symlink(), folder.exists()
        except OSError as err:  # a folder above it that this process may not search
            raise OutputError(f"{what} can't be looked at ({err.strerror or err})") from err
        if link and not exists:
            raise OutputError(f"{what} is a link to nothing ({os.readlink(folder)}), not a folder")
        if exists:
            if not folder.is_dir():
                raise OutputError(f"{what} is a file, not a folder")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise OutputError(f"{name}: not writable (permissions of {folder})")
            return


def _marker(folder: Path) -> Dict[str, object]:
    """The record of `folder`'s OWNER_MARKER ({} where it has none, or one that can't be read)."""
    try:
        record = json.loads((Path(folder) / OWNER_MARKER).read_text(encoding="utf8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def folder_owner(folder: Path) -> Optional[str]:
    """The command whose output `folder` is (its OWNER_MARKER's written_by), or None
    where it has no marker that says so."""
    owner = _marker(folder).get("written_by")
    return owner if isinstance(owner, str) else None


def in_place_owner(folder: Path) -> str:
    """The owner to record when `folder` is rewritten in place (calibrate without
    --output): the command whose output it is stays its owner (average's, guard's), so
    that a rerun of that command replaces it; a folder no command wrote (spacy train's),
    or one a version that kept no owner calibrated in place, becomes IN_PLACE_OWNER's.

    folder (Path): the folder rewritten in place.
    """
    owner = folder_owner(folder)
    return IN_PLACE_OWNER if owner in (None, LEGACY_OWNER) else owner


def check_replaceable(path: Path, command: str) -> None:
    """Raise unless `path` may be replaced by `command`'s output: it does not exist, is an
    empty folder, or holds the OWNER_MARKER of an earlier output of the same command. A
    user's folder, or another command's output (a pipeline calibrated in place, a
    training's snapshot), is never written into.

    path (Path): the folder given as an output.
    command (str): the command, for the message (e.g. "export").
    RAISES (ValueError): `path` is a file, or a non-empty folder without the marker or
        with another command's.
    """
    path = Path(path)
    recover_dir(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise ValueError(f"{command}: {path} is a file, not a folder; nothing was written (choose a folder)")
    if not any(path.iterdir()):
        return
    if (path / OWNER_MARKER).is_file():
        owner = folder_owner(path)
        if owner in (command, LEGACY_OWNER):
            return
        what = ("a folder spacy_maral wrote itself (a checkpoint, a snapshot, an encoder)" if owner == "spacy_maral"
                else f"what `{owner or 'an unknown command'}` wrote")
        raise ValueError(
            f"{command}: {path} holds {what}, not an output of {command}; "
            "nothing was done: choose a new or empty folder (or remove that one yourself)"
        )
    raise ValueError(
        f"{command}: {path} is not empty and was not written by spacy_maral (no {OWNER_MARKER} in it); "
        f"nothing was done: choose a new or empty folder"
    )


@contextmanager
def replace_owned_dir(path: Path, command: str) -> Iterator[Path]:
    """replace_dir for a folder a user names: refused unless check_replaceable allows it.

    path (Path): the output folder.
    command (str): the command writing it (recorded in the marker, named in errors).
    """
    check_replaceable(path, command)
    with replace_dir(path, command) as tmp:
        yield tmp


# the random part of a temporary file's name (tempfile.mkstemp: 8 of these characters)
_TMP_RANDOM = "[a-z0-9_]" * 8


def remove_stale_temporaries(directory: Path, pattern: str = "*") -> int:
    """Delete the temporary files that atomic_open left in `directory` when its process
    was killed mid-write (".NAME.XXXXXXXX.tmp", 8 random characters, for a NAME matching
    `pattern`); a user's file of another name (".notes.v2.tmp") is kept.

    Call it at the start of a run that owns `directory` (no other process writing there).
    directory (Path): the folder.
    pattern (str): glob of the final file names whose temporaries to remove.
    RETURNS (int): how many were removed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    removed = 0
    for tmp in directory.glob(f".{pattern}.{_TMP_RANDOM}.tmp"):
        if tmp.is_file():
            tmp.unlink()
            removed += 1
    return removed


def files_under(folder: Path) -> Set[str]:
    """The files (and links) in `folder` and its subfolders, as posix paths relative to it."""
    folder = Path(folder)
    found = set()
    for root, dirs, files in os.walk(folder):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]  # not followed: kept as links
        for name in [*files, *links]:
            found.add(Path(root, name).relative_to(folder).as_posix())
    return found


def written_files(folder: Path) -> Optional[Set[str]]:
    """The files replace_dir wrote into `folder` last time (its OWNER_MARKER's list), or
    None when that is not known (no marker, or one written before the list was kept)."""
    files = _marker(folder).get("files")
    return set(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else None


def keep_other_files(old: Path, new: Path, written: Optional[Set[str]] = None) -> None:
    """Copy into `new` every file of `old` (at any depth) that the command did not write:
    a user's notes, metrics or README stay when a command replaces its output folder.

    old (Path): the folder being replaced.
    new (Path): the temporary folder the new contents were written to (replace_dir).
    written (Optional[Set[str]]): the files the command wrote into `old` (written_files);
        they are dropped. None (not known): every file of `old` that `new` lacks is kept.
    RAISES (ValueError): with `written` known, a file of `old` the command did not write
        has the name of one in `new` (it would be overwritten); nothing is changed.
    """
    old, new = Path(old), Path(new)
    others = sorted(files_under(old) - (written or set()) - {OWNER_MARKER})
    if written is not None:
        clashes = [name for name in others if (new / name).exists() or (new / name).is_symlink()]
        if clashes:
            raise ValueError(
                f"{old / clashes[0]} was not written by spacy_maral, and the new output has a file of that name"
                f"{f' (and {len(clashes) - 1} more)' if len(clashes) > 1 else ''}: nothing was replaced; "
                "move it out of the folder and run again"
            )
    for name in others:
        source, target = old / name, new / name
        if target.exists() or target.is_symlink():
            continue  # not known what the command wrote: the new output's file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    for root, dirs, files in os.walk(old):  # and a user's empty folders
        if not dirs and not files and root != str(old):
            (new / Path(root).relative_to(old)).mkdir(parents=True, exist_ok=True)
