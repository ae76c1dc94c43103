"""RATE (a decision rule set without target tags) and the guard's fallback: the teacher
interpolated with a distrusted student, shipped before the teacher when it is trusted."""
import json

import numpy
import pytest
import spacy
import torch
from spacy.tokens import DocBin
from thinc.api import Config

from helpers import run_cli
from spacy_maral.adaptation.soft_labels import attach_soft_labels
from spacy_maral.corpora.docbin import bare_copy
from spacy_maral.evaluation.guard import FallbackCheck, GuardReport, GuardThresholds, choose
from spacy_maral.ml.span_ner import get_span_head
from spacy_maral.pipeline.maral_ner import find_maral_ner
from spacy_maral.training.decision_rule import GRID, closest_count, entity_counts, rate_inference_tau
from spacy_maral.training.fallback import build_fallback, check_fallback_weight


@pytest.fixture(scope="module")
def texts(trained):
    return [eg.reference.text for eg in trained.examples]


def pseudo_labelled(nlp, texts, tau):
    """The texts labelled by `nlp` deciding at `tau` (one-hot probabilities), as pseudo-label stores them."""
    ner = find_maral_ner(nlp)
    stored, ner.inference_tau = ner.inference_tau, tau
    try:
        docs = []
        for predicted in nlp.pipe(texts):
            doc = bare_copy(predicted, nlp.vocab)
            probs = numpy.zeros((len(predicted.ents), len(ner.classes)))
            for row, ent in enumerate(predicted.ents):
                probs[row, list(ner.classes).index(ent.label_)] = 1.0
            attach_soft_labels(doc, [(e.start, e.end) for e in predicted.ents], probs, ner.classes)
            docs.append(doc)
        return docs
    finally:
        ner.inference_tau = stored


def test_closest_count_by_hand() -> None:
    counts = {0.0: 10, 0.1: 8, 0.25: 5, 0.5: 3}
    assert closest_count(counts, 6) == 0.25  # |5 - 6| = 1 < |8 - 6| = 2
    assert closest_count(counts, 4) == 0.25  # a tie between 5 and 3: the smaller value
    assert closest_count(counts, 100) == 0.0
    assert closest_count(counts, 0) == 0.5
    with pytest.raises(ValueError):
        closest_count({}, 3)


def test_entity_counts_are_what_the_pipeline_finds_at_each_tau(trained, texts) -> None:
    nlp = trained.nlp
    ner = find_maral_ner(nlp)
    stored = ner.inference_tau
    docs = [nlp.make_doc(t) for t in texts]
    counts = entity_counts(nlp, docs, grid=(0.0, 1.0, 3.0), batch_size=4)
    assert ner.inference_tau == stored
    for tau, n in counts.items():
        ner.inference_tau = tau
        try:
            assert n == sum(len(doc.ents) for doc in nlp.pipe(texts)), tau
        finally:
            ner.inference_tau = stored
    assert counts[0.0] > 0


def test_rate_chooses_the_tau_at_which_the_count_matches_the_pseudo_labels(trained, texts) -> None:
    nlp = trained.nlp
    full = entity_counts(nlp, [nlp.make_doc(t) for t in texts])
    # the pseudo-labels of the pipeline itself at each value with a count of its own
    checked = 0
    for tau in GRID:
        if sum(1 for n in full.values() if n == full[tau]) > 1:
            continue
        rate = rate_inference_tau(nlp, pseudo_labelled(nlp, texts, tau))
        assert rate.pseudo_label_entities == full[tau]
        assert rate.chosen == tau
        assert rate.sentences == len(texts)
        assert rate.to_dict()["entities"][f"{tau:g}"] == full[tau]
        checked += 1
    assert checked >= 2, full


def test_the_fallback_is_the_interpolation_deciding_at_its_rate_value(trained_dir, undertrained_dir, trained, texts, tmp_path) -> None:
    teacher = spacy.load(trained_dir)
    pseudo = tmp_path / "pseudo"
    pseudo.mkdir()
    DocBin(docs=pseudo_labelled(teacher, texts, 0.5), store_user_data=True).to_disk(pseudo / "shard-00000.spacy")
    out, rate = build_fallback(trained_dir, undertrained_dir, 0.25, pseudo, tmp_path / "fallback")
    assert out == tmp_path / "fallback"
    fallback = spacy.load(out)
    student = spacy.load(undertrained_dir)
    heads = [get_span_head(find_maral_ner(nlp).model).state_dict() for nlp in (teacher, student, fallback)]
    for name, value in heads[2].items():
        if value.dtype.is_floating_point:
            torch.testing.assert_close(value, 0.75 * heads[0][name] + 0.25 * heads[1][name], rtol=1e-5, atol=1e-6)
    # the decision rule RATE chose is stored in the config and loaded with the pipeline
    assert rate.chosen in GRID
    assert find_maral_ner(fallback).inference_tau == rate.chosen
    assert Config().from_disk(out / "config.cfg", interpolate=False)["components"]["maral_ner"]["inference_tau"] == rate.chosen
    counted = entity_counts(fallback, [fallback.make_doc(t) for t in texts], grid=(rate.chosen,))
    assert counted[rate.chosen] == rate.entities[rate.chosen]


@pytest.mark.parametrize("weight", [-0.1, 1.0, 1.5, float("nan")])
def test_a_fallback_weight_outside_0_1_is_refused(weight) -> None:
    with pytest.raises(ValueError, match="fallback's weight"):
        check_fallback_weight(weight)


