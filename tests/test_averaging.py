"""Weight averaging (training/averaging.py, `spacy_maral average`) and the epoch hook's snapshots."""
import numpy
import pytest
import spacy
import torch
from thinc.api import Config

from helpers import encoder_parameters, predictions, run_cli
from spacy_maral.ml.span_ner import copy_span_ner_weights, get_span_head
from spacy_maral.training.averaging import average_pipelines
from spacy_maral.training.callbacks import make_epoch_hook

TEXTS = ["Angela Merkel besuchte Paris .", "Siemens baut in Berlin ."]


def head_of(nlp):
    return get_span_head(nlp.get_pipe("maral_ner").model)


@pytest.fixture(scope="module")
def two_checkpoints(trained_dir, tmp_path_factory):
    """The trained tiny pipeline (A) and a copy whose span head and one encoder layer were
    moved by known amounts, whose class statistics differ and whose saved settings differ
    (B: another training seed in its config.cfg), so a test can tell whose settings an
    average kept."""
    work = tmp_path_factory.mktemp("average")
    nlp = spacy.load(trained_dir)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        head = head_of(nlp)
        head.projection[0].weight.add_(torch.randn(head.projection[0].weight.shape, generator=generator))
        head.prev_mean.mul_(0.5)
        layer = next(p for name, p in encoder_parameters(nlp).items() if name.endswith("attention.self.query.weight"))
        layer.add_(1.0)
    nlp.to_disk(work / "b")
    config = Config().from_disk(work / "b" / "config.cfg", interpolate=False)
    config["training"]["seed"] = nlp.config["training"]["seed"] + 1
    config.to_disk(work / "b" / "config.cfg")
    assert (work / "b" / "config.cfg").read_text(encoding="utf8") != (trained_dir / "config.cfg").read_text(encoding="utf8")
    return trained_dir, work / "b"


def test_average_is_the_elementwise_mean(two_checkpoints) -> None:
    a_dir, b_dir = two_checkpoints
    a, b = spacy.load(a_dir), spacy.load(b_dir)
    averaged = average_pipelines([a_dir, b_dir])
    wa, wb = head_of(a).projection[0].weight, head_of(b).projection[0].weight
    assert not torch.equal(wa, wb)
    torch.testing.assert_close(head_of(averaged).projection[0].weight, (wa + wb) / 2, rtol=0, atol=1e-6)
    # the encoder: the moved layer is the mean (A + 0.5), the others are A's, bit for bit
    enc_a, enc_avg = encoder_parameters(a), encoder_parameters(averaged)
    for name, value in enc_avg.items():
        if name.endswith("attention.self.query.weight") and name == next(
            n for n in enc_a if n.endswith("attention.self.query.weight")
        ):
            torch.testing.assert_close(value, enc_a[name] + 0.5, rtol=0, atol=1e-6)
        else:
            assert torch.equal(value, enc_a[name]), name
    # the class means (the classifier) are the mean of the inputs' class means, as a
    # finished epoch leaves them (no running means)
    expected = (head_of(a).class_means() + head_of(b).class_means()) / 2
    assert not torch.allclose(head_of(a).class_means(), head_of(b).class_means())
    torch.testing.assert_close(head_of(averaged).class_means(), expected, rtol=0, atol=1e-12)
    assert float(head_of(averaged).cur_count.sum()) == 0.0


def test_weighted_average_interpolates_the_weights_and_class_means(two_checkpoints) -> None:
    """--weights 1,3 (normalized: 0.25 of A, 0.75 of B, the last): every weight and the
    class means are 0.25 A + 0.75 B; the moved encoder layer is A + 0.75."""
    a_dir, b_dir = two_checkpoints
    a, b = spacy.load(a_dir), spacy.load(b_dir)
    mixed = average_pipelines([a_dir, b_dir], weights=[1.0, 3.0])
    wa, wb = head_of(a).projection[0].weight, head_of(b).projection[0].weight
    torch.testing.assert_close(head_of(mixed).projection[0].weight, 0.25 * wa + 0.75 * wb, rtol=0, atol=1e-6)
    name = next(n for n in encoder_parameters(a) if n.endswith("attention.self.query.weight"))
    torch.testing.assert_close(encoder_parameters(mixed)[name], encoder_parameters(a)[name] + 0.75, rtol=0, atol=1e-6)
    expected = 0.25 * head_of(a).class_means() + 0.75 * head_of(b).class_means()
    torch.testing.assert_close(head_of(mixed).class_means(), expected, rtol=0, atol=1e-12)
    # a weight of 0 leaves that pipeline out
    alone = average_pipelines([a_dir, b_dir], weights=[0.0, 1.0])
    assert torch.equal(head_of(alone).projection[0].weight, wb)
    for bad in ([1.0], [0.0, 0.0], [-1.0, 2.0], [1.0, float("nan")], [1.0, float("inf")]):
        with pytest.raises(ValueError, match="one finite weight >= 0 per pipeline"):
            average_pipelines([a_dir, b_dir], weights=bad)


