"""`python -m spacy_maral pseudo-label`: soft labels for a target corpus from a teacher."""
from pathlib import Path
from typing import Optional

import typer

from . import app


@app.command("pseudo-label")
def pseudo_label_command(
    teacher: Path = typer.Argument(..., help="Trained teacher pipeline (directory or package name)."),
    input_path: Path = typer.Argument(..., help="Target corpus: .spacy file or directory, a CoNLL-style file (.conll, .iob, .tsv...), or text with one sentence a line."),
    output_dir: Path = typer.Argument(..., help="Directory for the pseudo-labelled shards."),
    batch_size: int = typer.Option(32, "--batch-size", "-b", help="Sentences per teacher batch."),
    shard_size: int = typer.Option(1000, "--shard-size", help="Sentences per output shard (a killed run keeps finished shards)."),
    limit: int = typer.Option(0, "--limit", help="Label only the first N sentences (0 = all)."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
    inference_tau: Optional[float] = typer.Option(None, "--inference-tau", help="Override the teacher's inference_tau (source prior weight in the decision rule); choose it on the source dev set."),
) -> None:
    """Label every target sentence with the teacher: kept entity spans get their
    probability vectors, every other span is O. Target tags, if the corpus has any, are
    kept aside for diagnostics only.
    """
    import spacy
    from thinc.api import require_gpu

    from ..component import find_maral_ner
    from ..pseudo_label import pseudo_label

    if gpu_id >= 0:
        require_gpu(gpu_id)
    try:
        nlp = spacy.load(teacher)
        if inference_tau is not None:
            find_maral_ner(nlp).inference_tau = inference_tau
        stats = pseudo_label(nlp, input_path, output_dir, batch_size=batch_size, shard_size=shard_size, limit=limit)
    except (OSError, ValueError) as err:
        typer.secho(f"pseudo-label failed: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1) from err
    typer.echo(
        f"{stats.sentences} sentences ({stats.shards_written} shards written, {stats.shards_kept} kept from an earlier run)"
    )
    for label, n in sorted(stats.entities.items()):
        typer.echo(f"  {label:<10} {n:>8} pseudo-labelled entity spans")
    if stats.diagnostic_gold:
        typer.echo(f"  {stats.diagnostic_gold} target tags kept aside for diagnostics only")
    typer.echo(f"output: {output_dir}")
