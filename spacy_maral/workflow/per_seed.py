"""Several trainings of one config side by side, one per seed: the stage-1 teachers of a
pseudo-label ensemble (`pseudo-label --ensemble`, spacy_maral.inference.ensemble) and the
stage-2 students of a model soup (`average`, spacy_maral.training.averaging).

Each run is one `spacy train CONFIG --output OUTPUT/ROLE-sSEED --system.seed SEED`
process (a student also writes its stage-2 log, diagnostics, checkpoint and snapshots
there), run under `spacy_maral.bench measure` (its wall time and peak memory in its timing.json), its
console output in its train.log, side by side with spacy_maral.workflow.parallel.run_parallel.
At most `jobs` run at once, and the machine's cores are shared between them
(OMP_NUM_THREADS): on a small machine several single-threaded trainings finish sooner
than the same trainings one after another with all cores each. A run whose folder already holds its model, a timing.json of the
same `spacy train` arguments and an inputs.json of the same inputs (the bytes of the
config and of every file or folder an argument names) is kept, so a job that was
stopped and started again trains only the missing ones; one trained with other settings
or from inputs that changed since is trained again. A run trained again starts afresh: a
student's checkpoint, snapshots and training log of an earlier training are removed
first (the checkpoint would be loaded at its first step, and old snapshots would be
candidates of `select-checkpoint`; the training log is replaced by the configs' logger,
spacy_maral.training.logger), except where the run was stopped before it finished and is started
again with the same command line and inputs (its started.json and inputs.json): that
one resumes from its checkpoint.
"""
import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from spacy_maral.fileio import atomic_write_text, old_dir
from spacy_maral.fingerprint import path_digest
from spacy_maral.threads import cpu_share
from spacy_maral.training.callbacks import find_checkpoint
from spacy_maral.training.run_summary import ROLES, check_role, runs_key, summary_name
from spacy_maral.training.selection import SNAPSHOTS
from spacy_maral.workflow.measured import read_measurement
from spacy_maral.workflow.overrides import override_value
from spacy_maral.workflow.parallel import run_parallel

RESERVED = ("--output", "-o", "--system.seed")  # set by train_per_seed for every run
# the files a run writes besides its models, by role: a student's stage-2 log, diagnostics,
# checkpoint and snapshots are set by train_per_seed to files in its own run folder; a teacher
# (configs/source.cfg) writes none of them, so they are refused for teachers
RUN_FILES: Dict[str, Dict[str, str]] = {
    "teacher": {},
    "student": {"--paths.log": "log.jsonl", "--paths.diagnostics": "diagnostics.jsonl", "--paths.checkpoint": "checkpoint",
                "--paths.snapshots": SNAPSHOTS},
}
SHARED_FILES = tuple(RUN_FILES["student"])  # set for no teacher: one file for every teacher, refused
TIMING = "timing.json"  # in a run's folder: its command, wall time and peak memory (bench measure)
INPUTS = "inputs.json"  # in a run's folder: the digests of what it was trained from (run_inputs)
STARTED = "started.json"  # in a run's folder: the command line its latest training was started with
# what a run's training leaves to the next one of the same run folder (the epoch hook's
# checkpoint, loaded at the first step, and snapshots), by role: removed before a training
# that does not resume (see the module's doc)
RUN_STATE: Dict[str, Sequence[str]] = {"teacher": (), "student": tuple(
    RUN_FILES["student"][name] for name in ("--paths.checkpoint", "--paths.snapshots"))}
# files of an input folder that record how a run went, not what it made (a rerun that keeps
# everything rewrites them): the pseudo-labels' lock and summary, the encoder's build record
RUN_RECORDS = ("_lock", "summary.json", "build_info.json")
# the corpora `spacy train` loads: the settings of [training] that name them, and spaCy's defaults
READ_CORPORA = (("train_corpus", "corpora.train"), ("dev_corpus", "corpora.dev"))
PATH_VARIABLE = re.compile(r"\$\{paths\.(\w+)\}")  # a corpus setting that is one [paths] variable


