"""The protocol's rule 3 (docs/protocol.md): the
default stage 2 between P and W is chosen from the guard files alone."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "scripts" / "seed_report.py"  # benchmarks/scripts


@pytest.fixture(scope="module")
def choose_default():
    spec = importlib.util.spec_from_file_location("seed_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.choose_default


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
