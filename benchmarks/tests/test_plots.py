"""BENCHMARKS.md's plots are committed, small, and drawn from benchmarks/results/ by one
command (benchmarks/scripts/plots.py)."""
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PLOTS = ROOT / "benchmarks" / "plots"
LINK = re.compile(r"\]\((benchmarks/plots/[\w.-]+\.png)\)")
PNG = b"\x89PNG\r\n\x1a\n"


def linked() -> list:
    return LINK.findall((ROOT / "BENCHMARKS.md").read_text(encoding="utf8"))


def test_the_linked_plots_exist_and_are_small_pngs() -> None:
    links = linked()
    assert len(set(links)) >= 3, links
    for link in links:
        data = (ROOT / link).read_bytes()
        assert data[:8] == PNG, link
        assert 5_000 < len(data) < 100_000, (link, len(data))
    # nothing committed that the page does not show
    assert {p.name for p in PLOTS.glob("*.png")} == {Path(link).name for link in links}


def test_regenerating_the_plots_gives_the_linked_files(plots, tmp_path) -> None:
    assert plots.main([str(tmp_path)]) == 0
    made = {p.name for p in tmp_path.iterdir()}
    assert made == {Path(link).name for link in linked()}
    for name in made:
        data = (tmp_path / name).read_bytes()
        assert data[:8] == PNG and len(data) < 100_000, name


def test_the_plots_are_drawn_from_the_results_files(plots, tmp_path, monkeypatch) -> None:
    """With a results file that lacks what a plot reads, the plot fails rather than drawing
    something else: the gain plot needs the bootstraps of the shipped student."""
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    ensemble = json.loads((results / "three-seed-ensemble.json").read_text(encoding="utf8"))
    ensemble["bootstraps"] = [b for b in ensemble["bootstraps"] if b["a"] != ensemble["default"]]
    (results / "three-seed-ensemble.json").write_text(json.dumps(ensemble), encoding="utf8")
    monkeypatch.setattr(sys.modules[plots.load_result.__module__], "RESULTS", results)  # results_io, which reads them
    with pytest.raises(ValueError, match="no bootstrap"):
        plots.plot_gain(tmp_path)
    # the other plots still read their own files
    assert plots.plot_speed(tmp_path).exists()
