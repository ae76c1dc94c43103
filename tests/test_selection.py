"""A student's checkpoint: the snapshot with the highest source dev F1 (raw text), or for
a student of the development language the highest F1 on that language's dev set,
model-last included, the later one on a tie."""
import json
import shutil
from pathlib import Path

import pytest
from spacy.tokens import DocBin

from helpers import run_cli
from spacy_maral.training.run_summary import summary_models
from spacy_maral.training.selection import SelectionDev, checkpoint_candidates, select_checkpoint, select_runs, selection_dev


def _run_folder(root, snapshot_steps, last=True):
    for step in snapshot_steps:
        (root / "snapshots" / f"step-{step:06d}").mkdir(parents=True)
    if last:
        (root / "model-last").mkdir(parents=True)
    return root


def test_candidates_are_the_snapshots_in_step_order_then_model_last(tmp_path) -> None:
    run = _run_folder(tmp_path / "student-s0", [200, 100, 1000])
    (run / "snapshots" / "notes.txt").write_text("not a snapshot")
    (run / "snapshots" / "step-00010\u00b2").mkdir()  # digits that are no ASCII number: not a snapshot
    names = [p.name for p in checkpoint_candidates(run, skip_first=0.0)]
    assert names == ["step-000100", "step-000200", "step-001000", "model-last"]
    assert [p.name for p in checkpoint_candidates(_run_folder(tmp_path / "plain", []))] == ["model-last"]


def test_the_snapshots_of_the_first_half_of_training_are_not_candidates(tmp_path) -> None:
    run = _run_folder(tmp_path / "student-s0", [700, 100, 400, 500, 800, 200, 300, 600])
    names = [p.name for p in checkpoint_candidates(run)]  # the default: the first half left out
    assert names == ["step-000500", "step-000600", "step-000700", "step-000800", "model-last"]
    assert [p.name for p in checkpoint_candidates(run, skip_first=0.25)][:2] == ["step-000300", "step-000400"]
    # by step, not by position: of steps 100, 200 and 1000, half of 1000 leaves only 1000
    uneven = _run_folder(tmp_path / "uneven", [100, 200, 1000])
    assert [p.name for p in checkpoint_candidates(uneven)] == ["step-001000", "model-last"]
    # compared exactly: 0.29 of step 100 is 29, so step 29 is left out (29 > 28.999... in floats)
    exact = _run_folder(tmp_path / "exact", [29, 30, 100])
    assert [p.name for p in checkpoint_candidates(exact, skip_first=0.29)] == ["step-000030", "step-000100", "model-last"]
    # the last snapshot is always a candidate, and model-last after it
    one = _run_folder(tmp_path / "one", [100])
    assert [p.name for p in checkpoint_candidates(one, skip_first=0.9)] == ["step-000100", "model-last"]
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="skip_first must be in"):
            checkpoint_candidates(run, skip_first=bad)


def test_a_run_without_model_last_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="has no model-last"):
        checkpoint_candidates(_run_folder(tmp_path / "student-s0", [100], last=False))


def test_the_highest_dev_f1_wins_and_a_tie_goes_to_the_later(tmp_path) -> None:
    paths = [tmp_path / n for n in ("step-000100", "step-000200", "step-000300", "model-last")]
    scores = dict(zip(paths, [80.0, 91.5, 91.5, 90.0]))
    best, scored = select_checkpoint(paths, scores.__getitem__)
    assert best.name == "step-000300" and best.dev_f == 91.5
    assert [c.name for c in scored] == [p.name for p in paths]
    best, _ = select_checkpoint(paths, dict(zip(paths, [95.0, 91.5, 91.5, 90.0])).__getitem__)
    assert best.name == "step-000100"
    best, _ = select_checkpoint(paths, dict(zip(paths, [90.0, 90.0, 90.0, 90.0])).__getitem__)
    assert best.name == "model-last"
    with pytest.raises(ValueError, match="no checkpoints"):
        select_checkpoint([], scores.__getitem__)


def test_the_picks_are_a_summary_average_reads(tmp_path) -> None:
    runs = {seed: _run_folder(tmp_path / f"student-s{seed}", [100, 200]) for seed in (0, 1)}
    summary = tmp_path / "students.json"
    summary.write_text(json.dumps({"config": "adapt.cfg", "students": {
        str(seed): {"model": str(run / "model-last"), "wall_s": 1.0} for seed, run in runs.items()}}))
    # seed 0 is best at step 100, seed 1 at its end
    scores = {runs[0] / "snapshots" / "step-000100": 92.0, runs[0] / "snapshots" / "step-000200": 91.0,
              runs[0] / "model-last": 90.0, runs[1] / "snapshots" / "step-000100": 80.0,
              runs[1] / "snapshots" / "step-000200": 85.0, runs[1] / "model-last": 88.0}
    out = tmp_path / "selected.json"
    picked = select_runs(summary, out, scores.__getitem__, skip_first=0.0)
    assert summary_models(out) == [str(runs[0] / "snapshots" / "step-000100"), str(runs[1] / "model-last")]
    assert picked["0"]["selection"]["skip_first"] == 0.0
    written = json.loads(out.read_text())
    assert written["config"] == "adapt.cfg" and written["students"]["0"]["wall_s"] == 1.0
    assert [c["dev_f"] for c in picked["1"]["selection"]["candidates"]] == [80.0, 85.0, 88.0]
    assert picked["1"]["selection"]["dev"] == "source dev"
    # by default seed 0's step 100, the first half of its training, is not a candidate
    picked = select_runs(summary, out, scores.__getitem__)
    assert summary_models(out) == [str(runs[0] / "snapshots" / "step-000200"), str(runs[1] / "model-last")]
    assert picked["0"]["selection"]["skip_first"] == 0.5
    # a teachers.json is not a summary of students: refused, naming it, before any scoring
    teachers = tmp_path / "teachers.json"
    teachers.write_text(json.dumps({"teachers": {"0": {"model": str(runs[0] / "model-last")}}}))
    with pytest.raises(ValueError, match="teachers.json is not the summary of train-students"):
        select_runs(teachers, out, lambda path: pytest.fail(f"scored {path}"))


