"""A student's checkpoint: its snapshot with the highest source dev F1 (the least drift
from its teacher on the source language), or, for a student of the development language,
its highest F1 on that language's own dev set.

A student warm-started from its teacher drifts from it during stage 2, and how far shows
on the language both were trained on: over the snapshots of two Finnish students, the
drop of English dev F1 from the teacher followed the real gain on Finnish (Spearman
-0.59), where the guard's agreement and label shift did not. The student that ships is
therefore the snapshot (every `snapshot_every` steps, and `model-last`) with the highest
source dev F1 on raw text; on a tie, the later one. Step 0, the teacher itself, is never
a candidate: with a warm start, source dev selection would pick it every time. Nor are
the snapshots of the first half of training (`skip_first`): still close to the teacher
on the source language, they have not yet learnt the pseudo-labels, and over five
screened students they lost to the teacher on the target dev sets (mean -1.3 F1 at steps
100 to 400 of 800, +0.6 from step 500). BENCHMARKS.md ("The student's checkpoint") has
what this measured.

A language with a dev set of its own, the development language (the workflow's
`dev_lang`), has better than a proxy: its student's checkpoint is the candidate with the
highest F1 on that dev set (`selection_dev`). On held-out halves of es/dev this gained
+1.2 and +2.1 F1 over the source dev pick for two Spanish students, and -0.2 to +0.1 on
fi/dev for three Finnish ones (BENCHMARKS.md, "The student's checkpoint").

`checkpoint_candidates` lists a run's snapshots and model-last, `selection_dev` says which
dev set ranks them, `select_checkpoint` scores them and picks, `select_runs` does it for
every run of a `train-students` summary and writes the summary of the picks (the shape
`average --runs` reads).
"""
import json
import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from spacy_maral.fileio import atomic_write_text
from spacy_maral.training.run_summary import read_summary, runs_key
from spacy_maral.training.snapshots import snapshot_step, snapshots_from

SNAPSHOTS = "snapshots"  # a student's snapshot folder in its run folder (train-students sets it: workflow.per_seed.RUN_FILES)
LAST = "model-last"
SKIP_FIRST = 0.5  # the fraction of training whose snapshots are not candidates (the workflow's select_skip_first)


@dataclass
class ScoredCheckpoint:
    """One candidate and its dev F1.

    name (str): its folder's name (step-NNNNNN for a snapshot, model-last).
    path (str): the pipeline's folder.
    dev_f (float): its entity F1 (points) on the dev set that ranks the candidates, raw text.
    """

    name: str
    path: str
    dev_f: float


@dataclass
class SelectionDev:
    """The dev set that ranks a student's checkpoints.

    path (Path): the gold dev corpus.
    lang (Optional[str]): tokenizer rules for its text (None: each pipeline's own).
    name (str): what it is, for the picks' record: "source dev" or "LANG dev".
    """

    path: Path
    lang: Optional[str]
    name: str


def selection_dev(
    source_dev: Path,
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    target_dev: Optional[Path] = None,
    target_dev_lang: Optional[str] = None,
) -> SelectionDev:
    """The dev set that ranks a student's checkpoints: the development language's own for
    a student of that language, the source language's for any other.

    source_dev (Path): the gold source dev corpus.
    source_lang (Optional[str]): its tokenizer rules (None: each pipeline's own).
    target_lang (Optional[str]): the language the student was adapted to (None: unknown).
    target_dev (Optional[Path]): the development language's gold dev corpus (None: none).
    target_dev_lang (Optional[str]): the development language (needed with target_dev).
    RAISES (ValueError): target_dev without target_dev_lang.
    """
    if target_dev is not None and not target_dev_lang:
        raise ValueError(f"the dev set {target_dev} needs its language (--target-dev-lang)")
    if target_dev is not None and target_lang is not None and target_lang == target_dev_lang:
        return SelectionDev(Path(target_dev), target_dev_lang, f"{target_dev_lang} dev")
    return SelectionDev(Path(source_dev), source_lang, "source dev")


def check_skip_first(skip_first: float) -> None:
    """RAISES (ValueError): `skip_first` is outside [0, 1) (1 would leave out every snapshot)."""
    if not 0.0 <= skip_first < 1.0:
        raise ValueError(f"skip_first must be in [0, 1), not {skip_first}: the fraction of training whose snapshots are not candidates")


