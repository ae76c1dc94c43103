"""The typer application of `python -m spacy_maral`; every command module adds its
commands to it (as spaCy's own `cli/_util.py` holds `app`)."""
import typer

PRECISION_HELP = (
    "The encoder's precision: auto (bfloat16 where the CPU has native bfloat16, AVX512-BF16 or AMX; "
    "fp32 elsewhere), fp32 or bf16. Chosen at load time; the weights stay fp32."
)


def precision_option() -> str:
    """The --precision option every command that runs a pipeline takes."""
    return typer.Option("auto", "--precision", help=PRECISION_HELP)


app = typer.Typer(
    name="spacy_maral",
    help="spacy-maral: large-margin cross-lingual NER for spaCy.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help texts are plain: 'spacy-maral[ray]' and NAME=RUN_DIR[@CHECKPOINT] keep their brackets
)
