"""One owner per output folder: an exclusive lock on OUTPUT/_lock, held for a whole run.

`annotate` and `pseudo-label` write into a folder partition by partition and resume
what they find there; two runs writing into the same folder at once would mix their
outputs. `folder_lock` takes an exclusive `flock` on OUTPUT/_lock (without waiting) and
writes the holder's pid into it; a second run fails at once, naming the folder and the
holder. The kernel releases the lock when its process ends, killed or not, so the run
started after a killed one takes the folder over (and resumes it) safely. The lock file
stays (removing it would let a third run lock a fresh file while a second still holds
the old one).
"""
import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

LOCK_FILE = "_lock"  # "_": readers of the folder (pyarrow, the stage-2 reader) leave it out


class FolderInUseError(ValueError):
    """Another process holds the folder's lock."""


def _holder(handle: IO) -> str:
    """The pid written by the lock's holder ("unknown" when it wrote none yet)."""
    try:
        handle.seek(0)
        text = handle.read().strip()
    except OSError:
        text = ""
    return text or "unknown"


@contextmanager
def folder_lock(directory: Path, run: str) -> Iterator[Path]:
    """Hold the exclusive lock of `directory` (created if needed) for the block.

    directory (Path): the output folder of a run.
    run (str): the command's name, for the error message (e.g. "annotate").
    YIELDS (Path): the lock file, OUTPUT/_lock (it holds the owner's pid).
    RAISES (FolderInUseError): another process holds the lock (its pid is in the message).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    handle = open(path, "a+", encoding="utf8")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderInUseError(
                f"{directory} is in use by another run (pid {_holder(handle)}, lock {path}): "
                f"two {run} runs can't write into one output folder; wait for it to end, or use another folder"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield path
    finally:
        handle.close()  # releases the lock (the kernel does it too if this process is killed)
