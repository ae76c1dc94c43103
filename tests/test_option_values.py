"""An option whose value matches nothing is an error, not an empty or default output.

`annotate --scores-key` (every score would be null), an `--id-field` other than the
default (every id would silently be FILE:LINE), a `--text-field` or `--id-field` for
text files (which have no fields), `benchmark-report --before/--after/
--speed/--timing` (a plot, the speed block or a step silently left out) and `average
--from-step` past the last snapshot (the snapshots silently left out) are refused
before any work, naming the value and what it could have been.
"""
import json
from pathlib import Path
from typing import List

import pyarrow
import pyarrow.parquet as pq
import pytest
import spacy
from typer.testing import CliRunner

from helpers import app_of
from spacy_maral.inference.annotate import ScoresKeyError, annotate
from spacy_maral.inference.engines import make_engine


def run(args: List[str]):
    result = CliRunner().invoke(app_of(str(args[0])), [str(a) for a in args], terminal_width=300)
    return result, " ".join(result.output.split())


@pytest.fixture(scope="module")
def span_ruler_dir(tmp_path_factory) -> Path:
    """A pipeline that writes doc.spans["ruler"] (span_ruler) and entities (entity_ruler)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("span_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}])
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}])
    path = tmp_path_factory.mktemp("span_ruler") / "pipeline"
    nlp.to_disk(path)
    return path


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": t, "id": f"d{i}"}) + "\n" for i, t in enumerate(["Paris .", "Berlin ."])),
                    encoding="utf8")
    return path


@pytest.mark.parametrize("key", ["nope", "maral"])
def test_annotate_refuses_a_scores_key_no_component_writes(span_ruler_dir, corpus, tmp_path, key) -> None:
    out = tmp_path / "out"
    result, output = run(["annotate", span_ruler_dir, corpus, out, "--scores-key", key, "--no-progress"])
    assert result.exit_code == 2, output
    assert f"doc.spans['{key}']" in output and "it writes 'ruler'" in output and "--scores-key" in output, output
    assert not out.exists()  # refused before any work


def test_annotate_takes_a_key_the_pipeline_writes(trained_dir, span_ruler_dir, corpus, tmp_path) -> None:
    result, output = run(["annotate", span_ruler_dir, corpus, tmp_path / "ruler", "--scores-key", "ruler", "--no-progress"])
    assert result.exit_code == 0, output
    result, output = run(["annotate", trained_dir, corpus, tmp_path / "maral", "--scores-key", "maral", "--no-progress"])
    assert result.exit_code == 0, output
    scores = pq.read_table(tmp_path / "maral").column("score").to_pylist()
    assert scores and all(s is not None for s in scores)


def test_a_pipeline_with_no_spans_key_writes_none(tmp_path, corpus) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}])
    nlp.to_disk(tmp_path / "ruler")
    result, output = run(["annotate", tmp_path / "ruler", corpus, tmp_path / "out", "--scores-key", "sc"])
    assert result.exit_code == 2 and "it writes no doc.spans key" in output, output


def test_the_library_refuses_it_too(span_ruler_dir, corpus, tmp_path) -> None:
    from spacy_maral.inference.predictor import EntityPredictor

    with make_engine("local", span_ruler_dir) as workers:
        with pytest.raises(ScoresKeyError, match=r"doc.spans\['nope'\] \(it writes 'ruler'\)"):
            annotate(workers, corpus, tmp_path / "out", scores_key="nope", progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ScoresKeyError, match="it writes 'ruler'"):
        EntityPredictor(str(span_ruler_dir), scores_key="nope")


def test_an_id_field_that_matches_nothing(span_ruler_dir, corpus, tmp_path) -> None:
    """The default id field may be missing (FILE:LINE); one the user names must be there."""
    result, output = run(["annotate", span_ruler_dir, corpus, tmp_path / "jsonl", "--id-field", "doc_id", "--no-progress"])
    assert result.exit_code == 3 and "no 'doc_id' field" in output, output
    table = pyarrow.table({"text": ["Paris .", "Berlin ."]})
    pq.write_table(table, tmp_path / "corpus.parquet")
    result, output = run(["annotate", span_ruler_dir, tmp_path / "corpus.parquet", tmp_path / "pq", "--id-field", "doc_id"])
    assert result.exit_code == 1 and "no column 'doc_id'" in output, output
    result, output = run(["annotate", span_ruler_dir, tmp_path / "corpus.parquet", tmp_path / "default", "--no-progress"])
    assert result.exit_code == 0, output
    assert pq.read_table(tmp_path / "default").column("id").to_pylist() == ["corpus.parquet:1"]


@pytest.mark.parametrize("option", ["--text-field", "--id-field"])
def test_a_field_named_for_text_files_matches_nothing(span_ruler_dir, tmp_path, option) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("Paris .\n", encoding="utf8")
    result, output = run(["annotate", span_ruler_dir, text, tmp_path / "out", option, "body"])
    assert result.exit_code == 2 and "'body'" in output and "holds text files only" in output and option in output, output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option,value,named", [
    ("--before", "zero-shot", "'zero-shot' is not one of the systems (tiny)"),
    ("--after", "maral", "'maral' is not one of the systems (tiny)"),
    ("--speed", "ner,tiny", "'ner,tiny': give two of the systems (tiny)"),
    ("--timing", "pseudo-label={tmp}/missing.json", "missing.json: no such file"),
])
def test_benchmark_report_refuses_names_that_match_no_system(tmp_path, option, value, named) -> None:
    result, output = run(["benchmark-report", tmp_path / "test.spacy", tmp_path / "dev.spacy", tmp_path / "out",
                          "--system", f"tiny={tmp_path / 'run'}", option, value.format(tmp=tmp_path)])
    assert result.exit_code == 2 and named in output and option in output, output
    assert not (tmp_path / "out").exists()


def test_average_refuses_a_from_step_past_every_snapshot(trained_dir, tmp_path) -> None:
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    (snaps / "step-000010").symlink_to(trained_dir, target_is_directory=True)
    result, output = run(["average", trained_dir, "--snapshots", snaps, "--from-step", "20", "-o", tmp_path / "out"])
    assert result.exit_code == 2 and "20 is past the last snapshot" in output and "step-000010" in output, output
    assert not (tmp_path / "out").exists()
    result, output = run(["average", trained_dir, "--snapshots", tmp_path / "empty", "-o", tmp_path / "out"])
    assert result.exit_code == 0, output  # a missing (or empty) snapshot folder adds none, as documented


def test_a_negative_count_of_sentences_is_a_usage_error(span_ruler_dir, tmp_path) -> None:
    """predict --n -1 failed deep inside with islice's message."""
    (tmp_path / "t.txt").write_text("Paris is big.\n", encoding="utf8")
    result, out = run(["predict", span_ruler_dir, "--from-file", tmp_path / "t.txt", "--n", "-1"])
    assert result.exit_code == 2 and "Invalid value for '--n'" in out


