"""`train-teachers` and `train-students`: one training per seed, side by side (spacy_maral.workflow.per_seed)."""
import json
from pathlib import Path

import pytest
from spacy.tokens import DocBin
from thinc.api import Config

from helpers import REPO, build_nlp, make_examples
from spacy_maral.inference.pseudo_label import head_fingerprint
from spacy_maral.pipeline.loading import load_pipeline
from spacy_maral.pipeline.maral_ner import find_maral_ner
from spacy_maral.training.run_summary import summary_models
from spacy_maral.workflow.measured import read_measurement
from spacy_maral.workflow.per_seed import run_command, train_per_seed


@pytest.fixture(scope="module")
def setup(tiny_encoder, tmp_path_factory):
    """configs/source.cfg on the tiny encoder (not interpolated: --paths.* overrides work) and a tiny corpus."""
    work = tmp_path_factory.mktemp("teachers")
    corpus = work / "train.spacy"
    DocBin(docs=[eg.reference for eg in make_examples(build_nlp(tiny_encoder))]).to_disk(corpus)
    config = Config().from_disk(REPO / "configs" / "source.cfg", interpolate=False)
    config["paths"].update({"train": str(corpus), "dev": str(corpus), "encoder": str(tiny_encoder)})
    config["components"]["transformer"]["model"]["encoder"]["get_spans"].update({"window": 32, "stride": 24})
    config["components"]["maral_ner"]["model"].update({"hidden_width": 32, "projection_dim": 16})
    config["training"].update({"max_steps": 6, "eval_frequency": 3})
    config["training"]["optimizer"]["learn_rate"].update({"warmup_steps": 2})
    config.to_disk(work / "source.cfg")
    return work, work / "source.cfg"


@pytest.mark.slow
def test_two_seeds_side_by_side_then_kept(setup, tmp_path) -> None:
    _, config = setup
    lines = []
    summary = train_per_seed(config, tmp_path / "t", [0, 1], ["--training.max_steps", "4"], report=lines.append)
    assert sorted(summary) == ["0", "1"] and not any(e["kept"] for e in summary.values())
    heads = [head_fingerprint(find_maral_ner(load_pipeline(summary[s]["model"], precision="fp32"))) for s in ("0", "1")]
    assert heads[0] != heads[1], "the two seeds trained the same teacher"
    command = " ".join(json.loads((tmp_path / "t" / "teacher-s1" / "timing.json").read_text(encoding="utf8"))["command"])
    assert "--system.seed 1" in command and "--training.max_steps 4" in command
    assert "Saving to output directory" in (tmp_path / "t" / "teacher-s1" / "train.log").read_text(encoding="utf8")
    written = json.loads((tmp_path / "t" / "teachers.json").read_text(encoding="utf8"))
    assert written["teachers"]["1"]["model"].endswith("teacher-s1/model-best")
    model = tmp_path / "t" / "teacher-s0" / "model-best" / "meta.json"
    before = model.stat().st_mtime_ns
    again = train_per_seed(config, tmp_path / "t", [0, 1], ["--training.max_steps", "4"], report=lines.append)
    assert all(e["kept"] for e in again.values()) and model.stat().st_mtime_ns == before
    assert any("teacher-s1: kept" in line for line in lines)
    changed = train_per_seed(config, tmp_path / "t", [0], ["--training.max_steps", "5"], report=lines.append)
    assert not changed["0"]["kept"] and model.stat().st_mtime_ns != before
    assert any("teacher-s0: trained earlier with other settings" in line for line in lines)


@pytest.mark.slow
def test_a_failed_teacher_is_named_with_its_log(setup, tmp_path) -> None:
    _, config = setup
    with pytest.raises(RuntimeError, match=r"teacher-s3 failed, see .*teacher-s3/train.log"):
        train_per_seed(config, tmp_path / "t", [3], ["--paths.encoder", str(tmp_path / "missing")], report=lambda _: None)
    assert not (tmp_path / "t" / "teachers.json").exists() and not (tmp_path / "t" / "teacher-s3" / "timing.json").exists()


