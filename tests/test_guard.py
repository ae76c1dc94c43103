"""The stage-2 guard: a student that should not be trusted is reported, not shipped."""
import json
import subprocess
import sys

import pytest
import spacy
import torch
from spacy.tokens import DocBin

from helpers import build_nlp, make_examples
from spacy_maral.evaluation.guard import GuardThresholds, agreement_f, check_student, choose, drift_figures, target_agreement
from spacy_maral.ml.span_ner import get_span_head
from spacy_maral.pipeline.maral_ner import find_maral_ner


@pytest.fixture(scope="module")
def dev_docs(trained):
    return [eg.reference for eg in trained.examples]


@pytest.fixture(scope="module")
def undertrained(tiny_encoder):
    """A student initialized on the same data and never updated."""
    nlp = build_nlp(tiny_encoder)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp


@pytest.fixture
def collapsed(trained_dir):
    """The trained pipeline with a projection that sends every span to the same vector."""
    nlp = spacy.load(trained_dir)
    head = get_span_head(find_maral_ner(nlp).model)
    last = head.projection[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.linspace(-1.0, 1.0, last.bias.shape[0]))
    return nlp


def test_a_student_equal_to_its_teacher_is_trusted(trained, trained_dir, dev_docs) -> None:
    student = spacy.load(trained_dir)
    texts = [d.text for d in dev_docs]
    report = check_student(trained.nlp, student, dev_docs, texts)
    assert report.trusted, report.problems
    assert report.agreement_f == pytest.approx(100.0)
    assert report.student_dev_f == pytest.approx(report.teacher_dev_f)
    assert choose(report) == "student"


def test_an_undertrained_student_is_not_trusted(trained, undertrained, dev_docs) -> None:
    texts = [d.text for d in dev_docs]
    report = check_student(trained.nlp, undertrained, dev_docs, texts)
    assert not report.trusted
    assert report.teacher_dev_f - report.student_dev_f > 15.0
    assert any("undertrained" in p for p in report.problems)
    assert any("agrees with the teacher" in p for p in report.problems)
    assert choose(report) == "teacher"
    assert choose(report, "student") == "student"
    with pytest.raises(ValueError, match="package choice"):
        choose(report, "best")


@spacy.Language.component("test_guard_forget_some")
def forget_some(doc):
    """No entities in the docs whose text (spaces aside: the guard scores detokenized
    text) is in FORGOTTEN: a student that lost part of what its teacher knew."""
    if "".join(doc.text.split()) in FORGOTTEN:
        doc.ents = []
    return doc


FORGOTTEN: set = set()


def test_a_student_more_than_5_points_below_its_teacher_on_source_dev_is_not_trusted(trained, trained_dir, dev_docs) -> None:
    texts = [d.text for d in dev_docs]
    student = spacy.load(trained_dir)
    student.add_pipe("test_guard_forget_some", last=True)
    with_ents = [d.text for d in dev_docs if d.ents]
    FORGOTTEN.clear()
    report = None
    try:
        # forget one sentence's entities at a time until the drop passes 5 points
        for text in with_ents:
            FORGOTTEN.add("".join(text.split()))
            report = check_student(trained.nlp, student, dev_docs, texts)
            if report.teacher_dev_f - report.student_dev_f > 5.0:
                break
    finally:
        FORGOTTEN.clear()
    drop = report.teacher_dev_f - report.student_dev_f
    assert 5.0 < drop < 15.0, drop  # the range where the default and the old 15 differ
    assert report.agreement_f >= 60.0 and report.target_label_shift <= 0.2
    assert len(report.problems) == 1 and "below the teacher" in report.problems[0]
    assert choose(report) == "teacher"
    assert GuardThresholds().max_dev_drop == 5.0  # the workflow's default


def test_a_collapsed_student_is_not_trusted(trained, collapsed, dev_docs) -> None:
    report = check_student(trained.nlp, collapsed, dev_docs, [d.text for d in dev_docs])
    assert report.student_max_class_cosine > 0.999
    assert any("collapsed" in p for p in report.problems)
    assert choose(report) == "teacher"
    # with the collapse check switched off it is the only problem that goes away
    loose = check_student(trained.nlp, collapsed, dev_docs, [d.text for d in dev_docs],
                          thresholds=GuardThresholds(max_class_cosine=1.01))
    assert not any("collapsed" in p for p in loose.problems)
    assert loose.problems == [p for p in report.problems if "collapsed" not in p]


