"""A run's weight snapshots on disk: the epoch hook's SNAPSHOT_DIR/step-NNNNNN folders,
named, parsed and listed in step order without importing spaCy, so that commands that
read them (average, select-checkpoint) check their input at once."""
from pathlib import Path
from typing import List, Optional

SNAPSHOT_PREFIX = "step-"  # a snapshot folder's name: step-NNNNNN (snapshot_path)


def snapshot_path(snapshot_dir: Path, step: int) -> Path:
    """Where the snapshot of `step` goes: SNAPSHOT_DIR/step-NNNNNN (sorts by step)."""
    return Path(snapshot_dir) / f"{SNAPSHOT_PREFIX}{step:06d}"


def snapshot_step(path: Path) -> Optional[int]:
    """The step of a snapshot folder (snapshot_path's step-NNNNNN), None for any other name."""
    digits = Path(path).name[len(SNAPSHOT_PREFIX):]
    return int(digits) if Path(path).name.startswith(SNAPSHOT_PREFIX) and digits.isascii() and digits.isdigit() else None


def snapshots_from(snapshot_dir: Path, from_step: int = 0) -> List[Path]:
    """The snapshots (SNAPSHOT_DIR/step-NNNNNN, written by the epoch hook) of step
    `from_step` and later, in step order; none for a missing folder.

    snapshot_dir (Path): the epoch hook's snapshot_dir.
    from_step (int): the first step to include.
    RAISES (ValueError): `snapshot_dir` is a file.
    """
    snapshot_dir = Path(snapshot_dir)
    if snapshot_dir.is_file():
        raise ValueError(f"--snapshots {snapshot_dir} is a file, not the epoch hook's snapshot folder")
    if not snapshot_dir.is_dir():
        return []
    found = []
    for path in snapshot_dir.iterdir():
        step = snapshot_step(path)
        if path.is_dir() and step is not None and step >= from_step:
            found.append((step, path))
    return [path for _, path in sorted(found)]