def test_settings_refused_before_any_work(setup, tmp_path) -> None:
    _, config = setup
    with pytest.raises(ValueError, match="--system.seed is set for each teacher"):
        train_per_seed(config, tmp_path / "t", [0], ["--system.seed", "4"])
    with pytest.raises(ValueError, match="distinct seeds"):
        train_per_seed(config, tmp_path / "t", [1, 1])
    with pytest.raises(ValueError, match="does not exist"):
        train_per_seed(tmp_path / "nope.cfg", tmp_path / "t", [0])
    assert not (tmp_path / "t").exists()


def test_a_corpus_not_given_or_missing_is_refused_before_any_training(setup, tmp_path) -> None:
    """train-teachers without --paths.train ran every teacher into spaCy's own error, a
    traceback each after their imports (40 s)."""
    _, config = setup
    with pytest.raises(ValueError, match=r"no --paths.train: the config .* reads it as corpora.train.path and sets none"):
        train_per_seed(config, tmp_path / "t", [0, 1], ["--paths.train", "null"])
    with pytest.raises(ValueError, match=r"--paths.dev .*missing.spacy does not exist \(read as the config's corpora.dev.path\)"):
        train_per_seed(config, tmp_path / "t", [0], ["--paths.dev=" + str(tmp_path / "missing.spacy")])
    with pytest.raises(ValueError, match=r"--corpora.train.path .*gone.spacy does not exist"):  # the setting's own override
        train_per_seed(config, tmp_path / "t", [0], ["--corpora.train.path", str(tmp_path / "gone.spacy")])
    assert not (tmp_path / "t").exists()
    from spacy_maral.workflow.per_seed import check_corpus_paths

    corpus = tmp_path / "c.spacy"
    corpus.write_bytes(b"")
    check_corpus_paths(config, ["--paths.train", f'"{corpus}"'])  # a JSON string, as spaCy reads it
    check_corpus_paths(config, ["--paths.train", "${paths.dev}"])  # a variable of a variable: left to spaCy
    check_corpus_paths(config, ["--paths.train", "null", "--training.train_corpus", "corpora.dev"])  # not loaded
    adapt = REPO / "configs" / "adapt.cfg"  # a student reads its source and target corpora by their own names
    with pytest.raises(ValueError, match="no --paths.source: .* corpora.train.source"):
        train_per_seed(adapt, tmp_path / "s", [100], [], role="student")
    from typer.testing import CliRunner

    from spacy_maral.cli import app

    result = CliRunner().invoke(app, ["train-teachers", str(REPO / "configs" / "source.cfg"), str(tmp_path / "t"), "--seeds", "0"])
    assert result.exit_code == 2 and "no --paths.train" in result.output and not (tmp_path / "t").exists()


def test_train_teachers_command_errors(setup, tmp_path) -> None:
    from typer.testing import CliRunner

    from spacy_maral.cli import app

    _, config = setup
    reserved = CliRunner().invoke(app, ["train-teachers", str(config), str(tmp_path / "t"), "--seeds", "0", "--output", "x"])
    assert reserved.exit_code == 2 and "--output is set for each teacher" in reserved.output
    bad = CliRunner().invoke(app, ["train-teachers", str(config), str(tmp_path / "t"), "--seeds", "0,one"])
    assert bad.exit_code == 2 and "0,one" in bad.output
    twice = CliRunner().invoke(app, ["train-teachers", str(config), str(tmp_path / "t"), "--seeds", "1,2", "--teacher-seed", "2"])
    assert twice.exit_code == 2 and "counted twice" in " ".join(twice.output.split())
    assert not (tmp_path / "t").exists()


