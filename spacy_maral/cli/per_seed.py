"""`python -m spacy_maral train-teachers` and `train-students`: one training per seed, side by side."""
from pathlib import Path
from typing import List

import typer

from spacy_maral.cli._app import app
from spacy_maral.util import Printer

SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def parse_seeds(value: str) -> List[int]:
    """"0,1,2" -> [0, 1, 2]."""
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError as err:
        raise typer.BadParameter(f"{value!r}: give integers separated by commas, e.g. 0,1,2", param_hint="--seeds") from err


def _train(ctx: typer.Context, config: Path, output_dir: Path, seeds: str, jobs: int, role: str) -> None:
    """Run train_per_seed for the command of `role` and print one line per run."""
    from spacy_maral.training.run_summary import ROLES, summary_name
    from spacy_maral.workflow.per_seed import train_per_seed

    msg = Printer()
    overrides = [a for a in ctx.args if a != "--"]
    try:
        summary = train_per_seed(config, output_dir, parse_seeds(seeds), overrides, role=role, jobs=jobs, report=msg.text)
    except ValueError as err:
        msg.fail(f"train-{role}s: {err}", exits=2)
    except RuntimeError as err:
        msg.fail(f"train-{role}s failed: {err}", exits=1)
    for seed, entry in summary.items():
        msg.text(f"  seed {seed}: {entry['model']} ({entry['wall_s']} s, peak RSS {entry['peak_rss_gb']} GB{', kept' if entry['kept'] else ''})")
    if not summary:
        msg.text(f"  no seeds: {output_dir / summary_name(role)} lists no {role} ({ROLES[role]})")


@app.command("train-teachers", context_settings=SETTINGS)
def train_teachers_command(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Stage-1 training config, e.g. configs/source.cfg."),
    output_dir: Path = typer.Argument(..., help="Folder for the teachers: OUTPUT_DIR/teacher-sSEED each, and teachers.json."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="One teacher per seed, e.g. 0,1,2 (\"\": none, only an empty teachers.json)."),
    jobs: int = typer.Option(0, "--jobs", min=0, help="Trainings at once (0 = all); the cores are shared between them."),
    teacher_seed: int = typer.Option(-1, "--teacher-seed", help="The seed of the workflow's own teacher: refused in --seeds, where the ensemble would hold that teacher twice (-1 = none)."),
) -> None:
    """Train one teacher per seed side by side, e.g. for `pseudo-label --ensemble-from`.
    Every other option is passed to each `spacy train` (e.g. --paths.train
    corpus/en-train.spacy). A teacher already trained in OUTPUT_DIR with the same settings
    from the same inputs (model-best, the same arguments in its timing.json, the same
    bytes of the config and of the files the arguments name in its inputs.json) is kept;
    one trained otherwise is trained again.
    """
    if teacher_seed >= 0 and teacher_seed in parse_seeds(seeds):
        raise typer.BadParameter(
            f"{seeds!r} holds {teacher_seed}, the seed of the workflow's teacher: that teacher would be trained again and "
            "counted twice in the ensemble; give other seeds (e.g. the workflow's ensemble_seeds without its teacher_seed)",
            param_hint="--seeds")
    _train(ctx, config, output_dir, seeds, jobs, "teacher")


@app.command("train-students", context_settings=SETTINGS)
def train_students_command(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Stage-2 training config, e.g. configs/adapt.cfg."),
    output_dir: Path = typer.Argument(..., help="Folder for the students: OUTPUT_DIR/student-sSEED each, and students.json."),
    seeds: str = typer.Option("100", "--seeds", help="One student per stage-2 seed, e.g. 100 (\"\": none, only an empty students.json)."),
    jobs: int = typer.Option(0, "--jobs", min=0, help="Trainings at once (0 = all; each takes about 7 GB at the CoNLL budget); the cores are shared between them."),
) -> None:
    """Train one stage-2 student per seed side by side, e.g. for a soup: `average --runs
    OUTPUT_DIR/students.json`. Every other option is passed to each `spacy train` (e.g.
    --paths.target corpus/de-pseudo); not a log, diagnostics or checkpoint path: each
    student writes its own in its folder (log.jsonl, diagnostics.jsonl, checkpoint). A
    student already trained in OUTPUT_DIR with the same settings from the same inputs
    (model-last, the same arguments in its timing.json, the same bytes in its
    inputs.json) is kept.
    """
    _train(ctx, config, output_dir, seeds, jobs, "student")
