"""The protocol's rule 3 (benchmarks/PROTOCOL.md): the
default stage 2 between P and W is chosen from the guard files alone."""
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def choose_default(seed_report):
    return seed_report.choose_default


def write_guards(folder: Path, variant: str, dev_f: list, trusted: list) -> None:
    runs = [(s, lang) for s in (0, 1, 2) for lang in ("de", "es")]
    for (seed, lang), f, ok in zip(runs, dev_f, trusted):
        (folder / f"{variant}-s{seed}-{lang}.guard.json").write_text(
            json.dumps({"student_dev_f": f, "trusted": ok}))


@pytest.mark.parametrize("p_dev, w_dev, p_ok, w_ok, expected", [
    (80.0, 81.0, 6, 6, "W"),   # equal passes, W more than 0.5 above
    (80.0, 80.4, 6, 6, "P"),   # equal passes, W within 0.5: the paper's student
    (80.0, 79.0, 6, 6, "P"),   # equal passes, W below
    (80.0, 90.0, 6, 5, "P"),   # more guard passes beat en/dev F1
    (90.0, 80.0, 5, 6, "W"),
])
def test_rule_3(tmp_path, choose_default, p_dev, w_dev, p_ok, w_ok, expected) -> None:
    write_guards(tmp_path, "P", [p_dev] * 6, [True] * p_ok + [False] * (6 - p_ok))
    write_guards(tmp_path, "W", [w_dev] * 6, [True] * w_ok + [False] * (6 - w_ok))
    winner, lines = choose_default(tmp_path)
    assert winner == expected
    assert f"**default: {expected}**" in lines[-1]


def test_rule_3_waits_for_all_runs(tmp_path, choose_default) -> None:
    write_guards(tmp_path, "P", [80.0] * 6, [True] * 6)
    write_guards(tmp_path, "W", [90.0] * 5, [True] * 5)
    winner, lines = choose_default(tmp_path)
    assert winner is None and "runs are missing" in lines[-1]
    assert "W: 5 of 6 runs" in lines[1]


def _evaluation(f: float, p: float, r: float, gold_f: float, ece: float) -> dict:
    cal = {"n": 10, "ece": ece, "precision_at_0.9": 0.75, "count_at_0.9": 4, "precision_at_0.5": 0.6, "count_at_0.5": 9}
    return {"ents_f": gold_f, "raw_text": {"ents_f": f, "ents_p": p, "ents_r": r, "calibration": cal}}


def test_results_file_from_the_runs(tmp_path, seed_report) -> None:
    """--json: every run's scores, temperature and guard, and the bootstraps with names
    that hold '-' (ST-W); a results file's hand-written entries survive a rewrite."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "eval-s2-de.json").write_text(json.dumps({"results": {
        "teacher": _evaluation(0.60, 0.7, 0.5, 0.61, 0.2), "W": _evaluation(0.655, 0.66, 0.65, 0.66, 0.04)}}))
    (runs / "eval-s2-de-ST-W.json").write_text(json.dumps({"results": {"ST-W": _evaluation(0.63, 0.6, 0.66, 0.64, 0.05)}}))
    (runs / "eval-s2-de.per_sentence.json").write_text("{}")  # not an evaluation
    cal = {"dev": "../corpus/es-dev.spacy", "lang": "es", "sentences": 1000, "temperature": 2.5,
           "before": {"ece": 0.3}, "after": {"ece": 0.04}}
    (runs / "teacher-s2.calibration.json").write_text(json.dumps(cal))
    (runs / "W-s2-de.calibration.json").write_text(json.dumps({**cal, "temperature": 3.0}))
    (runs / "W-s2-de.guard.json").write_text(json.dumps({
        "student_dev_f": 91.0, "teacher_dev_f": 93.0, "agreement_f": 80.0, "student_max_class_cosine": 0.3,
        "target_entity_ratio": 1.2, "target_label_shift": 0.05, "trusted": True}))
    (runs / "W-s2-de.timing.json").write_text(json.dumps({"wall_s": 1744.24, "peak_rss_gb": 6.281}))
    (runs / "bootstrap-s2-de-W-vs-ST-W.json").write_text(json.dumps({
        "sentences": 3005, "samples": 2000, "difference": 2.5, "difference_95ci": [1.0, 4.0], "share_W_better": 0.99}))
    out = tmp_path / "result.json"
    out.write_text(json.dumps({"claim": "kept", "runs": [{"stale": True}]}))
    result = seed_report.write_results(runs, out)
    assert json.loads(out.read_text()) == result
    assert result["claim"] == "kept" and result["seeds"] == [2] and result["langs"] == ["de"]
    runs_by = {r["system"]: r for r in result["runs"]}
    assert sorted(runs_by) == ["ST-W", "W", "teacher"]
    w = runs_by["W"]
    assert (w["raw_text_f1"], w["gold_tokens_f1"], w["raw_text_p"], w["raw_text_r"]) == (65.5, 66.0, 66.0, 65.0)
    assert w["temperature"]["temperature"] == 3.0 and w["temperature"]["dev"] == "es-dev.spacy"
    assert runs_by["teacher"]["temperature"]["temperature"] == 2.5  # the teacher's one file
    assert "temperature" not in runs_by["ST-W"]
    assert w["test_scores"]["ece"] == 0.04 and w["test_scores"]["precision_at_0.9"] == 0.75
    assert w["guard"]["target_label_shift"] == 0.05 and w["guard"]["trusted"] is True
    assert w["stage2"] == {"wall_s": 1744.2, "peak_rss_gb": 6.28}
    assert result["bootstraps"] == [{"seed": 2, "lang": "de", "a": "W", "b": "ST-W", "sentences": 3005, "samples": 2000,
                                     "difference": 2.5, "ci95": [1.0, 4.0], "share_a_better": 0.99}]