def test_each_run_gets_its_folder_and_seed(setup, tmp_path) -> None:
    """The command of seed 7: measure's timing.json in teacher-s7, then spacy train with
    that folder, --system.seed 7 and the overrides last (a student: its own files too)."""
    _, config = setup
    out = tmp_path / "t"
    folder = out / "teacher-s7"
    assert run_command(config, out, 7, ["--training.max_steps", "4"]) == [
        "python", "-m", "spacy_maral.bench", "measure", str(folder / "timing.json"), "--",
        "python", "-m", "spacy", "train", str(config), "--output", str(folder), "--system.seed", "7",
        "--training.max_steps", "4",
    ]
    student = run_command(config, out, 100, [], role="student")
    assert student[student.index("--system.seed") + 1] == "100"
    assert student[student.index("--paths.checkpoint") + 1] == str(out / "student-s100" / "checkpoint")


def _measured(folder, command) -> None:
    """Write the timing.json `spacy_maral.bench measure` leaves in a run's folder."""
    (folder / "timing.json").write_text(json.dumps({"command": command, "wall_s": 1.5, "peak_rss_gb": 0.2}), encoding="utf8")


def test_measures_record_is_read_or_named(tmp_path) -> None:
    """A run's timing.json is read in one place: absent is None, a damaged one is named."""
    assert read_measurement(tmp_path / "timing.json") is None
    _measured(tmp_path, ["python", "-m", "spacy", "train"])
    assert read_measurement(tmp_path / "timing.json") == {"command": ["python", "-m", "spacy", "train"], "wall_s": 1.5, "peak_rss_gb": 0.2}
    for damaged in ('{"command": ["python"]', '[1]', '{"command": "python", "wall_s": 1, "peak_rss_gb": 1}',
                    '{"command": [], "wall_s": "1", "peak_rss_gb": 1}', '{"command": [], "wall_s": 1}'):
        (tmp_path / "timing.json").write_text(damaged, encoding="utf8")
        with pytest.raises(ValueError, match="timing.json is not the record of `spacy_maral.bench measure`"):
            read_measurement(tmp_path / "timing.json")


def test_a_run_is_kept_only_with_its_recorded_arguments(setup, tmp_path) -> None:
    """A folder with model-best, a timing.json recording the same spacy train arguments
    and an inputs.json of the same inputs is finished; other overrides, another seed's
    command, no model, or a config or corpus whose bytes changed since are not."""
    from spacy_maral.workflow.per_seed import INPUTS, _finished, run_inputs

    config = tmp_path / "source.cfg"  # a copy: its bytes change below
    config.write_bytes(setup[1].read_bytes())
    out = tmp_path / "t"
    folder = out / "teacher-s3"
    (folder / "model-best").mkdir(parents=True)
    corpus = tmp_path / "extra.spacy"
    corpus.write_bytes(b"one")
    args = ["--training.max_steps", "4", f"--paths.extra={corpus}"]
    inputs = run_inputs(config, args)
    assert sorted(inputs) == sorted([str(config), str(corpus)])
    (folder / INPUTS).write_text(json.dumps(inputs), encoding="utf8")
    command = run_command(config, out, 3, args)
    train = command[command.index("--") + 1:]
    _measured(folder, ["/usr/bin/python3", *train[1:]])
    assert _finished(config, out, 3, args, "teacher", run_inputs(config, args))
    assert not _finished(config, out, 3, ["--training.max_steps", "5", f"--paths.extra={corpus}"], "teacher", inputs)
    corpus.write_bytes(b"one")  # the same bytes again (a newer mtime): the same input
    assert _finished(config, out, 3, args, "teacher", run_inputs(config, args))
    corpus.write_bytes(b"two")  # the corpus changed at the same path: trained again
    assert not _finished(config, out, 3, args, "teacher", run_inputs(config, args))
    corpus.write_bytes(b"one")
    config.write_text(config.read_text(encoding="utf8") + "\n", encoding="utf8")  # the config's bytes changed
    assert not _finished(config, out, 3, args, "teacher", run_inputs(config, args))
    config.write_text(config.read_text(encoding="utf8")[:-1], encoding="utf8")
    assert _finished(config, out, 3, args, "teacher", run_inputs(config, args))
    (folder / INPUTS).unlink()  # trained by a version that recorded no inputs
    assert not _finished(config, out, 3, args, "teacher", inputs)
    (folder / INPUTS).write_text(json.dumps(inputs), encoding="utf8")
    other = run_command(config, out, 4, args)
    _measured(folder, ["python", *other[other.index("--") + 2:]])
    assert not _finished(config, out, 3, args, "teacher", inputs)
    _measured(folder, ["python", *train[1:]])
    assert _finished(config, out, 3, args, "teacher", inputs)
    (folder / "timing.json").write_text('{"command": ["python"', encoding="utf8")  # cut short: trained again
    assert not _finished(config, out, 3, args, "teacher", inputs)
    _measured(folder, ["python", *train[1:]])
    (folder / "model-best").rmdir()
    assert not _finished(config, out, 3, args, "teacher", inputs)