def test_averaging_one_pipeline_with_itself_changes_nothing(trained_dir) -> None:
    before = spacy.load(trained_dir)
    averaged = average_pipelines([trained_dir, trained_dir, trained_dir])
    for name, value in encoder_parameters(averaged).items():
        assert torch.equal(value, encoder_parameters(before)[name]), name
    for (name, value), (_, old) in zip(head_of(averaged).named_parameters(), head_of(before).named_parameters()):
        assert torch.equal(value, old), name
    torch.testing.assert_close(head_of(averaged).class_means(), head_of(before).class_means(), rtol=0, atol=1e-12)
    assert predictions(averaged, TEXTS) == predictions(before, TEXTS)


def test_average_refuses_other_labels(trained_dir, tmp_path) -> None:
    nlp = spacy.load(trained_dir)
    ner = nlp.get_pipe("maral_ner")
    trained_classes = ner.classes
    ner.cfg["labels"] = list(reversed(ner.cfg["labels"]))  # the same model, its classes in another order
    copy_span_ner_weights(ner.model, ner.classes, spacy.load(trained_dir).get_pipe("maral_ner").model, trained_classes)
    nlp.to_disk(tmp_path / "other")
    with pytest.raises(ValueError, match="labels of"):
        average_pipelines([tmp_path / "other", trained_dir])


def run_average(cmd):
    """Run `python -m spacy_maral average` with the arguments `cmd` (after `average`)."""
    return run_cli("average", *cmd)


def assert_mean_of_two(out_dir, a_dir, b_dir, settings_dir) -> None:
    """out_dir's head weight is the mean of a_dir's and b_dir's; its config.cfg is
    settings_dir's (the input that gives the settings), the runtime section included."""
    expected = (head_of(spacy.load(a_dir)).projection[0].weight + head_of(spacy.load(b_dir)).projection[0].weight) / 2
    torch.testing.assert_close(head_of(spacy.load(out_dir)).projection[0].weight, expected, rtol=0, atol=1e-6)
    assert (out_dir / "config.cfg").read_text(encoding="utf8") == (settings_dir / "config.cfg").read_text(encoding="utf8")


