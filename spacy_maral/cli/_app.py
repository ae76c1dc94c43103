"""The typer application of `python -m spacy_maral`; every command module adds its
commands to it (as spaCy's own `cli/_util.py` holds `app`)."""
import typer

app = typer.Typer(
    name="spacy_maral",
    help="spacy-maral: large-margin cross-lingual NER for spaCy.",
    no_args_is_help=True,
    add_completion=False,
)
