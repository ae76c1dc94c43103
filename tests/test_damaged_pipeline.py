"""A damaged file of a pipeline folder is named: the loader's error names the file,
whichever it is (config.cfg, meta.json, tokenizer, vocab/*, each component's cfg and
weights), and every command that loads a pipeline stops with one line naming it, exit
status 1, no traceback.
"""
import pickle
import shutil
from pathlib import Path
from typing import List

import pytest
from typer.testing import CliRunner

from helpers import app_of, write_train_corpus
from spacy_maral.cli import app
from spacy_maral.fileio import OWNER_MARKER
from spacy_maral.pipeline.folder import DamagedPipelineError, pipeline_config
from spacy_maral.pipeline.loading import load_pipeline


def pipeline_files(folder: Path) -> List[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != OWNER_MARKER)


def damaged_copy(source: Path, target: Path, name: str) -> Path:
    """A copy of the pipeline `source` whose file `name` is cut to half its size."""
    shutil.copytree(source, target)
    data = (target / name).read_bytes()
    (target / name).write_bytes(data[: len(data) // 2])
    return target / name


def test_every_file_of_the_tiny_pipeline_is_covered(trained_dir) -> None:
    """The parametrization below lists every file a maral pipeline folder has."""
    assert pipeline_files(trained_dir) == sorted(FILES)


FILES = ["config.cfg", "maral_ner/cfg", "maral_ner/model", "meta.json", "tokenizer", "transformer/cfg", "transformer/model",
         "vocab/key2row", "vocab/lookups.bin", "vocab/strings.json", "vocab/vectors", "vocab/vectors.cfg"]


@pytest.mark.parametrize("name", FILES)
def test_a_truncated_file_is_named(trained_dir, tmp_path, name) -> None:
    damaged = damaged_copy(trained_dir, tmp_path / "pipeline", name)
    with pytest.raises(DamagedPipelineError) as caught:
        load_pipeline(tmp_path / "pipeline")
    message = str(caught.value)
    assert caught.value.path == damaged and str(damaged) in message and "\n" not in message, message
    again = pickle.loads(pickle.dumps(caught.value))  # as a worker process sends it back
    assert str(again) == message and again.path == damaged


@pytest.mark.parametrize("name", ["config.cfg", "meta.json", "tokenizer", "vocab/strings.json", "maral_ner/model"])
def test_a_missing_file_is_named(trained_dir, tmp_path, name) -> None:
    shutil.copytree(trained_dir, tmp_path / "pipeline")
    (tmp_path / "pipeline" / name).unlink()
    with pytest.raises(DamagedPipelineError, match=str(tmp_path / "pipeline" / name)):
        load_pipeline(tmp_path / "pipeline")


def test_a_damaged_file_of_another_pipeline_is_named(tmp_path) -> None:
    """Not only maral's files: an entity ruler's patterns, a blank pipeline's tokenizer."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}])
    nlp.to_disk(tmp_path / "ruler")
    names = pipeline_files(tmp_path / "ruler")
    assert "entity_ruler/patterns.jsonl" in names
    for name in names:
        target = tmp_path / name.replace("/", "_")
        damaged = damaged_copy(tmp_path / "ruler", target, name)
        if damaged.stat().st_size == 0 and name.endswith(".jsonl"):
            damaged.write_text('{"label": "LOC", "pattern"', encoding="utf8")
        with pytest.raises(DamagedPipelineError) as caught:
            load_pipeline(target)
        assert caught.value.path == damaged, (name, str(caught.value))


def test_the_config_is_read_naming_a_damaged_one(trained_dir, tmp_path) -> None:
    assert "maral_ner" in pipeline_config(trained_dir)["components"]
    damaged = damaged_copy(trained_dir, tmp_path / "pipeline", "config.cfg")
    damaged.write_bytes(b"\x93[nlp")
    with pytest.raises(DamagedPipelineError, match="config.cfg"):
        pipeline_config(tmp_path / "pipeline")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_train_corpus(tmp_path_factory.mktemp("corpus"))


COMMANDS = {
    "predict": ["predict", "{model}", "Paris ."],
    "export": ["export", "{model}", "{out}"],
    "calibrate": ["calibrate", "{model}", "{dev}", "--output", "{out}"],
    "evaluate": ["evaluate", "{dev}", "{model}"],
    "guard": ["guard", "{good}", "{model}", "{dev}", "{text}", "--output", "{out}.json"],
    "annotate": ["annotate", "{model}", "{text}", "{out}", "--no-progress"],
    "pseudo-label": ["pseudo-label", "{model}", "{text}", "{out}"],
    "average": ["average", "{good}", "{model}", "--output", "{out}"],
    "benchmark-report": ["benchmark-report", "{dev}", "{dev}", "{out}", "--system", "x={run}"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_names_the_damaged_file_in_one_line(command, trained_dir, corpus, tmp_path) -> None:
    damaged = damaged_copy(trained_dir, tmp_path / "run" / "model-best", "vocab/strings.json")
    paths = {"model": tmp_path / "run" / "model-best", "good": trained_dir, "dev": corpus / "dev.spacy",
             "text": corpus / "text.txt", "out": tmp_path / "out", "run": tmp_path / "run"}
    result = CliRunner().invoke(app_of(command), [a.format(**paths) for a in COMMANDS[command]])
    output = result.output + str(result.stderr_bytes or b"", "utf8", "replace")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), output + repr(result.exception)
    lines = [line for line in output.splitlines() if str(damaged) in line]
    assert len(set(lines)) == 1 and "Traceback" not in output, output  # (output holds stderr, maybe twice)


@pytest.mark.slow
def test_worker_processes_name_the_damaged_file(trained_dir, corpus, tmp_path) -> None:
    """annotate -n 2: the workers' loading error reaches the driver (no broken pool)."""
    damaged = damaged_copy(trained_dir, tmp_path / "pipeline", "tokenizer")
    result = CliRunner().invoke(app, ["annotate", str(tmp_path / "pipeline"), str(corpus / "text.txt"), str(tmp_path / "out"),
                                      "--no-progress", "-n", "2"])
    output = result.output + str(result.stderr_bytes or b"", "utf8", "replace")
    assert result.exit_code == 1 and str(damaged) in output and "Traceback" not in output, output
