"""`python -m spacy_maral convert`: a CoNLL-style NER file to a spaCy `.spacy` DocBin."""
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, List, Tuple

import typer

from spacy_maral.cli._app import app
from spacy_maral.util import Printer

if TYPE_CHECKING:
    from spacy_maral.corpora import ConversionStats

MAX_REPAIRS_SHOWN = 10
TABLE_STYLE = {"aligns": ("l", "r", "r"), "divider": True}


class Format(str, Enum):
    """Input formats offered on the command line."""

    auto = "auto"
    conll = "conll"
    wikiann = "wikiann"
    multiconer = "multiconer"


class Scheme(str, Enum):
    """Tag schemes offered on the command line."""

    auto = "auto"
    iob1 = "iob1"
    iob2 = "iob2"
    bioes = "bioes"


def _plain_text_hint(path: Path) -> str:
    """What to add to a conversion error where the input does not look like a CoNLL-style
    file at all (its lines do not end in a tag column): it may be plain text, which is
    read as it is and needs no conversion."""
    from spacy_maral.corpora.target_path import conll_looking_line, tabular_line

    try:
        looks_tagged = (not path.is_file() or path.stat().st_size == 0 or conll_looking_line(path) is not None
                        or tabular_line(path) is not None)
    except (OSError, ValueError):
        return ""
    if looks_tagged:  # an empty file, too, says nothing of plain text
        return ""
    return (f" ({path}'s lines do not end in a tag column: if it is plain text, one sentence a line, it needs no "
            "conversion: the workflow's target_text and pseudo-label read it as it is)")


def resolve_output(input_path: Path, output: Path) -> Path:
    """The `.spacy` file to write.

    input_path: the input file (its stem names the output inside a directory).
    output: a `.spacy` file path, or an existing directory.
    """
    if output.is_dir():
        return output / f"{input_path.stem}.spacy"
    if output.suffix != ".spacy":
        raise typer.BadParameter(
            f"{output} is neither an existing directory nor a .spacy file path: make the folder first, "
            f"or name the file (e.g. {output}.spacy)",
            param_hint="OUTPUT",
        )
    return output


def _count_rows(stats: "ConversionStats") -> List[Tuple[str, int, int]]:
    """(what, read, written) rows for sentences and tokens.

    stats: the conversion's statistics (with `written` filled in).
    """
    written = stats.written
    return [
        ("sentences", stats.sentences, written.sentences if written else 0),
        ("tokens", stats.tokens, written.tokens if written else 0),
    ]


def _entity_rows(stats: "ConversionStats") -> List[Tuple[str, int, int]]:
    """(label, read, written) rows for every label, then a total row.

    stats: the conversion's statistics (with `written` filled in).
    """
    written = stats.written.entities if stats.written else {}
    labels = sorted(set(stats.entities) | set(written))
    rows = [(label, stats.entities.get(label, 0), written.get(label, 0)) for label in labels]
    rows.append(("total", stats.total_entities, sum(written.values())))
    return rows


def _print_counts(stats: "ConversionStats") -> None:
    """Print sentences, tokens, entities per label (read and written) and DOCSTART count.

    stats: the conversion's statistics.
    """
    msg = Printer()
    msg.table(_count_rows(stats), header=("", "read", "written"), **TABLE_STYLE)
    msg.table(_entity_rows(stats), header=("entities", "read", "written"), **TABLE_STYLE)
    msg.text(f"-DOCSTART- documents: {stats.documents}")
    differs = any(read != written for _, read, written in _count_rows(stats) + _entity_rows(stats))
    if differs:
        msg.warn("The written corpus differs from what was read.")


def _print_repairs(stats: "ConversionStats") -> None:
    """Print the first repairs (file and line each) and how many there were.

    stats: the conversion's statistics.
    """
    msg = Printer()
    if not stats.repairs:
        msg.good("No repairs needed.")
        return
    scheme = stats.scheme.upper()
    msg.warn(f"{len(stats.repairs)} repair(s) of the {scheme} tags (--strict refuses them):")
    for line, message in stats.repairs[:MAX_REPAIRS_SHOWN]:
        msg.text(f"  {stats.path}, line {line}: {message}", err=True)
    if len(stats.repairs) > MAX_REPAIRS_SHOWN:
        msg.text(f"  ... and {len(stats.repairs) - MAX_REPAIRS_SHOWN} more", err=True)


@app.command("convert")
def convert_command(
    input_path: Path = typer.Argument(
        ...,
        metavar="INPUT",
        exists=True,
        dir_okay=False,
        readable=True,
        help="CoNLL-style token file (UTF-8).",
    ),
    output: Path = typer.Argument(
        ...,
        metavar="OUTPUT",
        help="The .spacy file to write, or a directory (then INPUT's stem + .spacy inside).",
    ),
    fmt: Format = typer.Option(Format.auto, "--format", "-f", help="Input format; auto sniffs it."),
    scheme: Scheme = typer.Option(
        Scheme.auto, "--scheme", "-s", help="Tag scheme; auto detects it (bioes covers BILOU)."
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Refuse ill-formed tag sequences instead of repairing them."
    ),
    lang: str = typer.Option("xx", "--lang", help="spaCy language code of the Docs' vocabulary."),
) -> None:
    """Convert a CoNLL / WikiANN / MultiCoNER NER file into a spaCy .spacy corpus.

    One Doc per sentence on the file's own tokens; -DOCSTART- lines separate documents.
    \f
    input_path (Path): the input file.
    output (Path): the .spacy file, or an existing directory.
    fmt (Format): the input format.
    scheme (Scheme): the tag scheme.
    strict (bool): refuse tag sequences that would need a repair.
    lang (str): the spaCy language code.
    """
    from spacy_maral.corpora import ConversionError, convert_file
    from spacy_maral.fileio import OutputError

    msg = Printer()
    if not input_path.is_file() and "auto" in (fmt.value, scheme.value):
        # a pipe (/dev/stdin): sniffing the format or the scheme reads it up, and nothing is left to convert
        msg.fail(f"{input_path} is not a regular file, and sniffing its format and tag scheme would read it up: "
                 "give --format and --scheme, or save the stream to a file first", exits=1)
    output_path = resolve_output(input_path, output)
    start = time.perf_counter()
    try:
        stats = convert_file(input_path, output_path, fmt.value, scheme.value, strict, lang)
    except ConversionError as err:
        msg.fail(f"{err}{_plain_text_hint(input_path)}", exits=1)
    except OutputError as err:
        msg.fail(str(err), exits=1)
    except (ValueError, OSError) as err:
        msg.fail(f"{input_path}: {err}", exits=1)
    elapsed = time.perf_counter() - start
    msg.good(f"Wrote {output_path} ({stats.fmt}, {stats.scheme.upper()}) in {elapsed:.1f}s")
    _print_counts(stats)
    _print_repairs(stats)