def run_dir(output_dir: Path, seed: int, role: str = "teacher") -> Path:
    """The folder of the run of `seed` (its models, timing.json, train.log)."""
    return Path(output_dir) / f"{check_role(role)}-s{seed}"


def check_overrides(overrides: Sequence[str], role: str = "teacher") -> None:
    """Raise ValueError when an override sets what every run gets from train_per_seed."""
    for arg in overrides:
        name = arg.split("=", 1)[0]
        if name in RESERVED:
            raise ValueError(f"{name} is set for each {role} by train-{role}s (OUTPUT_DIR/{role}-sSEED, --seeds); leave it out")
        if name in RUN_FILES[role]:
            own = f"OUTPUT_DIR/{role}-sSEED/{RUN_FILES[role][name]}"
            raise ValueError(f"{name} is set for each {role} by train-{role}s ({own}); leave it out")
        if name in SHARED_FILES:
            raise ValueError(f"{name} would be one file for every {role}, written by all of them at once; leave it out")


def check_corpus_paths(config: Path, overrides: Sequence[str]) -> None:
    """Raise ValueError where a corpus the runs read is not given or does not exist:
    each setting of the corpora that training loads (READ_CORPORA) that is a `${paths.NAME}`, with
    the value of its override (`--paths.NAME`, or `--corpora.X.KEY` for the setting)
    or else the config's. Checked before any training starts: each one would fail in
    spaCy's own check after its imports, one traceback per run.

    config (Path): the training config.
    overrides (Sequence[str]): the `spacy train` arguments shared by the runs.
    """
    from confection import Config

    if os.environ.get("SPACY_CONFIG_OVERRIDES"):  # overrides this check does not read: spaCy's own check
        return
    try:
        raw_config = Config().from_disk(config, interpolate=False)
    except Exception:  # noqa: BLE001 (confection's errors share no base): spaCy reports a config it can't read in full
        return
    sections, paths, training = raw_config.get("corpora") or {}, raw_config.get("paths") or {}, raw_config.get("training") or {}
    read = {str(override_value(overrides, f"training.{key}") or training.get(key, default)).strip('"').split(".", 1)[-1]
            for key, default in READ_CORPORA}
    for corpus, settings in sections.items():
        if corpus not in read:  # a corpus that spacy train does not load
            continue
        for key, raw in (settings.items() if isinstance(settings, dict) else ()):
            found = PATH_VARIABLE.fullmatch(raw) if isinstance(raw, str) else None
            if found is None:  # a literal, or a path built from several variables: spaCy's own check
                continue
            name = found.group(1)
            flag = f"--corpora.{corpus}.{key}"
            value = override_value(overrides, flag[2:])
            if value is None:
                flag, value = f"--paths.{name}", override_value(overrides, f"paths.{name}")
            if value is None:
                flag, value = f"the config's paths.{name}", paths.get(name)
            if isinstance(value, str) and value.startswith('"') and value.endswith('"') and len(value) > 1:
                value = value[1:-1]  # a JSON string, as spaCy reads an override
            if value in (None, "", "null", "None"):
                raise ValueError(f"{flag if flag.startswith('--corpora') else f'no --paths.{name}'}: the config {config} "
                                 f"reads it as corpora.{corpus}.{key} and sets none; give it: --paths.{name} PATH")
            if "${" in str(value):  # a variable of another variable: spaCy's own check
                continue
            if not Path(str(value)).exists():
                raise ValueError(f"{flag} {value} does not exist (read as the config's corpora.{corpus}.{key})")