def test_predict_says_when_it_has_nothing_to_label(span_ruler_dir, tmp_path) -> None:
    """An empty --from-file printed the pipeline's name and nothing else, exit 0."""
    (tmp_path / "empty.txt").write_text("", encoding="utf8")
    result, out = run(["predict", span_ruler_dir, "--from-file", tmp_path / "empty.txt"])
    assert result.exit_code == 0 and "empty.txt holds no sentence" in out and "no sentence to label" in out
    result, out = run(["predict", span_ruler_dir, "Paris is big.", "--from-file", tmp_path / "empty.txt", "--n", "0"])
    assert result.exit_code == 0 and "holds no sentence" not in out and "no sentence to label" not in out
    # a sentence that is the name of a file is labelled as given, with a hint
    result, out = run(["predict", span_ruler_dir, str(tmp_path / "empty.txt")])
    assert result.exit_code == 0 and "it names a file: to label its lines, give --from-file" in " ".join(out.split())
    result, out = run(["predict", span_ruler_dir, "Paris is big."])
    assert result.exit_code == 0 and "names a file" not in out


def test_evaluate_if_exists_names_what_it_did_not_find(tmp_path) -> None:
    """The workflow passes its target_test, "none" where there is no test set: the
    message said "no test set at none"."""
    for test, said in ((tmp_path / "fi.conll", f"no test set at {tmp_path / 'fi.conll'}"), (Path("none"), "no test set given (none)")):
        out = tmp_path / "scores.json"
        result, output = run(["evaluate", test, f"m={tmp_path / 'no-model'}", "--if-exists", "-o", out])
        assert result.exit_code == 0 and said in output, output
        assert json.loads(out.read_text(encoding="utf8"))["results"] == {}


def test_benchmark_report_refuses_missing_corpora_or_systems_before_any_folder(trained_dir, tmp_path) -> None:
    """A --system that matched no folder wrote an empty report (exit 0), and a missing
    test set was refused after the output folder was made and the first system loaded."""
    gold = tmp_path / "test.conll"
    gold.write_text("Paris B-LOC\n", encoding="utf8")
    for args, said in (([gold, gold, "--system", f"a={tmp_path / 'typo_run'}"], f"none of the systems exists (a: {tmp_path / 'typo_run'}"),
                       ([tmp_path / "missing.conll", gold, "--system", f"a={trained_dir}"], "missing.conll does not exist")):
        result, output = run(["benchmark-report", args[0], args[1], tmp_path / "out", *args[2:]])
        assert result.exit_code == 1 and said in output, output
        assert not (tmp_path / "out").exists()


def test_measure_names_a_program_that_cannot_be_run(tmp_path) -> None:
    """measure -- nonexistentcmd ended in Popen's FileNotFoundError traceback."""
    result, output = run(["measure", tmp_path / "m.json", "--", "no-such-program-here", "x"])
    assert result.exit_code == 127 and "measure: no-such-program-here can't be run" in output, output
    assert not (tmp_path / "m.json").exists()