def test_a_folder_of_inputs_counts_by_what_it_made_not_by_its_run_records(setup, tmp_path) -> None:
    """`--paths.target corpus/de-pseudo` (the `--x y` form of project.yml): its shards
    count; its lock, summary and an encoder's build record, which a rerun that keeps
    everything rewrites, do not."""
    from spacy_maral.workflow.per_seed import run_inputs

    _, config = setup
    pseudo = tmp_path / "de-pseudo"
    pseudo.mkdir()
    for name, text in (("shard-00000.spacy", "labels"), ("_lock", "123\n"), ("summary.json", '{"shards_kept": 0}'),
                       ("build_info.json", '{"build_seconds": 30}')):
        (pseudo / name).write_text(text, encoding="utf8")
    args = ["--paths.target", str(pseudo), "--training.max_steps", "4"]
    first = run_inputs(config, args)
    assert sorted(first) == sorted([str(config), str(pseudo)])
    (pseudo / "_lock").write_text("456\n", encoding="utf8")
    (pseudo / "summary.json").write_text('{"shards_kept": 1}', encoding="utf8")
    (pseudo / "build_info.json").write_text('{"build_seconds": 31}', encoding="utf8")
    assert run_inputs(config, args) == first
    (pseudo / "shard-00000.spacy").write_text("other labels", encoding="utf8")
    assert run_inputs(config, args) != first


def test_no_seeds_writes_an_empty_ensemble(setup, tmp_path) -> None:
    _, config = setup
    assert train_per_seed(config, tmp_path / "t", []) == {}
    assert summary_models(tmp_path / "t" / "teachers.json") == []
    (tmp_path / "bad.json").write_text("[1, 2]", encoding="utf8")
    with pytest.raises(ValueError, match="bad.json is not the summary of train-teachers or train-students"):
        summary_models(tmp_path / "bad.json")


def test_students_summary_and_refusals(setup, tmp_path) -> None:
    """A student's run is used at model-last, listed in students.json; it writes its own
    log, diagnostics and checkpoint in its run folder, so an override of one of them is
    refused before any work (for a teacher, which writes none, too)."""
    _, config = setup
    assert train_per_seed(config, tmp_path / "s", [], role="student") == {}
    written = json.loads((tmp_path / "s" / "students.json").read_text(encoding="utf8"))
    assert written["students"] == {} and summary_models(tmp_path / "s" / "students.json") == []
    (tmp_path / "s" / "students.json").write_text(json.dumps({"students": {"100": {"model": "x/student-s100/model-last"}}}))
    assert summary_models(tmp_path / "s" / "students.json") == ["x/student-s100/model-last"]
    for name, file in (("--paths.checkpoint", "checkpoint"), ("--paths.log", "log.jsonl"), ("--paths.diagnostics", "diagnostics.jsonl"),
                       ("--paths.snapshots", "snapshots")):
        with pytest.raises(ValueError, match=f"{name} is set for each student by train-students \\(OUTPUT_DIR/student-sSEED/{file}\\)"):
            train_per_seed(config, tmp_path / "n", [100], [name, "x"], role="student")
        with pytest.raises(ValueError, match=f"{name} would be one file for every teacher"):
            train_per_seed(config, tmp_path / "n", [1], [f"{name}=x"])
        student = run_command(config, tmp_path / "n", 100, ["--training.max_steps", "8"], role="student")
        assert student[student.index(name) + 1] == str(tmp_path / "n" / "student-s100" / file)
        assert student[-2:] == ["--training.max_steps", "8"]
        assert name not in run_command(config, tmp_path / "n", 1, [])
    with pytest.raises(ValueError, match="role 'pupil'"):
        train_per_seed(config, tmp_path / "n", [100], role="pupil")
    assert not (tmp_path / "n").exists()