def train_per_seed(
    config: Path,
    output_dir: Path,
    seeds: Sequence[int],
    overrides: Sequence[str] = (),
    role: str = "teacher",
    jobs: int = 0,
    report: Callable[[str], None] = print,
    status_every_s: float = 60.0,
) -> Dict[str, Dict[str, object]]:
    """Train one run of `config` per seed, side by side; write OUTPUT_DIR/ROLEs.json.

    config (Path): the training config (configs/source.cfg for teachers, configs/adapt.cfg
        for students).
    output_dir (Path): folder for the runs, one ROLE-sSEED folder each.
    seeds (Sequence[int]): one run per seed (distinct; none: only the empty summary is
        written, for a workflow whose ensemble or soup is off).
    overrides (Sequence[str]): more `spacy train` arguments, the same for every run
        (e.g. "--paths.train", "corpus/en-train.spacy"); not --output or --system.seed.
        Not a file each run writes (--paths.log, --paths.diagnostics,
        --paths.checkpoint, --paths.snapshots): each student gets its own in its run folder (RUN_FILES),
        and a teacher writes none.
    role (str): "teacher" (the model used is model-best) or "student" (model-last).
    jobs (int): trainings at once (0 = all of them).
    report (Callable[[str], None]): where the lines about kept runs go (run_parallel
        reports the trainings as they start and end).
    status_every_s (float): seconds between the status lines of the running trainings
        (the last line of each one's log).
    RETURNS (Dict[str, Dict[str, object]]): per seed: "model" (its model-best or
        model-last), "wall_s", "peak_rss_gb" and "kept" (trained before this call).
        Raises RuntimeError naming each run that failed and its log, after the others
        have finished (run_parallel prints the end of each failed log).
    """
    config, output_dir = Path(config), Path(output_dir)
    check_role(role)
    if not config.is_file():
        raise ValueError(f"the training config {config} does not exist")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"give distinct seeds (got {list(seeds)})")
    check_overrides(overrides, role)
    if seeds:  # no runs: an empty summary, which reads nothing
        check_corpus_paths(config, overrides)
    inputs = run_inputs(config, overrides) if seeds else {}  # no runs: nothing to read
    todo = [s for s in seeds if not _finished(config, output_dir, s, overrides, role, inputs)]
    for seed in seeds:
        folder = run_dir(output_dir, seed, role)
        if seed not in todo:
            report(f"{role}-s{seed}: kept (trained earlier from these inputs and settings: {folder / ROLES[role]})")
        elif (folder / TIMING).is_file() and not (folder / INPUTS).is_file():
            report(f"{role}-s{seed}: trained earlier by a version that recorded no {INPUTS}; training it again")
        elif (folder / TIMING).is_file():
            report(f"{role}-s{seed}: trained earlier with other settings or from inputs that changed since; training it again")
    at_once = min(jobs or len(todo), len(todo)) if todo else 1
    threads = cpu_share(at_once)
    commands = []
    for seed in todo:
        folder, command = run_dir(output_dir, seed, role), run_command(config, output_dir, seed, overrides, role)
        commands.append(shlex.join(command))
        if _resumes(folder, command, inputs):
            report(f"{role}-s{seed}: stopped earlier before it finished; resuming from its checkpoint")
        else:
            _remove_run_state(folder, role)
        (folder / TIMING).unlink(missing_ok=True)  # written again when it succeeds
        atomic_write_text(folder / INPUTS, json.dumps(inputs, indent=2))
        atomic_write_text(folder / STARTED, json.dumps({"command": command}, indent=2))
    logs = [run_dir(output_dir, seed, role) / "train.log" for seed in todo]
    failed = set(run_parallel(commands, jobs=at_once, threads=threads, logs=logs, status_every_s=status_every_s))
    bad = [seed for seed, command in zip(todo, commands) if command in failed]
    if bad:
        raise RuntimeError("; ".join(f"{role}-s{s} failed, see {run_dir(output_dir, s, role) / 'train.log'}" for s in bad))
    summary = {}
    for seed in seeds:
        folder = run_dir(output_dir, seed, role)
        timing = read_measurement(folder / TIMING)
        if timing is None:  # run_parallel reported success: measure writes it then
            raise RuntimeError(f"{role}-s{seed} finished without writing {folder / TIMING}")
        summary[str(seed)] = {"model": str(folder / ROLES[role]), "wall_s": timing["wall_s"],
                              "peak_rss_gb": timing["peak_rss_gb"], "kept": seed not in todo}
    output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output_dir / summary_name(role), json.dumps({"config": str(config), "overrides": list(overrides),
                                                                   "threads": threads, runs_key(role): summary}, indent=2))
    return summary


