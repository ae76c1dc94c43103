"""Several stage-1 teachers trained side by side, one per seed, for a pseudo-label ensemble
(`pseudo-label --ensemble`, spacy_maral.training.ensemble).

Each teacher is one `spacy train CONFIG --output OUTPUT/teacher-sSEED --system.seed SEED`
process, run under `spacy_maral measure` (its wall time and peak memory in its
timing.json), its console output in its train.log, side by side with
spacy_maral.parallel.run_parallel. At most `jobs` run at once, and the machine's cores
are shared between them (OMP_NUM_THREADS): on a small machine several
single-threaded trainings finish sooner than the same trainings one after another with
all cores each. A teacher whose folder already holds model-best and a timing.json of the
same `spacy train` arguments is kept, so a run that was stopped and started again trains
only the missing ones; one trained with other settings is trained again.
"""
import json
import os
import shlex
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from spacy_maral.fileio import atomic_write_text
from spacy_maral.parallel import run_parallel

SUMMARY = "teachers.json"
RESERVED = ("--output", "-o", "--system.seed")  # set by train_teachers for every teacher


def teacher_dir(output_dir: Path, seed: int) -> Path:
    """The folder of the teacher of `seed` (its model-best, model-last, timing.json, train.log)."""
    return Path(output_dir) / f"teacher-s{seed}"


def check_overrides(overrides: Sequence[str]) -> None:
    """Raise ValueError when an override sets what every teacher gets from train_teachers."""
    for arg in overrides:
        name = arg.split("=", 1)[0]
        if name in RESERVED:
            raise ValueError(f"{name} is set for each teacher by train-teachers (OUTPUT_DIR/teacher-sSEED, --seeds); leave it out")


def train_teachers(
    config: Path,
    output_dir: Path,
    seeds: Sequence[int],
    overrides: Sequence[str] = (),
    jobs: int = 0,
    report: Callable[[str], None] = print,
    status_every_s: float = 60.0,
) -> Dict[str, Dict[str, object]]:
    """Train one teacher per seed, side by side; write OUTPUT_DIR/teachers.json.

    config (Path): the stage-1 training config (e.g. configs/source.cfg).
    output_dir (Path): folder for the teachers, one teacher-sSEED folder each.
    seeds (Sequence[int]): one teacher per seed (distinct; none: only the empty
        teachers.json is written, for a workflow whose ensemble is off).
    overrides (Sequence[str]): more `spacy train` arguments, the same for every teacher
        (e.g. "--paths.train", "corpus/en-train.spacy"); not --output or --system.seed.
    jobs (int): trainings at once (0 = all of them).
    report (Callable[[str], None]): where the lines about kept teachers go (run_parallel
        reports the trainings as they start and end).
    status_every_s (float): seconds between the status lines of the running trainings
        (the last line of each one's log).
    RETURNS (Dict[str, Dict[str, object]]): per seed: "model" (its model-best), "wall_s",
        "peak_rss_gb" and "kept" (already trained before this run). Raises RuntimeError
        naming each teacher that failed and its log, after the others have finished
        (run_parallel prints the end of each failed log).
    """
    config, output_dir = Path(config), Path(output_dir)
    if not config.is_file():
        raise ValueError(f"the training config {config} does not exist")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"give distinct seeds (got {list(seeds)})")
    check_overrides(overrides)
    todo = [s for s in seeds if not _finished(config, output_dir, s, overrides)]
    for seed in seeds:
        if seed not in todo:
            report(f"teacher-s{seed}: kept (trained earlier with these settings: {teacher_dir(output_dir, seed) / 'model-best'})")
        elif (teacher_dir(output_dir, seed) / "timing.json").is_file():
            report(f"teacher-s{seed}: trained earlier with other settings; training it again")
    at_once = min(jobs or len(todo), len(todo)) if todo else 1
    threads = max(1, (os.cpu_count() or 1) // at_once)
    for seed in todo:
        (teacher_dir(output_dir, seed) / "timing.json").unlink(missing_ok=True)  # written again when it succeeds
    commands = [shlex.join(teacher_command(config, output_dir, seed, overrides)) for seed in todo]
    logs = [teacher_dir(output_dir, seed) / "train.log" for seed in todo]
    failed = set(run_parallel(commands, jobs=at_once, threads=threads, logs=logs, status_every_s=status_every_s))
    bad = [seed for seed, command in zip(todo, commands) if command in failed]
    if bad:
        raise RuntimeError("; ".join(f"teacher-s{s} failed, see {teacher_dir(output_dir, s) / 'train.log'}" for s in bad))
    summary = {}
    for seed in seeds:
        folder = teacher_dir(output_dir, seed)
        timing = json.loads((folder / "timing.json").read_text(encoding="utf8"))
        summary[str(seed)] = {"model": str(folder / "model-best"), "wall_s": timing["wall_s"],
                              "peak_rss_gb": timing["peak_rss_gb"], "kept": seed not in todo}
    output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output_dir / SUMMARY, json.dumps({"config": str(config), "overrides": list(overrides),
                                                       "threads": threads, "teachers": summary}, indent=2))
    return summary


def _finished(config: Path, output_dir: Path, seed: int, overrides: Sequence[str]) -> bool:
    """Whether the teacher of `seed` was trained to the end with this config and these
    overrides (the `spacy train` arguments its timing.json recorded)."""
    folder = teacher_dir(output_dir, seed)
    if not (folder / "model-best").is_dir():
        return False
    try:
        recorded = json.loads((folder / "timing.json").read_text(encoding="utf8"))["command"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    command = teacher_command(config, output_dir, seed, overrides)
    train = command[command.index("--") + 1:]  # what measure ran: python -m spacy train ...
    return isinstance(recorded, list) and recorded[1:] == train[1:]


def teacher_command(config: Path, output_dir: Path, seed: int, overrides: Sequence[str]) -> List[str]:
    """The command line that trains the teacher of `seed` (under `spacy_maral measure`)."""
    folder = teacher_dir(output_dir, seed)
    return ["python", "-m", "spacy_maral", "measure", str(folder / "timing.json"), "--",
            "python", "-m", "spacy", "train", str(config), "--output", str(folder), "--system.seed", str(seed), *overrides]


def ensemble_models(summary_path: Path) -> List[str]:
    """The teachers (model-best paths) listed in a train_teachers summary (teachers.json).

    summary_path (Path): OUTPUT_DIR/teachers.json of train_teachers.
    RETURNS (List[str]): the models, by seed order; empty for an ensemble that is off.
    """
    summary_path = Path(summary_path)
    try:
        summary = json.loads(summary_path.read_text(encoding="utf8"))
        return [entry["model"] for entry in summary["teachers"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{summary_path} is not the teachers.json of train-teachers ({err})") from err
