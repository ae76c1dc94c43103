"""The `python -m spacy_maral` command line (typer): one module per command, each adding
its command to `app` (`_app.py`)."""
from spacy_maral.cli import (  # noqa: F401  (each module adds its commands to app)
    annotate,
    average,
    calibrate,
    check_text,
    convert,
    encoder,
    evaluate,
    guard,
    languages,
    package,
    per_seed,
    predict,
    pseudo_label,
    select_checkpoint,
)
from spacy_maral.cli._app import app

__all__ = ["app"]