def run_inputs(config: Path, overrides: Sequence[str]) -> Dict[str, str]:
    """What the runs are trained from, beside their arguments: the content digest
    (fingerprint.path_digest) of the config and of every existing file or folder that
    an override names (a corpus, the pseudo-labels, the encoder, a teacher to start
    from; a folder's RUN_RECORDS left out), by path. It reads their bytes: about a
    second per GB.

    config (Path): the training config.
    overrides (Sequence[str]): the `spacy train` arguments shared by the runs.
    """
    inputs = {str(config): path_digest(config, content=True)}
    for arg in overrides:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if value and not value.startswith("-") and Path(value).exists():
            inputs[value] = path_digest(value, content=True, skip=RUN_RECORDS)
    return inputs


def _finished(config: Path, output_dir: Path, seed: int, overrides: Sequence[str], role: str, inputs: Dict[str, str]) -> bool:
    """Whether the run of `seed` was trained to the end with this config and these
    overrides (the `spacy train` arguments its timing.json recorded) from these inputs
    (run_inputs, recorded in its inputs.json)."""
    folder = run_dir(output_dir, seed, role)
    if not (folder / ROLES[role]).is_dir():
        return False
    try:
        recorded = (read_measurement(folder / TIMING) or {}).get("command")
        if json.loads((folder / INPUTS).read_text(encoding="utf8")) != inputs:
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    command = run_command(config, output_dir, seed, overrides, role)
    train = command[command.index("--") + 1:]  # what measure ran: python -m spacy train ...
    return isinstance(recorded, list) and recorded[1:] == train[1:]


def _resumes(folder: Path, command: List[str], inputs: Dict[str, str]) -> bool:
    """Whether the run in `folder`, to be trained now with `command` from `inputs`, was
    stopped before it finished (no timing.json) after a start with the same command line
    and inputs, and has a checkpoint to resume from."""
    checkpoint = RUN_FILES["student"]["--paths.checkpoint"]
    if (folder / TIMING).is_file() or find_checkpoint(folder / checkpoint) is None:
        return False
    try:
        started = json.loads((folder / STARTED).read_text(encoding="utf8"))["command"]
        return started == command and json.loads((folder / INPUTS).read_text(encoding="utf8")) == inputs
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _remove_run_state(folder: Path, role: str) -> None:
    """Remove what an earlier training of this run folder left for the next (RUN_STATE:
    a student's checkpoint, the one its swap may have left beside it, its snapshots, its
    training log), so that the training now starts afresh."""
    for name in RUN_STATE[role]:
        for path in (folder / name, old_dir(folder / name)):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()


def run_command(config: Path, output_dir: Path, seed: int, overrides: Sequence[str], role: str = "teacher") -> List[str]:
    """The command line that trains the run of `seed` (under `spacy_maral.bench measure`): its
    output folder, its seed, its own files of RUN_FILES, then `overrides`."""
    folder = run_dir(output_dir, seed, role)
    own = [arg for name, file in RUN_FILES[role].items() for arg in (name, str(folder / file))]
    return ["python", "-m", "spacy_maral.bench", "measure", str(folder / TIMING), "--",
            "python", "-m", "spacy", "train", str(config), "--output", str(folder), "--system.seed", str(seed), *own, *overrides]
