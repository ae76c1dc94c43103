"""Run independent commands side by side, each with its own log file."""
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

from wasabi import msg


def run_parallel(commands: List[str], jobs: int = 2, log_dir: Path = Path("logs"), append: str = "") -> List[str]:
    """Run `commands` (shell-like strings, split with shlex; no shell), at most `jobs` at
    once. With jobs > 1 each gets OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1.

    commands (List[str]): the commands.
    jobs (int): how many run at once.
    log_dir (Path): each command's stdout and stderr go to log_dir/<index>-<word>.log.
    append (str): arguments added to the end of every command (split with shlex), e.g.
        the overrides several trainings share, written once.
    RETURNS (List[str]): the commands that failed (empty when all succeeded).
    """
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if jobs > 1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if append:
        commands = [f"{command} {append}" for command in commands]
    pending = list(enumerate(commands))
    running: List[Tuple[int, str, subprocess.Popen, Path, float]] = []
    failed: List[str] = []
    while pending or running:
        while pending and len(running) < jobs:
            i, command = pending.pop(0)
            argv = shlex.split(command)
            if argv and argv[0] == "python":
                argv[0] = sys.executable
            log = log_dir / f"{i:02d}-{_label(argv)}.log"
            handle = log.open("w", encoding="utf8")
            msg.info(f"[{i}] started: {command}  (log: {log})")
            running.append((i, command, subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env), log, time.time()))
        time.sleep(1.0)
        for item in list(running):
            i, command, proc, log, started = item
            if proc.poll() is None:
                continue
            running.remove(item)
            minutes = (time.time() - started) / 60
            if proc.returncode == 0:
                msg.good(f"[{i}] finished in {minutes:.1f} min: {command}")
            else:
                failed.append(command)
                tail = "\n".join(log.read_text(encoding="utf8", errors="replace").splitlines()[-25:])
                msg.fail(f"[{i}] failed (exit {proc.returncode}) after {minutes:.1f} min: {command}\n{tail}")
    return failed


def _label(argv: List[str]) -> str:
    """A short file-name label for a command: its --output value, else its first words."""
    if "--output" in argv[:-1]:
        value = argv[argv.index("--output") + 1]
    else:
        value = "-".join(Path(a).name for a in argv[1:4])
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in value.replace("/", "_"))[:60]
