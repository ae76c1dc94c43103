"""benchmarks/scripts/paired_bootstrap.py: the paired bootstrap over per-sentence counts."""
import json
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow  # trainings and subprocess runs: make test-fast leaves them out


def test_paired_bootstrap_resamples_evaluate_per_sentence_counts(tmp_path) -> None:
    """benchmarks/scripts/paired_bootstrap.py --eval reads EVAL.per_sentence.json (as `evaluate -o`
    writes it) and reports the F1 that the summed counts give."""
    counts = {"A": [[1, 1, 1], [0, 1, 1], [2, 2, 3]], "B": [[0, 0, 1], [1, 2, 1], [1, 1, 3]]}
    (tmp_path / "eval.json").write_text(json.dumps({"results": {}}))
    (tmp_path / "eval.per_sentence.json").write_text(json.dumps({"raw_text": counts}))
    script = REPO / "benchmarks" / "scripts" / "paired_bootstrap.py"
    out = tmp_path / "bs.json"
    subprocess.run([sys.executable, str(script), str(out), "--eval", str(tmp_path / "eval.json"), "A", "B",
                    "--samples", "200"], check=True, capture_output=True)
    result = json.loads(out.read_text())
    # A: tp 3, predicted 4, gold 5 -> F1 6/9; B: tp 2, predicted 3, gold 5 -> F1 4/8
    assert result["A"] == pytest.approx(round(100 * 6 / 9, 2)) and result["B"] == pytest.approx(50.0)
    assert result["difference"] == pytest.approx(round(100 * (6 / 9 - 0.5), 2))
    assert result["sentences"] == 3
    # unpaired counts are refused
    counts["B"] = counts["B"][:2]
    (tmp_path / "eval.per_sentence.json").write_text(json.dumps({"raw_text": counts}))
    run = subprocess.run([sys.executable, str(script), str(out), "--eval", str(tmp_path / "eval.json"), "A", "B"],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "not a paired test set" in run.stderr


def test_paired_bootstrap_pairs_two_evaluations_of_one_test_set(tmp_path) -> None:
    """--eval-b: B's counts come from a later evaluation of the same test set (a student
    evaluated on its own); the result equals the one from a single file, and counts whose
    gold entities per sentence differ (another test set) are refused."""
    script = REPO / "benchmarks" / "scripts" / "paired_bootstrap.py"
    counts = {"A": [[1, 1, 1], [0, 1, 1], [2, 2, 3]], "B": [[0, 0, 1], [1, 2, 1], [1, 1, 3]]}
    for name, content in (("both", counts), ("a", {"A": counts["A"]}), ("b", {"B": counts["B"]})):
        (tmp_path / f"{name}.json").write_text(json.dumps({"results": {}}))
        (tmp_path / f"{name}.per_sentence.json").write_text(json.dumps({"raw_text": content}))

    def run(out, *args):
        return subprocess.run([sys.executable, str(script), str(tmp_path / out), "--eval", *args, "--samples", "200"],
                              capture_output=True, text=True)

    assert run("one.json", str(tmp_path / "both.json"), "A", "B").returncode == 0
    assert run("two.json", str(tmp_path / "a.json"), "A", "B", "--eval-b", str(tmp_path / "b.json")).returncode == 0
    one, two = (json.loads((tmp_path / f).read_text()) for f in ("one.json", "two.json"))
    assert {k: one[k] for k in ("A", "B", "difference", "difference_95ci")} == \
        {k: two[k] for k in ("A", "B", "difference", "difference_95ci")}
    (tmp_path / "b.per_sentence.json").write_text(json.dumps({"raw_text": {"B": [[0, 0, 1], [1, 2, 2], [1, 1, 3]]}}))
    refused = run("three.json", str(tmp_path / "a.json"), "A", "B", "--eval-b", str(tmp_path / "b.json"))
    assert refused.returncode != 0 and "gold entities per sentence differ" in refused.stderr
