"""A command run and measured: its wall time and peak resident memory, written as a
JSON record (a training run's timing.json) by `run_measured` (the command line
`python -m spacy_maral.bench measure OUTPUT -- COMMAND`) and read back by
`read_measurement` (train-teachers/train-students, which keep a run whose record names
the same command, and the benchmark report)."""
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from spacy_maral.fileio import atomic_write_text


def run_measured(cmd: List[str], output: Path) -> Dict[str, object]:
    """Run `cmd` (a leading "python" means this interpreter), then write to `output` the
    command, its wall time and its peak resident memory (VmHWM, sampled every 0.2 s).

    cmd (List[str]): the command line.
    output (Path): JSON file to write (atomically) when the command succeeded.
    RETURNS (dict): what was written. Raises subprocess.CalledProcessError on failure
        (nothing is written then).
    """
    if cmd and cmd[0] == "python":
        cmd = [sys.executable] + cmd[1:]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    peak_kb = 0
    while proc.poll() is None:
        peak_kb = max(peak_kb, _high_water_mark_kb(proc.pid))
        time.sleep(0.2)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    if peak_kb == 0:  # no /proc: the largest child's peak (includes the parent's pages at fork)
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = {"command": cmd, "wall_s": round(wall, 1), "peak_rss_gb": round(peak_kb / 1024**2, 2)}
    atomic_write_text(Path(output), json.dumps(result, indent=2))
    return result


def read_measurement(path: Path) -> Optional[Dict[str, object]]:
    """What run_measured wrote to `path` (a run's timing.json): its "command" (a list),
    "wall_s" and "peak_rss_gb"; None when there is no such file.

    path (Path): the JSON file.
    RETURNS (Optional[Dict[str, object]]): the record, or None.
    RAISES (ValueError): naming the file, when it exists but is not such a record.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf8"))
        if not isinstance(record.get("command"), list):
            raise ValueError("no command line")
        for key in ("wall_s", "peak_rss_gb"):
            if not isinstance(record.get(key), (int, float)) or isinstance(record.get(key), bool):
                raise ValueError(f"no number {key}")
    except (OSError, ValueError, AttributeError) as err:
        raise ValueError(f"{path} is not the record of `spacy_maral.bench measure` ({err})") from err
    return record


def _high_water_mark_kb(pid: int) -> int:
    """Peak resident memory so far (VmHWM, kB) of process `pid`; 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