def _report(trusted: bool) -> GuardReport:
    return GuardReport(90.0, 90.0, 80.0, 0.5, GuardThresholds(), problems=[] if trusted else ["distrusted"])


def test_choose_the_student_then_the_fallback_then_the_teacher(tmp_path) -> None:
    fallback_ok = FallbackCheck(0.25, tmp_path, {}, _report(True))
    fallback_bad = FallbackCheck(0.25, tmp_path, {}, _report(False))
    assert choose(_report(True), "auto", fallback_ok) == "student"
    assert choose(_report(False), "auto", fallback_ok) == "fallback"
    assert choose(_report(False), "auto", fallback_bad) == "teacher"
    assert choose(_report(False), "auto", None) == "teacher"
    assert choose(_report(False), "student", fallback_ok) == "student"
    assert choose(_report(True), "teacher", fallback_ok) == "teacher"


def _guard(trained_dir, student_dir, dev, text, verdict, *extra):
    return run_cli("guard", trained_dir, student_dir, dev, text, "-o", verdict, *extra)


@pytest.mark.slow
def test_guard_ships_the_fallback_where_it_distrusts_the_student(trained_dir, undertrained_dir, trained, texts, tmp_path) -> None:
    dev = tmp_path / "dev.spacy"
    DocBin(docs=[eg.reference for eg in trained.examples]).to_disk(dev)
    text = tmp_path / "target.txt"
    text.write_text("\n".join(texts) + "\n", encoding="utf8")
    teacher = spacy.load(trained_dir)
    pseudo = tmp_path / "pseudo"
    pseudo.mkdir()
    DocBin(docs=pseudo_labelled(teacher, texts, find_maral_ner(teacher).inference_tau), store_user_data=True).to_disk(
        pseudo / "shard-00000.spacy")
    # nearly the teacher: trusted, and shipped in place of the teacher
    verdict_path = tmp_path / "guard.json"
    run = _guard(trained_dir, undertrained_dir, dev, text, verdict_path,
                 "--fallback-weight", "0.02", "--fallback-dir", str(tmp_path / "fallback"), "--pseudo-labels", str(pseudo))
    assert run.returncode == 0, run.stderr
    verdict = json.loads(verdict_path.read_text())
    assert verdict["trusted"] is False
    assert verdict["fallback"]["trusted"] is True and verdict["fallback"]["weight"] == 0.02
    assert verdict["chosen"] == "fallback" and verdict["chosen_path"] == str(tmp_path / "fallback")
    assert verdict["fallback"]["rate"]["chosen_inference_tau"] in GRID
    spacy.load(verdict["chosen_path"])
    # thresholds no pipeline meets: the fallback is built and checked, and the teacher ships
    strict = tmp_path / "strict.json"
    run = _guard(trained_dir, undertrained_dir, dev, text, strict, "--min-agreement", "101",
                 "--fallback-weight", "0.02", "--fallback-dir", str(tmp_path / "fallback"), "--pseudo-labels", str(pseudo))
    assert run.returncode == 0, run.stderr
    verdict = json.loads(strict.read_text())
    assert verdict["fallback"]["trusted"] is False and verdict["chosen"] == "teacher"
    assert verdict["chosen_path"] == str(trained_dir)
    # a trusted student: no fallback is built
    trusted = tmp_path / "trusted.json"
    run = _guard(trained_dir, trained_dir, dev, text, trusted,
                 "--fallback-weight", "0.25", "--fallback-dir", str(tmp_path / "unused"), "--pseudo-labels", str(pseudo))
    assert run.returncode == 0, run.stderr
    verdict = json.loads(trusted.read_text())
    assert verdict["chosen"] == "student" and verdict["fallback"] is None
    assert not (tmp_path / "unused").exists()


@pytest.mark.parametrize("extra,message", [
    (["--fallback-weight", "1"], "fallback's weight"),
    (["--fallback-weight", "0.25"], "needs --fallback-dir and --pseudo-labels"),
])
def test_guard_refuses_a_fallback_it_cannot_build_before_loading_anything(tmp_path, extra, message) -> None:
    run = _guard(tmp_path / "no-teacher", tmp_path / "no-student", tmp_path / "dev.spacy", tmp_path / "t.txt",
                 tmp_path / "g.json", *extra)
    assert run.returncode == 2 and message in " ".join(run.stderr.split()), run.stderr
    assert not (tmp_path / "g.json").exists()


def test_evaluate_scores_what_the_guard_shipped_once(tmp_path) -> None:
    from spacy_maral.cli.evaluate import shipped_spec

    def verdict(chosen, path):
        file = tmp_path / f"{chosen}.json"
        file.write_text(json.dumps({"chosen": chosen, "chosen_path": str(path)}), encoding="utf8")
        return file

    specs = [("zero-shot", str(tmp_path / "teacher")), ("maral", str(tmp_path / "student"))]
    assert shipped_spec(specs, verdict("teacher", tmp_path / "teacher")) == "zero-shot"
    (tmp_path / "student").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "student")
    assert shipped_spec(specs, verdict("student", tmp_path / "alias")) == "maral"  # the same folder, named otherwise
    assert len(specs) == 2
    assert shipped_spec(specs, verdict("fallback", tmp_path / "fallback")) == "shipped"
    assert specs[-1] == ("shipped", str(tmp_path / "fallback"))
    with pytest.raises(ValueError, match="named 'shipped'"):
        shipped_spec(specs, verdict("fallback", tmp_path / "other"))
