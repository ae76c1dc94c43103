"""BENCHMARKS.md's tables are what benchmarks/results/ gives (benchmarks/scripts/tables.py)."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "benchmarks" / "scripts" / "tables.py"


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_tables_equal_the_generated_ones(tables) -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf8")
    assert tables.generate(text) == text
    assert tables.main([str(ROOT / "BENCHMARKS.md"), "--check"]) == 0


def test_every_results_file_is_cited_and_says_what_where_and_when(tables) -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf8")
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        result = json.loads(path.read_text(encoding="utf8"))
        for key in ("claim", "measured", "command", "commit", "machine", "date"):
            assert result.get(key), (path.name, key)
        assert f"table:{path.stem}/" in text, path.name


def test_headline_means_are_computed_from_the_runs(tables) -> None:
    """The three-seed table comes from the per-seed F1 of every run: the teacher's mean
    over the seeds, recomputed here, is its first cell."""
    result = json.loads((ROOT / "benchmarks/results/three-seed-protocol.json").read_text(encoding="utf8"))
    teacher_de = [r["raw_text_f1"] for r in result["runs"] if r["system"] == "teacher" and r["lang"] == "de"]
    assert len(teacher_de) == 3
    columns, rows = tables.three_seed_means(result)
    assert rows[0][0] == "de" and rows[0][1].startswith(f"{sum(teacher_de) / 3:.2f} (")
    assert rows[0][2].startswith("**64.06** (1.25), gain **+2.00**")


def test_check_fails_on_a_stale_table(tables, tmp_path) -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf8")
    stale = tmp_path / "BENCHMARKS.md"
    stale.write_text(text.replace("| de | 62.06 (1.25) |", "| de | 62.07 (1.25) |", 1), encoding="utf8")
    assert stale.read_text(encoding="utf8") != text
    assert tables.main([str(stale), "--check"]) == 1
    assert tables.main([str(stale)]) == 0 and stale.read_text(encoding="utf8") == text