def first_candidate_step(last_step: int, skip_first: float = SKIP_FIRST) -> int:
    """The earliest snapshot step that is a candidate: the first after `skip_first` x
    `last_step`, compared exactly (0.29 of 100: step 30, where floats make 28.999...).

    last_step (int): the step of the run's last snapshot.
    skip_first (float): in [0, 1), the fraction of training whose snapshots are not candidates.
    """
    return math.floor(Fraction(str(skip_first)) * last_step) + 1


def checkpoint_candidates(run_folder: Path, skip_first: float = SKIP_FIRST) -> List[Path]:
    """A student run's candidates in training order: its snapshots
    (RUN/snapshots/step-NNNNNN, by step) after the first `skip_first` of training, then
    model-last.

    run_folder (Path): a `train-students` run folder (OUTPUT_DIR/student-sSEED).
    skip_first (float): in [0, 1): the snapshots of step `skip_first` x the last
        snapshot's step or earlier are not candidates (0.5 with snapshots up to step 800:
        steps 100 to 400), compared exactly (0.29 of 100 leaves step 29 out); 0 = every
        snapshot.
    RAISES (ValueError): the run has no model-last, or `skip_first` is outside [0, 1).
    """
    check_skip_first(skip_first)
    run_folder = Path(run_folder)
    last = run_folder / LAST
    if not last.is_dir():
        raise ValueError(f"{run_folder} has no {LAST}: the run did not finish")
    snapshots = snapshots_from(run_folder / SNAPSHOTS)
    if snapshots:
        first = first_candidate_step(snapshot_step(snapshots[-1]), skip_first)
        snapshots = [path for path in snapshots if snapshot_step(path) >= first]
    return [*snapshots, last]


def select_checkpoint(
    candidates: Sequence[Path],
    dev_f: Callable[[Path], float],
    progress: Optional[Callable[[int, int, Path], None]] = None,
) -> Tuple[ScoredCheckpoint, List[ScoredCheckpoint]]:
    """Score every candidate and pick the one with the highest dev F1 (on a tie, the
    later one).

    candidates (Sequence[Path]): pipeline folders in training order.
    dev_f (Callable[[Path], float]): a pipeline folder's F1 (points) on the ranking dev set.
    progress (Optional[Callable[[int, int, Path], None]]): called as (i, n, path) before each.
    RETURNS (Tuple[ScoredCheckpoint, List[ScoredCheckpoint]]): the pick, and every
        candidate scored, in training order.
    RAISES (ValueError): no candidates.
    """
    if not candidates:
        raise ValueError("no checkpoints to choose from")
    scored = []
    for i, path in enumerate(candidates):
        if progress is not None:
            progress(i, len(candidates), Path(path))
        scored.append(ScoredCheckpoint(Path(path).name, str(path), float(dev_f(Path(path)))))
    best = max(range(len(scored)), key=lambda i: (scored[i].dev_f, i))
    return scored[best], scored


def select_runs(
    summary_path: Path,
    output: Path,
    dev_f: Callable[[Path], float],
    progress: Optional[Callable[[int, int, Path], None]] = None,
    skip_first: float = SKIP_FIRST,
    dev_name: str = "source dev",
) -> Dict[str, Dict[str, object]]:
    """Pick the checkpoint of every student a `train-students` summary lists, and write
    the summary of the picks: the same shape (`average --runs OUTPUT` reads it), each
    student's "model" its pick, with "selection" (the rule, and every candidate's dev F1).

    summary_path (Path): OUTPUT_DIR/students.json of train-students.
    output (Path): the JSON file written (atomically).
    dev_f (Callable[[Path], float]): a pipeline folder's F1 (points) on the ranking dev set.
    progress (Optional[Callable[[int, int, Path], None]]): as for select_checkpoint.
    skip_first (float): the fraction of training whose snapshots are not candidates
        (checkpoint_candidates).
    dev_name (str): the ranking dev set, for the record (SelectionDev.name).
    RETURNS (Dict[str, Dict[str, object]]): the students of the written summary, by seed.
    RAISES (ValueError): the summary is not one of train-students, a run is unfinished, or
        `skip_first` is outside [0, 1).
    """
    summary, role, students = read_summary(summary_path, role="student")
    picked = {}
    for seed, entry in students.items():
        best, scored = select_checkpoint(checkpoint_candidates(Path(entry["model"]).parent, skip_first), dev_f, progress)
        picked[seed] = {**entry, "model": best.path,
                        "selection": {"rule": f"highest {dev_name} F1 (raw text); on a tie, the later step",
                                      "dev": dev_name,
                                      "skip_first": skip_first,
                                      "candidates": [asdict(c) for c in scored]}}
    atomic_write_text(Path(output), json.dumps({**summary, runs_key(role): picked}, indent=2))
    return picked