def test_target_agreement_is_entity_f1_against_the_teacher(trained, undertrained, dev_docs) -> None:
    texts = [d.text for d in dev_docs]
    teacher_ents = sum(len(d.ents) for d in trained.nlp.pipe(texts))
    assert teacher_ents > 0
    assert target_agreement(trained.nlp, trained.nlp, texts) == pytest.approx(100.0)
    # an empty student agrees on nothing
    blank = spacy.blank("xx")
    assert target_agreement(trained.nlp, blank, texts) == 0.0


def test_agreement_is_f1_not_precision_or_recall() -> None:
    """By hand: the teacher has 2 entities, the student 1 of them plus 1 of its own, and a
    third with the right offsets but another label: P = 1/3, R = 1/2, F1 = 0.4."""
    teacher = [[(0, 5, "PER"), (6, 9, "LOC")], []]
    student = [[(0, 5, "PER"), (6, 9, "ORG")], [(0, 3, "MISC")]]
    assert agreement_f(teacher, student) == pytest.approx(40.0)
    assert agreement_f(teacher, teacher) == pytest.approx(100.0)
    # the teacher is the reference: fewer student entities lower recall only
    assert agreement_f(teacher, [[(0, 5, "PER")], []]) == pytest.approx(100 * 2 * 0.5 / 1.5)


@pytest.mark.slow
def test_guard_cli_and_export_package_the_teacher_when_the_student_fails(trained_dir, undertrained, dev_docs, tmp_path) -> None:
    student_dir = tmp_path / "student"
    undertrained.to_disk(student_dir)
    dev = tmp_path / "dev.spacy"
    DocBin(docs=dev_docs).to_disk(dev)
    text = tmp_path / "target.txt"
    text.write_text("\n".join(d.text for d in dev_docs) + "\n", encoding="utf8")
    verdict_path = tmp_path / "guard.json"
    run = subprocess.run(
        [sys.executable, "-m", "spacy_maral", "guard", str(trained_dir), str(student_dir), str(dev), str(text), "-o", str(verdict_path)],
        check=True, capture_output=True, text=True,
    )
    assert "SHOULD NOT BE TRUSTED" in run.stderr  # a warning: stderr
    # written to a pipe or log file: one plain progress line, no spinner frames or line erasing
    assert "checking the student on" in run.stdout and "\x1b[2K" not in run.stdout
    verdict = json.loads(verdict_path.read_text())
    assert verdict["trusted"] is False and verdict["chosen"] == "teacher"
    assert verdict["chosen_path"] == str(trained_dir)
    out = tmp_path / "export"
    subprocess.run(
        [sys.executable, "-m", "spacy_maral", "export", str(student_dir), str(out), "--guard", str(verdict_path), "--lang", "de"],
        check=True, capture_output=True, text=True,
    )
    exported = spacy.load(out)
    teacher = spacy.load(trained_dir)
    texts = [d.text for d in dev_docs]
    assert [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in exported.pipe(texts)] == \
        [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in teacher.pipe(texts)]
    assert exported.config["nlp"]["tokenizer"]["lang"] == "de"


def test_drift_figures_by_hand() -> None:
    # teacher: 2 PER, 1 LOC, 1 ORG; student: 1 PER, 3 LOC, 2 ORG (6 entities)
    teacher = [[(0, 5, "PER"), (6, 9, "LOC")], [(0, 3, "PER"), (4, 8, "ORG")]]
    student = [[(0, 5, "PER"), (6, 9, "LOC"), (10, 12, "LOC")], [(0, 3, "LOC"), (4, 8, "ORG"), (9, 11, "ORG")]]
    figures = drift_figures(teacher, student)
    assert figures["target_entity_ratio"] == pytest.approx(6 / 4)
    # |2/4 - 1/6| + |1/4 - 3/6| + |1/4 - 2/6| = 1/3 + 1/4 + 1/12 = 2/3, halved
    assert figures["target_label_shift"] == pytest.approx(1 / 3)
    assert drift_figures(teacher, teacher) == {"target_entity_ratio": 1.0, "target_label_shift": 0.0}
    assert drift_figures([[]], student[:1]) == {"target_entity_ratio": None, "target_label_shift": None}
    assert drift_figures(teacher, [[], []]) == {"target_entity_ratio": 0.0, "target_label_shift": None}
    assert drift_figures([[], []], [[], []]) == {"target_entity_ratio": 1.0, "target_label_shift": None}


