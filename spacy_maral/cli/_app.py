"""The typer application of `python -m spacy_maral`; every command module adds its
commands to it (as spaCy's own `cli/_util.py` holds `app`), with the help layout of
`MaralCommand` and the shared `--precision` option."""
import re
from typing import Any, List, Literal

import typer
from typer.core import TyperArgument, TyperCommand

# the encoder's precisions (pipeline.precision.PRECISIONS; a Literal, so that
# --help lists them and click refuses any other, without importing torch here)
Precision = Literal["auto", "fp32", "bf16", "int8"]
PRECISION_HELP = (
    "The encoder's precision: auto (bfloat16 where the CPU has native bfloat16, AVX512-BF16 or AMX; "
    "fp32 elsewhere), fp32, bf16 or int8 (int8 matrix products on the CPU: faster on CPUs with int8 dot "
    "products (VNNI), many times slower on AVX2-only ones; changes 3-4% of the entities). Chosen at load time; the weights stay fp32."
)
# a sentence ends at a full stop before a capital letter or the end of the paragraph;
# "e.g." and "i.e." end none
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s+[A-Z]|\s*$)")


def precision_option() -> str:
    """The --precision option every command that runs a pipeline takes."""
    return typer.Option("auto", "--precision", help=PRECISION_HELP)


def first_sentence(text: str) -> str:
    """The first sentence of a help text's first paragraph (whole, however long), for the
    command list of `python -m spacy_maral --help`."""
    paragraph = " ".join(text.split("\f")[0].strip().split("\n\n")[0].split())
    end = SENTENCE_END.search(paragraph)
    return paragraph[: end.end()] if end else paragraph


class MaralCommand(TyperCommand):
    """A command whose help shows its arguments as upper-case names (MODEL, not {model};
    DEV for dev_path),
    in the usage line as click writes them (MODEL, [OPTIONAL]), and whose line in the
    command list is its help's first sentence, whole (click would cut it after 45
    characters, or at the "e.g." of "(e.g. ...)")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # model -> MODEL, dev_path -> DEV, output_dir -> OUTPUT_DIR
            if isinstance(param, TyperArgument) and param.metavar is None:
                name = (param.name or "").upper()
                param.metavar = name[: -len("_PATH")] if name.endswith("_PATH") else name
        if not self.short_help and self.help:
            self.short_help = first_sentence(self.help)

    def collect_usage_pieces(self, ctx: Any) -> List[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar + ("..." if param.nargs != 1 else "")
                pieces.append(name if param.required else f"[{name}]")
        return pieces


class MaralTyper(typer.Typer):
    """typer.Typer whose commands are MaralCommands."""

    def command(self, *args: Any, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or MaralCommand, **kwargs)


app = MaralTyper(
    name="spacy_maral",
    help="spacy-maral: large-margin cross-lingual NER for spaCy.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help texts are plain: '.[ray]' and NAME=RUN_DIR[@CHECKPOINT] keep their brackets
)