def _fake_trainings(seen):
    """run_parallel in place of real trainings: each command's run records what its
    folder held when it started, then leaves what a finished student run leaves."""
    import shlex

    def run(commands, jobs, threads, logs, status_every_s):
        for line in commands:
            argv = shlex.split(line)
            folder = Path(argv[argv.index("--output") + 1])
            seen.append({name: (folder / name).exists() for name in ("checkpoint", ".checkpoint.old", "snapshots")})
            (folder / "model-last").mkdir(parents=True, exist_ok=True)
            (folder / "checkpoint").mkdir(exist_ok=True)
            (folder / "checkpoint" / "checkpoint-complete").write_text("ok\n", encoding="utf8")
            (folder / "snapshots" / "step-000100").mkdir(parents=True, exist_ok=True)
            (folder / "log.jsonl").write_text('{"step": 100}\n', encoding="utf8")
            train = argv[argv.index("--") + 1:]
            _measured(folder, ["python", *train[1:]])
        return []

    return run


def test_a_student_trained_again_starts_afresh_unless_it_resumes(setup, tmp_path, monkeypatch) -> None:
    """A student trained again (other settings or inputs) does not load the checkpoint or
    keep the snapshots of its earlier training; one stopped before it finished and started
    again with the same command resumes from its checkpoint."""
    import spacy_maral.workflow.per_seed as per_seed

    _, config = setup
    seen, lines = [], []
    monkeypatch.setattr(per_seed, "run_parallel", _fake_trainings(seen))
    out, folder = tmp_path / "s", tmp_path / "s" / "student-s0"
    args = ["--training.max_steps", "4"]
    train_per_seed(config, out, [0], args, role="student", report=lines.append)
    assert seen[-1] == {"checkpoint": False, ".checkpoint.old": False, "snapshots": False}
    train_per_seed(config, out, [0], args, role="student", report=lines.append)
    assert len(seen) == 1  # kept
    (folder / ".checkpoint.old").mkdir()  # what a kill inside the checkpoint's swap leaves
    train_per_seed(config, out, [0], ["--training.max_steps", "5"], role="student", report=lines.append)
    assert seen[-1] == {"checkpoint": False, ".checkpoint.old": False, "snapshots": False}
    (folder / "timing.json").unlink()  # stopped before it finished: started again the same way, it resumes
    train_per_seed(config, out, [0], ["--training.max_steps", "5"], role="student", report=lines.append)
    assert seen[-1] == {"checkpoint": True, ".checkpoint.old": False, "snapshots": True}
    assert "student-s0: stopped earlier before it finished; resuming from its checkpoint" in lines
    (folder / "timing.json").unlink()  # stopped, then started with other settings: afresh
    train_per_seed(config, out, [0], args, role="student", report=lines.append)
    assert seen[-1] == {"checkpoint": False, ".checkpoint.old": False, "snapshots": False}
    assert json.loads((out / "students.json").read_text(encoding="utf8"))["students"]["0"]["model"] == str(folder / "model-last")