@pytest.mark.slow
def test_select_checkpoint_scores_the_pipelines_on_the_source_dev_set(trained, trained_dir, undertrained_dir, tmp_path) -> None:
    """The trained pipeline beats an untrained one of the same architecture on its own
    training sentences, wherever it stands in the run."""
    untrained = undertrained_dir
    dev = tmp_path / "dev.spacy"
    DocBin(docs=[eg.reference for eg in trained.examples]).to_disk(dev)
    for name, snapshot, last, expected in (("early", trained_dir, untrained, "snapshots/step-000100"),
                                           ("late", untrained, trained_dir, "model-last")):
        run = tmp_path / name / "student-s0"
        shutil.copytree(snapshot, run / "snapshots" / "step-000100")
        shutil.copytree(last, run / "model-last")
        summary = tmp_path / name / "students.json"
        summary.write_text(json.dumps({"students": {"0": {"model": str(run / "model-last")}}}))
        out = tmp_path / name / "selected.json"
        result = run_cli("select-checkpoint", summary, dev, "--output", out, "--dev-limit", "0")
        assert result.returncode == 0, result.stderr
        assert summary_models(out) == [str(run / expected)]
        # the same sentences as the development language's dev set: a Spanish run ranks on it
        result = run_cli("select-checkpoint", summary, tmp_path / "missing-en-dev.spacy", "--output", out, "--dev-limit", "0",
                         "--target-lang", "es", "--target-dev", dev, "--target-dev-lang", "es")
        assert result.returncode == 0, result.stderr
        assert summary_models(out) == [str(run / expected)]
        assert json.loads(out.read_text())["students"]["0"]["selection"]["dev"] == "es dev"


def test_the_development_languages_students_are_ranked_on_its_own_dev_set() -> None:
    """The development language's dev set ranks the checkpoints of its students only:
    every other language's (and a run that names no language) are ranked on source dev."""
    source, es_dev = "corpus/en-dev.spacy", "corpus/es-dev.spacy"
    assert selection_dev(source, "en", "es", es_dev, "es") == SelectionDev(Path(es_dev), "es", "es dev")
    for target in ("de", "fi", None):
        assert selection_dev(source, "en", target, es_dev, "es") == SelectionDev(Path(source), "en", "source dev")
    assert selection_dev(source, "en", "es") == SelectionDev(Path(source), "en", "source dev")  # no dev set of its own
    with pytest.raises(ValueError, match="needs its language"):
        selection_dev(source, "en", "es", es_dev, None)


def test_select_checkpoint_reads_the_development_languages_dev_set_before_any_work(tmp_path) -> None:
    """A Spanish run with a missing es dev set is refused, naming it, before a pipeline is
    loaded; a German run of the same command does not read it."""
    summary = tmp_path / "students.json"
    summary.write_text(json.dumps({"students": {"0": {"model": str(tmp_path / "student-s0" / "model-last")}}}))
    source = tmp_path / "en-dev.spacy"
    DocBin().to_disk(source)
    args = ["select-checkpoint", summary, source, "--output", tmp_path / "out.json", "--target-dev", tmp_path / "es-dev.spacy",
            "--target-dev-lang", "es"]
    result = run_cli(*args, "--target-lang", "es")
    assert result.returncode == 1 and "the es dev set" in result.stderr and "es-dev.spacy" in result.stderr, result.stderr
    result = run_cli(*args, "--target-lang", "de")  # source dev ranks: the run folder is what is missing here
    assert result.returncode == 1 and "es-dev.spacy" not in result.stderr and "model-last" in result.stderr, result.stderr


@pytest.mark.parametrize("value", ["1", "-0.1"])
def test_a_skip_first_outside_0_to_1_is_refused_before_any_work(tmp_path, value) -> None:
    result = run_cli("select-checkpoint", tmp_path / "missing.json", tmp_path / "missing.spacy",
                     "--output", tmp_path / "out.json", "--skip-first", value)
    assert result.returncode == 2 and "skip_first must be in [0, 1)" in " ".join(result.stderr.split())


def test_the_workflow_forwards_every_var_of_the_language_workflow() -> None:
    """`languages` runs the `language` workflow with the vars it forwards: a var a
    per-language command reads but `languages` does not forward would keep its default
    whatever the user set (and stay out of the language's fingerprint)."""
    import re

    import srsly

    from helpers import REPO

    project = srsly.read_yaml(REPO / "project" / "project.yml")
    commands = {c["name"]: " ".join(c["script"]) for c in project["commands"]}
    used = {v for name in project["workflows"]["language"] for v in re.findall(r"\$\{vars\.(\w+)\}", commands[name])}
    forwarded = set(re.findall(r"--vars\.(\w+) ", commands["languages"]))
    set_per_language = {"target_lang", "target_text", "target_test", "name"}
    assert used - set_per_language - forwarded == set()
