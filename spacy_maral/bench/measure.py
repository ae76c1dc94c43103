"""Run a command and record its wall time and peak resident memory."""
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

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


def machine_description() -> Dict[str, object]:
    """CPU, cores, memory and library versions of this machine."""
    import os

    import spacy
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "gpu": torch.cuda.is_available(),
        "python": platform.python_version(), "torch": torch.__version__, "spacy": spacy.__version__,
        "transformers": transformers.__version__, "threads": torch.get_num_threads(),
    }
