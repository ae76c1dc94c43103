"""The `python -m spacy_maral` command line (typer).

Each command lives in its own module of this package and is registered on `app` here.
"""
import typer

app = typer.Typer(
    name="spacy_maral",
    help="spacy-maral: large-margin cross-lingual NER for spaCy.",
    no_args_is_help=True,
    add_completion=False,
)


def _register() -> None:
    from . import annotate, bench, calibrate, convert, encoder, evaluate, guard, package, predict, pseudo_label  # noqa: F401  (each module adds its commands to app)


_register()
