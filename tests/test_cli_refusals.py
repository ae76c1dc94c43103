"""A command given a pipeline or a corpus that isn't there, or raw text for a gold corpus,
says so at once: before spaCy, thinc or torch is imported (about ten seconds on a small machine), with exit status 1
and the path named, and nothing written."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_maral.pipeline.location import check_pipeline_found, pipeline_found

# runs one command in a fresh interpreter and prints which heavy modules it imported
PROBE = """
import json, sys
from spacy_maral.cli import app
try:
    app(sys.argv[1:], prog_name="python -m spacy_maral")
    code = 0
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": sorted(m for m in ("spacy", "thinc", "torch", "transformers") if m in sys.modules)}))
"""

MISSING_MODEL = "no pipeline {missing}: neither a pipeline folder nor an installed package"


def commands(text: Path, gold: Path, students: Path, missing: Path, out: Path, found: Path):
    """(arguments, what the refusal says) of every command that loads a pipeline, and of
    check-text, the workflow's first step; `found` is a folder with a config.cfg, which
    passes as a pipeline until it is loaded."""
    model = str(missing / "model")
    said_model = MISSING_MODEL.format(missing=model)
    return [
        (["predict", model, "a sentence"], f"predict: {said_model}"),
        (["predict", model, "--from-file", str(missing / "f.txt")], f"target corpus {missing / 'f.txt'} does not exist"),
        (["evaluate", str(gold), model], f"evaluate: {said_model}"),
        (["evaluate", str(text), model], f"evaluate: {text} is read as plain text, one sentence a line, without entity tags"),
        (["evaluate", str(missing / "test.spacy"), model], f"target corpus {missing / 'test.spacy'} does not exist"),
        (["calibrate", model, str(gold)], f"calibrate: {said_model}"),
        (["calibrate", model, str(text)], f"calibrate: {text} is read as plain text"),
        (["calibrate", model, str(missing / "dev.conll")], f"target corpus {missing / 'dev.conll'} does not exist"),
        (["pseudo-label", model, str(text), str(out / "pl")], f"pseudo-label failed: {said_model}"),
        (["pseudo-label", str(found), str(text), str(out / "pl"), "--ensemble", model], said_model),
        (["pseudo-label", model, str(missing / "t.txt"), str(out / "pl")], f"target corpus {missing / 't.txt'} does not exist"),
        (["annotate", model, str(text), str(out / "an")], f"annotate failed: {said_model}"),
        (["annotate", model, str(missing / "t.txt"), str(out / "an")], f"the input {missing / 't.txt'} does not exist"),
        (["guard", model, model, str(gold), str(text), "-o", str(out / "g.json")], f"guard: TEACHER: {said_model}"),
        (["guard", str(found), model, str(gold), str(text), "-o", str(out / "g.json")], f"guard: STUDENT: {said_model}"),
        (["predict", str(found.parent), "a sentence"], f"predict: {found.parent} is a folder without config.cfg, not a pipeline "
                                                       f"folder: the pipelines in it are {found}"),
        (["evaluate", str(gold), str(text)], f"evaluate: {text} is a file, not a pipeline folder"),
        (["guard", model, model, str(text), str(gold), "-o", str(out / "g.json")], f"guard: DEV: {text} is read as plain text"),
        (["guard", model, model, str(missing / "dev.spacy"), str(text), "-o", str(out / "g.json")], "guard: DEV: target corpus"),
        (["select-checkpoint", str(students), str(text), "-o", str(out / "s.json")], f"{text} is read as plain text"),
        (["select-checkpoint", str(missing / "students.json"), str(gold), "-o", str(out / "s.json")],
         f"{missing / 'students.json'} is not the summary of train-students"),
        (["select-checkpoint", str(students), str(missing / "dev.spacy"), "-o", str(out / "s.json")], "target corpus"),
        (["export", model, str(out / "exp")], f"export failed: {said_model}"),
        (["export", model, str(out / "exp"), "--guard", str(text)], f"export failed: --guard {text} is not a verdict"),
        (["average", str(found), str(found.parent), "-o", str(out / "avg")], f"average failed: {found.parent} is not a pipeline"),
        (["average", "--snapshots", str(missing), "-o", str(out / "avg")], "average failed: no pipelines to average"),
        (["average", "--runs", str(students), "-o", str(out / "avg")],
         f"{students} lists {missing / 'student-s0' / 'model-last'}, which is not there"),
        (["average", "--runs", str(students.with_name("selected.json")), "-o", str(out / "avg")],
         "lists training/adapt-de/student-s0/model-last, which is not there from the current folder"),
        (["average", str(found), str(found), "-o", str(out / "avg"), "--weights", "1,nan"],
         "give one finite weight >= 0 per pipeline, not all 0 (2 pipelines, weights [1.0, nan])"),
        (["check-text", "fi,de", "--text", str(missing / "{lang}.txt")], "the text of fi, de can't be used"),
    ]


def test_a_missing_pipeline_or_corpus_is_refused_before_spacy_is_imported(tmp_path) -> None:
    text = tmp_path / "text.txt"
    text.write_text("Angela Merkel besuchte Paris.\n", encoding="utf-8")
    gold = tmp_path / "dev.conll"
    gold.write_text("Angela B-PER\nMerkel I-PER\nbesuchte O\nParis B-LOC\n. O\n", encoding="utf-8")
    missing, out = tmp_path / "nowhere", tmp_path / "out"
    students = tmp_path / "students.json"  # of train-students, its run's folder missing
    students.write_text(json.dumps({"students": {"0": {"model": str(missing / "student-s0" / "model-last")}}}), encoding="utf8")
    relative = {"students": {"0": {"model": "training/adapt-de/student-s0/model-last"}}}  # as the workflow's, from its folder
    students.with_name("selected.json").write_text(json.dumps(relative), encoding="utf8")
    found = tmp_path / "run" / "model-best"
    found.mkdir(parents=True)
    (found / "config.cfg").write_text("[nlp]\n", encoding="utf-8")
    failures = []
    for args, said in commands(text, gold, students, missing, out, found):
        result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        shown = " ".join((result.stdout + result.stderr).split())
        if report != {"code": 1, "heavy": []} or said not in shown:
            failures.append(f"{args[0]} {args[1:]}: {report}, said: {shown[:300]}")
    assert not failures, "\n".join(failures)
    assert not out.exists()


def test_pipeline_found_follows_spacy_load(tmp_path) -> None:
    """A folder, an installed distribution (spaCy's is_package) and blank:LANG are found;
    a name that is neither, or a Path of a folder that isn't there, is not."""
    assert pipeline_found(str(tmp_path)) and pipeline_found(tmp_path)
    assert pipeline_found("spacy")  # an installed distribution, as spacy.load looks packages up
    assert pipeline_found("blank:fi")
    assert not pipeline_found("xx_no_such_pipeline")
    assert not pipeline_found(tmp_path / "model-best")
    assert not pipeline_found(str(tmp_path / "model-best"))
    with pytest.raises(ValueError, match="no pipeline xx_no_such_pipeline: neither a pipeline folder"):
        check_pipeline_found("xx_no_such_pipeline")
