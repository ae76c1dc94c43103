"""`python -m spacy_maral train-teachers`: one stage-1 teacher per seed, side by side."""
from pathlib import Path
from typing import List

import typer

from spacy_maral.cli._app import app


def parse_seeds(value: str) -> List[int]:
    """"0,1,2" -> [0, 1, 2]."""
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError as err:
        raise typer.BadParameter(f"{value!r}: give integers separated by commas, e.g. 0,1,2", param_hint="--seeds") from err


@app.command("train-teachers", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train_teachers_command(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Stage-1 training config, e.g. configs/source.cfg."),
    output_dir: Path = typer.Argument(..., help="Folder for the teachers: OUTPUT_DIR/teacher-sSEED each."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="One teacher per seed, e.g. 0,1,2 (\"\": none, only an empty teachers.json)."),
    jobs: int = typer.Option(0, "--jobs", min=0, help="Trainings at once (0 = all); the cores are shared between them."),
) -> None:
    """Train one teacher per seed side by side, e.g. for `pseudo-label --ensemble`. Every
    other option is passed to each `spacy train` (e.g. --paths.train corpus/en-train.spacy).
    A teacher already trained in OUTPUT_DIR with the same settings (model-best, and the
    same arguments in its timing.json) is kept; one trained otherwise is trained again.
    """
    from spacy_maral.training.teachers import train_teachers

    overrides = [a for a in ctx.args if a != "--"]
    try:
        summary = train_teachers(config, output_dir, parse_seeds(seeds), overrides, jobs=jobs, report=typer.echo)
    except ValueError as err:
        typer.secho(f"train-teachers: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from err
    except RuntimeError as err:
        typer.secho(f"train-teachers failed: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1) from err
    for seed, entry in summary.items():
        typer.echo(f"  seed {seed}: {entry['model']} ({entry['wall_s']} s, peak RSS {entry['peak_rss_gb']} GB{', kept' if entry['kept'] else ''})")
