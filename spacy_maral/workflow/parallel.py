"""Run independent commands side by side, each with its own log file."""
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, List, Optional, Sequence, Tuple

from spacy_maral.threads import cpu_share
from spacy_maral.util import Printer


def run_parallel(
    commands: List[str],
    jobs: int = 2,
    log_dir: Path = Path("logs"),
    append: str = "",
    threads: Optional[int] = None,
    logs: Optional[Sequence[Path]] = None,
    status_every_s: float = 0.0,
) -> List[str]:
    """Run `commands` (shell-like strings, split with shlex; no shell), at most `jobs` at
    once.

    commands (List[str]): the commands.
    jobs (int): how many run at once.
    log_dir (Path): each command's stdout and stderr go to log_dir/<index>-<word>.log.
    append (str): arguments added to the end of every command (split with shlex), e.g.
        the overrides several trainings share, written once.
    threads (Optional[int]): OMP_NUM_THREADS and MKL_NUM_THREADS of every command; None:
        cpu_share(jobs) when jobs > 1, else the environment's.
    logs (Optional[Sequence[Path]]): the log file of each command instead (log_dir unused).
    status_every_s (float): every so many seconds, print the last line of each running
        command's log (0: only when one starts and ends).
    RETURNS (List[str]): the commands that failed (empty when all succeeded).
    """
    msg = Printer()
    if logs is not None and len(logs) != len(commands):
        raise ValueError(f"{len(logs)} log files for {len(commands)} commands")
    log_dir = Path(log_dir)
    if logs is None:
        log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if threads is None and jobs > 1:
        threads = cpu_share(jobs)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if append:
        commands = [f"{command} {append}" for command in commands]
    pending = list(enumerate(commands))
    running: List[Tuple[int, str, subprocess.Popen, Path, float, IO[str]]] = []
    failed: List[str] = []
    last_status = time.time()
    while pending or running:
        while pending and len(running) < jobs:
            i, command = pending.pop(0)
            argv = shlex.split(command)
            if argv and argv[0] == "python":
                argv[0] = sys.executable
            log = Path(logs[i]) if logs is not None else log_dir / f"{i:02d}-{_label(argv)}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            handle = log.open("w", encoding="utf8")
            msg.info(f"[{i}] started: {command}  (log: {log})")
            try:
                proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env)
            except OSError:
                handle.close()
                raise
            running.append((i, command, proc, log, time.time(), handle))
        time.sleep(1.0)
        if status_every_s and running and time.time() - last_status >= status_every_s:
            last_status = time.time()
            for i, _, _, log, started, _ in running:
                msg.text(f"[{i}] {(time.time() - started) / 60:.1f} min: {_last_line(log)}")
        for item in list(running):
            i, command, proc, log, started, handle = item
            if proc.poll() is None:
                continue
            running.remove(item)
            handle.close()
            minutes = (time.time() - started) / 60
            if proc.returncode == 0:
                msg.good(f"[{i}] finished in {minutes:.1f} min: {command}")
            else:
                failed.append(command)
                tail = "\n".join(log.read_text(encoding="utf8", errors="replace").splitlines()[-25:])
                msg.fail(f"[{i}] failed (exit {proc.returncode}) after {minutes:.1f} min: {command}")
                msg.text(tail, err=True)
    return failed


def _label(argv: List[str]) -> str:
    """A short file-name label for a command: its --output value, else its first words."""
    if "--output" in argv[:-1]:
        value = argv[argv.index("--output") + 1]
    else:
        value = "-".join(Path(a).name for a in argv[1:4])
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in value.replace("/", "_"))[:60]


def _last_line(log: Path, limit: int = 160) -> str:
    """The last non-empty line of a log (a training's latest table row)."""
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:limit] if lines else "(no output yet)"