def test_average_cli_writes_and_never_replaces_a_users_folder(two_checkpoints, tmp_path) -> None:
    a_dir, b_dir = two_checkpoints
    cmd = [str(a_dir), str(b_dir), "-o"]
    out = tmp_path / "avg"
    proc = run_average(cmd + [str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[2/2] loading" in proc.stdout
    assert_mean_of_two(out, a_dir, b_dir, settings_dir=b_dir)  # the settings are the last input's
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf8")
    proc = run_average(cmd + [str(mine)])
    assert proc.returncode == 1 and "not empty" in proc.stderr  # errors go to stderr
    assert (mine / "notes.txt").read_text(encoding="utf8") == "keep me"
    proc = run_average(cmd[:-2] + [str(tmp_path / "nothing"), "-o", str(tmp_path / "x")])
    assert proc.returncode == 1 and "nothing" in proc.stderr and "no config.cfg" in proc.stderr


def test_average_cli_runs_of_a_summary_come_first(two_checkpoints, tmp_path) -> None:
    """--runs STUDENTS_JSON adds the listed runs before INPUTS (INPUTS' last gives the
    settings); a summary that lists none leaves one input, copied (a soup that is off);
    a file that is not a summary is named."""
    import json

    a_dir, b_dir = two_checkpoints
    summary = tmp_path / "students.json"
    summary.write_text(json.dumps({"students": {"100": {"model": str(b_dir)}}}), encoding="utf8")
    cmd = [str(a_dir), "--runs", str(summary), "-o", str(tmp_path / "soup")]
    proc = run_average(cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 run(s) listed" in proc.stdout and "[2/2] loading" in proc.stdout
    assert_mean_of_two(tmp_path / "soup", a_dir, b_dir, settings_dir=a_dir)  # INPUTS' last
    summary.write_text(json.dumps({"students": {}}), encoding="utf8")
    cmd[-1] = str(tmp_path / "alone")
    proc = run_average(cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    alone = spacy.load(tmp_path / "alone")
    torch.testing.assert_close(head_of(alone).projection[0].weight, head_of(spacy.load(a_dir)).projection[0].weight, rtol=0, atol=0)
    assert predictions(alone, TEXTS) == predictions(spacy.load(a_dir), TEXTS)
    summary.write_text("[]", encoding="utf8")
    proc = run_average(cmd[:-1] + [str(tmp_path / "bad")])
    assert proc.returncode == 1 and "students.json is not the summary of train-teachers" in " ".join(proc.stderr.split())


def test_average_cli_runs_alone(two_checkpoints, tmp_path) -> None:
    """--runs without INPUTS: the mean of the listed runs, the settings of the last one
    listed (the workflow's soup step); a summary that lists none is an error, not an
    empty pipeline."""
    import json

    a_dir, b_dir = two_checkpoints
    summary = tmp_path / "students.json"
    summary.write_text(json.dumps({"students": {"100": {"model": str(b_dir)}, "0": {"model": str(a_dir)}}}), encoding="utf8")
    proc = run_average(["--runs", str(summary), "-o", str(tmp_path / "soup")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_mean_of_two(tmp_path / "soup", a_dir, b_dir, settings_dir=a_dir)  # the last listed
    summary.write_text(json.dumps({"students": {}}), encoding="utf8")
    proc = run_average(["--runs", str(summary), "-o", str(tmp_path / "none")])
    assert proc.returncode == 1 and "no pipelines to average" in proc.stderr
    assert not (tmp_path / "none").exists()


def test_epoch_hook_writes_snapshots_every_n_steps(trained, tmp_path) -> None:
    hook = make_epoch_hook(snapshot_dir=str(tmp_path / "snaps"), snapshot_every=2)
    for step in range(6):
        hook(trained.nlp, {"step": step, "epoch": 0})
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == ["step-000002", "step-000004"]
    loaded = spacy.load(tmp_path / "snaps" / "step-000004")
    numpy.testing.assert_array_equal(
        head_of(loaded).projection[0].weight.detach().numpy(), head_of(trained.nlp).projection[0].weight.detach().numpy()
    )
    with pytest.raises(ValueError, match="snapshot_dir"):
        make_epoch_hook(snapshot_every=2)
    (tmp_path / "a-file").write_text("mine", encoding="utf8")  # refused when the hook is made, not at its first save
    for where in ({"checkpoint_dir": str(tmp_path / "a-file"), "checkpoint_every": 2},
                  {"snapshot_dir": str(tmp_path / "a-file"), "snapshot_every": 2}):
        with pytest.raises(ValueError, match="a-file is a file, not a folder"):
            make_epoch_hook(**where)
    assert (tmp_path / "a-file").read_text(encoding="utf8") == "mine"
    # the command averages the snapshots from a step on, then the inputs: step 4's
    # weights are moved here, so the mean shows which snapshots it took
    step2, step4 = tmp_path / "snaps" / "step-000002", tmp_path / "snaps" / "step-000004"
    moved = spacy.load(step4)
    with torch.no_grad():
        head_of(moved).projection[0].weight.add_(1.0)
    moved.to_disk(step4)
    out = tmp_path / "avg"
    proc = run_average(["--snapshots", str(tmp_path / "snaps"), "--from-step", "3", str(step2), "-o", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 snapshot(s)" in proc.stdout and "[2/2] loading" in proc.stdout
    assert_mean_of_two(out, step4, step2, settings_dir=step2)
    # --from-step is inclusive: from step 4, step 4 alone is the snapshot
    proc = run_average(["--snapshots", str(tmp_path / "snaps"), "--from-step", "4", "-o", str(tmp_path / "from4")])
    assert proc.returncode == 0 and "1 snapshot(s)" in proc.stdout, proc.stdout + proc.stderr
    torch.testing.assert_close(head_of(spacy.load(tmp_path / "from4")).projection[0].weight,
                               head_of(moved).projection[0].weight, rtol=0, atol=1e-6)


def test_snapshots_from_picks_steps_in_order(tmp_path) -> None:
    from spacy_maral.training.snapshots import snapshots_from

    for step in (300, 100, 1000, 200):
        (tmp_path / f"step-{step:06d}").mkdir()
    (tmp_path / "step-000400.tmp").mkdir()  # not a snapshot
    (tmp_path / ".step-000500.tmp-x").mkdir()  # a temporary of replace_dir
    assert [p.name for p in snapshots_from(tmp_path)] == ["step-000100", "step-000200", "step-000300", "step-001000"]
    assert [p.name for p in snapshots_from(tmp_path, 250)] == ["step-000300", "step-001000"]
    assert [p.name for p in snapshots_from(tmp_path, 300)] == ["step-000300", "step-001000"]  # inclusive
    assert [p.name for p in snapshots_from(tmp_path, 1001)] == []
    assert snapshots_from(tmp_path / "missing") == []
    (tmp_path / "file").write_text("x", encoding="utf8")
    with pytest.raises(ValueError, match="is a file"):
        snapshots_from(tmp_path / "file")


def test_run_cli_raises_what_a_command_does_not_turn_into_an_exit_status(monkeypatch, tmp_path) -> None:
    """The in-process runner of the CLI tests: a crash inside `average` (a traceback in a
    real process) reaches the test as the exception, never as a refusal with status 1;
    a refusal the command makes itself is its status and its stderr."""
    import spacy_maral.training.averaging as averaging

    def crash(*args, **kwargs):
        raise RuntimeError("crashed inside average")

    monkeypatch.setattr(averaging, "average_pipelines", crash)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.cfg").write_text("", encoding="utf8")
    with pytest.raises(RuntimeError, match="crashed inside average"):
        run_cli("average", tmp_path / "a", "-o", tmp_path / "out")
    refused = run_cli("average", tmp_path / "nothing", "-o", tmp_path / "out")
    assert refused.returncode == 1 and "no config.cfg" in refused.stderr and refused.stdout == ""