def test_no_entity_from_either_is_full_agreement() -> None:
    """Neither found an entity on the target sentences: they agree on every one (it was
    0, and the guard said the student had not learned the pseudo-labels)."""
    assert agreement_f([[], []], [[], []]) == 100.0
    assert agreement_f([[(0, 5, "PER")], []], [[], []]) == 0.0


def test_span_vectors_that_are_not_numbers_are_a_problem(trained, dev_docs, monkeypatch) -> None:
    """A diverged student's NaN cosine compared False with the limit: it passed."""
    monkeypatch.setattr("spacy_maral.evaluation.guard.span_class_geometry", lambda *a, **k: {"max_cosine": float("nan")})
    report = check_student(trained.nlp, trained.nlp, dev_docs, [d.text for d in dev_docs])
    assert not report.trusted and any("not finite numbers" in p for p in report.problems)


def test_the_report_carries_the_drift_figures(trained, undertrained, dev_docs) -> None:
    texts = [d.text for d in dev_docs]
    same = check_student(trained.nlp, trained.nlp, dev_docs, texts)
    assert same.target_entity_ratio == 1.0 and same.target_label_shift == 0.0
    report = check_student(trained.nlp, undertrained, dev_docs, texts).to_dict()
    n_teacher = sum(len(d.ents) for d in trained.nlp.pipe(texts))
    n_student = sum(len(d.ents) for d in undertrained.pipe(texts))
    assert report["target_entity_ratio"] == pytest.approx(n_student / n_teacher)


@spacy.Language.component("test_guard_relabel_all_as_one")
def relabel_all_as_one(doc):
    """Every entity gets the first entity's label: the same spans, other labels."""
    if doc.ents:
        label = doc.ents[0].label_
        doc.ents = [spacy.tokens.Span(doc, e.start, e.end, label=label) for e in doc.ents]
    return doc


def test_a_student_whose_labels_drifted_is_not_trusted_above_max_label_shift(trained, trained_dir, dev_docs) -> None:
    texts = [d.text for d in dev_docs]
    drifted = spacy.load(trained_dir)
    drifted.add_pipe("test_guard_relabel_all_as_one", last=True)
    strict = GuardThresholds(max_dev_drop=100.0, min_agreement=0.0, max_label_shift=0.2)
    report = check_student(trained.nlp, drifted, dev_docs, texts, thresholds=strict)
    assert report.target_entity_ratio == 1.0 and report.target_label_shift > 0.2
    assert [p for p in report.problems if "drifted" in p] == report.problems and len(report.problems) == 1
    assert choose(report) == "teacher"
    assert GuardThresholds().max_label_shift == 0.2  # the workflow's default
    # 1.0 never distrusts a shift; the same student at its own shift passes
    never = GuardThresholds(max_dev_drop=100.0, min_agreement=0.0, max_label_shift=1.0)
    assert check_student(trained.nlp, drifted, dev_docs, texts, thresholds=never).trusted
    at_its_shift = GuardThresholds(max_dev_drop=100.0, min_agreement=0.0, max_label_shift=report.target_label_shift)
    assert check_student(trained.nlp, drifted, dev_docs, texts, thresholds=at_its_shift).trusted
    # a student equal to its teacher has no shift, so even 0 trusts it
    assert check_student(trained.nlp, spacy.load(trained_dir), dev_docs, texts, thresholds=GuardThresholds(max_label_shift=0.0)).trusted


def test_a_verdict_names_the_chosen_folder_wherever_it_is_read_from(tmp_path, monkeypatch) -> None:
    """The guard ran in the project folder with relative paths; `export --guard` run from
    another folder looked for "training/student" there (and exported another pipeline
    of that name, where there was one)."""
    from pathlib import Path

    from spacy_maral.evaluation.guard import GuardReport, GuardThresholds, write_verdict
    from spacy_maral.evaluation.verdict import read_verdict

    (tmp_path / "project" / "training" / "student").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "project")
    report = GuardReport(teacher_dev_f=90.0, student_dev_f=89.0, agreement_f=80.0, student_max_class_cosine=0.5,
                         thresholds=GuardThresholds())
    assert write_verdict(Path("guard.json"), report, Path("xx_teacher_package"), Path("training/student"), "auto") == "student"
    monkeypatch.chdir(tmp_path)
    assert read_verdict(tmp_path / "project" / "guard.json") == ("student", tmp_path / "project" / "training" / "student")
    write_verdict(tmp_path / "t.json", report, Path("xx_teacher_package"), Path("training/student"), "teacher")
    assert read_verdict(tmp_path / "t.json") == ("teacher", Path("xx_teacher_package"))  # a package: by its name
