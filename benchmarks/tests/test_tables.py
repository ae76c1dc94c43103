"""BENCHMARKS.md's tables are what benchmarks/results/ gives (benchmarks/scripts/tables.py)."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_committed_tables_equal_the_generated_ones(tables) -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf8")
    assert tables.generate(text) == text
    assert tables.main([str(ROOT / "BENCHMARKS.md"), "--check"]) == 0


def test_the_readme_is_short_and_its_results_table_generated(tables, tmp_path) -> None:
    """README.md: at most 200 lines, its results table between markers, equal to what the
    results give (a hand-edited cell is stale)."""
    text = (ROOT / "README.md").read_text(encoding="utf8")
    assert len(text.splitlines()) <= 200
    assert "<!-- table:shipped-default-seeds/summary -->" in text  # the default as it ships
    assert tables.generate(text) == text
    edited = tmp_path / "README.md"
    cell = re.search(r"\| \*\*\+\d\.\d\d\*\* \|", text).group(0)  # a mean gain of the results table
    edited.write_text(text.replace(cell, cell.replace("**+", "**+1"), 1), encoding="utf8")
    assert tables.main([str(edited), "--check"]) == 1
    assert tables.main([str(ROOT / "BENCHMARKS.md"), str(ROOT / "README.md"), "--check"]) == 0


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


def _final_result(de_w: list, es_w: list, ece: float = 0.04) -> dict:
    """A results file of the final runs' shape: seeds 0-2, de and es, teacher F1 60, W as given."""
    runs, boots = [], []
    for lang, w in (("de", de_w), ("es", es_w)):
        for seed, f in enumerate(w):
            runs.append({"system": "teacher", "seed": seed, "lang": lang, "raw_text_f1": 60.0})
            runs.append({"system": "W", "seed": seed, "lang": lang, "raw_text_f1": f, "test_scores": {"ece": ece},
                         "stage2": {"wall_s": 1800.0, "peak_rss_gb": 6.5}, "gold_tokens_f1": f,
                         "guard": {"student_dev_f1": 90.0, "teacher_dev_f1": 93.0, "agreement_f1": 80.0,
                                   "target_entity_ratio": 1.0, "target_label_shift": 0.05, "trusted": True}})
            boots.append({"seed": seed, "lang": lang, "a": "W", "b": "teacher", "difference": f - 60.0,
                          "ci95": [f - 61.0, f - 59.0]})
    return {"seeds": [0, 1, 2], "langs": ["de", "es"], "default": "W", "runs": runs, "bootstraps": boots}


def test_final_acceptance_says_which_criteria_are_met(tables) -> None:
    columns, rows = tables.final_acceptance(_final_result([66.5, 65.5, 66.2], [70.5, 69.9, 70.0]))
    verdicts = {row[0]: (row[2], row[3]) for row in rows}
    assert verdicts["German mean F1"] == ("66.07", "yes")
    assert verdicts["German F1, every seed"] == ("66.50, 65.50, 66.20", "yes")
    assert verdicts["Spanish mean F1 (development language's test)"] == ("70.13", "yes")
    assert verdicts["ECE on de/test, every seed"][1] == "yes"
    assert verdicts["stage 2 peak RSS, every run"] == ("6.50 GB", "yes")
    # one German seed below 65 and at 60.5 (interval [-0.5, +1.5] crosses 0), ECE above 0.05
    columns, rows = tables.final_acceptance(_final_result([67.0, 60.5, 66.0], [70.0, 69.0, 70.5], ece=0.06))
    verdicts = {row[0]: row[3] for row in rows}
    assert verdicts["German mean F1"] == "**no**"  # 64.50
    assert verdicts["German F1, every seed"] == "**no**"
    assert verdicts["German: student above its teacher, interval above 0, every seed"] == "**no**"
    assert verdicts["Spanish mean F1 (development language's test)"] == "**no**"  # 69.83
    assert verdicts["ECE on de/test, every seed"] == "**no**"


def test_final_acceptance_while_seeds_are_missing_says_not_yet(tables) -> None:
    """German complete, Spanish one seed of three, none at all: the per-seed criteria say
    "not yet" with the verdict so far; the whole-run ones are judged."""
    result = _final_result([66.5, 65.5, 66.2], [70.5])
    columns, rows = tables.final_acceptance(result)
    verdicts = {row[0]: (row[2], row[3]) for row in rows}
    assert verdicts["German mean F1"] == ("66.07", "yes")
    assert verdicts["Spanish mean F1 (development language's test)"] == ("70.50", "not yet (1 of 3 seeds, so far yes)")
    assert verdicts["stage 2 peak RSS, every run"] == ("6.50 GB", "yes")
    result = _final_result([64.0], [])
    verdicts = {row[0]: (row[2], row[3]) for row in tables.final_acceptance(result)[1]}
    assert verdicts["German mean F1"] == ("64.00", "not yet (1 of 3 seeds, so far **no**)")
    assert verdicts["Spanish mean F1 (development language's test)"] == ("not run yet", "not yet (0 of 3 seeds, so far **no**)")
    assert [row[:3] for row in tables.final_seeds(result)[1]] == [[0, "de", "W"]]
    means = {row[0]: row for row in tables.final_means(result)[1]}
    assert means["de"][2] == "**64.00** (one seed), gain **+4.00** (+4.00), seeds 0"
    assert means["es"][1:3] == ["not run", "not run"]


def test_final_seeds_pairs_w_with_one_teacher_only_where_it_ran(tables) -> None:
    """W1 (W from the seed's teacher alone) gets a row, W a "W - W1" interval beside it,
    and the column is there only when a W1 run is."""
    result = _final_result([65.0], [])
    columns, _ = tables.final_seeds(result)
    assert "W - W1 [95%]" not in columns
    w1 = dict(next(r for r in result["runs"] if r["system"] == "W"), system="W1", raw_text_f1=63.5, gold_tokens_f1=63.5)
    result["runs"].append(w1)
    result["bootstraps"] += [{"seed": 0, "lang": "de", "a": "W", "b": "W1", "difference": 1.5, "ci95": [0.25, 2.75]},
                             {"seed": 0, "lang": "de", "a": "W1", "b": "teacher", "difference": 3.5, "ci95": [2.0, 5.0]}]
    columns, rows = tables.final_seeds(result)
    at = columns.index("W - W1 [95%]")
    by_system = {row[2]: row for row in rows}
    assert by_system["W"][at] == "+1.50 [+0.25, +2.75]"
    assert by_system["W1"][at] == "" and by_system["W1"][4] == "63.50 (63.50)"
    assert by_system["W1"][columns.index("student - teacher [95%]")] == "+3.50 [+2.00, +5.00]"


def test_every_table_of_the_page_is_generated(tables) -> None:
    """No hand-written table: every table line of BENCHMARKS.md lies between markers."""
    inside, loose = None, []
    for n, line in enumerate((ROOT / "BENCHMARKS.md").read_text(encoding="utf8").split("\n"), start=1):
        match = tables.MARKER.match(line)
        if match:
            inside = match["name"]
        elif inside and line.strip() == f"<!-- /table:{inside} -->":
            inside = None
        elif line.lstrip().startswith("|") and not inside:
            loose.append(n)
    assert not loose, f"table lines outside the markers: {loose}"


def test_headline_gain_is_the_mean_of_the_bootstraps(tables) -> None:
    result = json.loads((ROOT / "benchmarks/results/three-seed-ensemble.json").read_text(encoding="utf8"))
    columns, rows = tables.headline(result)
    de = [b["difference"] for b in result["bootstraps"] if b["lang"] == "de" and (b["a"], b["b"]) == ("W", "teacher")]
    assert len(de) == 3 and rows[0][0] == "de/test"
    assert rows[0][columns.index("gain")] == f"**{sum(de) / 3:+.2f}**"


def test_the_index_lists_every_results_file_with_its_machine(tables) -> None:
    columns, rows = tables.results_index()
    files = sorted(p.stem for p in (ROOT / "benchmarks" / "results").glob("*.json"))
    assert sorted(row[0].split("]")[0].lstrip("[") for row in rows) == files
    gpu = next(row for row in rows if "protocol-on-one-gpu" in row[0])
    assert "H200" in gpu[columns.index("machine")]
    assert tables.machine_kind("a (b, c; d), e") == "a (b, c)"


def test_the_seed_table_is_gathered_from_each_runs_own_file(seed_tables) -> None:
    """default-seeds: each language's mean gain is the mean over the runs' own results
    files (read here directly), and seed 4's Spanish row with the guard as it is now is
    the post-hoc score of guard-dev-drop.json, shown beside the run's own."""
    result = json.loads((ROOT / "benchmarks/results/default-seeds.json").read_text(encoding="utf8"))
    results = ROOT / "benchmarks/results"
    seeds = sorted(int(seed) for seed in result["sources"])
    assert seeds[:7] == list(range(7))
    default = json.loads((results / "three-languages-default.json").read_text(encoding="utf8"))
    gains = [default["runs"][f"es/seed{seed}"]["shipped_vs_teacher"]["difference"] for seed in (0, 1, 2)]
    for seed in seeds[3:]:
        run = json.loads((results / f"three-languages-seed{seed}.json").read_text(encoding="utf8"))
        gains.append(run["languages"]["es"]["shipped_vs_teacher"]["difference"])
    posthoc = json.loads((results / "guard-dev-drop.json").read_text(encoding="utf8"))["posthoc_es_seed4"]
    now = gains[:4] + [posthoc["difference"]] + gains[5:]
    n = len(seeds)
    columns, rows = seed_tables.summary_table(result)
    spanish = next(row for row in rows if row[0] == "es/test")
    assert spanish[1] == str(n)
    assert spanish[3] == f"**{sum(gains) / n:+.2f}** ({sum(now) / n:+.2f} *)"
    assert f"{gains[4]:+.2f} ({posthoc['difference']:+.2f} *)" in spanish[4]
    columns, rows = seed_tables.language_table(result, "es")
    assert [row[0] for row in rows][:6] == ["0", "1", "2", "3", "4", "4, the guard now *"]
    assert rows[5][4] == "fallback" and rows[4][4] == "student"
    # the seeds run as the default ships now: max_dev_drop 5 only, so no post-hoc row
    columns, rows = seed_tables.summary_table(result, max_dev_drop=5)
    spanish = next(row for row in rows if row[0] == "es/test")
    assert spanish[1] == str(sum(result["max_dev_drop"][str(seed)] == 5 for seed in seeds))
    assert spanish[3] == f"**{sum(gains[5:]) / len(gains[5:]):+.2f}**"


def _run(gain: float, low: float, ece: float) -> dict:
    """A language of a final run's results file, as seed_tables reads it."""
    guard = {"agreement_f": 80.0, "target_label_shift": 0.05, "teacher_dev_f": 93.0, "student_dev_f": 92.0}
    return {"teacher": {"f1": 60.0, "ece": 0.1}, "shipped": "student", "shipped_f1": {"f1": 60.0 + gain, "ece": ece},
            "shipped_vs_teacher": {"difference": gain, "difference_95ci": [low, gain + 1]}, "guard": guard,
            "checkpoint": {"7": {"model": "fi/student-s7/snapshots/step-000600"}}}


def test_the_acceptance_bars_over_runs_that_leave_a_language_out(seed_tables, monkeypatch) -> None:
    """Two runs, the first without Spanish: each bar judged on the seeds that have the
    language, 'not yet' below the planned seeds, the worst seed deciding; a gain's seed named
    where a language has fewer seeds than the others; MINDROP's pick beside what shipped;
    seeds in numeric order (9 before 10); a language no run has is 'not run'."""
    files = {
        "run-a": {"languages": {"fi": _run(2.0, 0.5, 0.05), "de": _run(3.0, 1.0, 0.05)},
                  "cost": {"first_language_packaged_min": 40.0, "de_workflow_min": 14.0}},
        "run-b": {"languages": {"fi": _run(-0.2, -0.7, 0.07), "de": _run(2.5, 0.2, 0.04), "es": _run(2.5, 1.0, 0.05)},
                  "cost": {"first_language_packaged_min": 61.0, "de_workflow_min": 15.0, "es_workflow_min": 21.0}},
    }
    monkeypatch.setattr(seed_tables, "load_result", files.__getitem__)
    result = {"langs": ["fi", "de", "es"], "seeds_planned": 2, "sources": {"10": "run-b", "9": "run-a"},
              "cost_seeds": ["10"], "max_dev_drop": {"9": 5, "10": 5}, "guard_now": {}}
    columns, rows = seed_tables.acceptance_table(result)
    met = {row[0]: row[columns.index("met")] for row in rows}
    measured = {row[0]: row[columns.index("measured (seed)")] for row in rows}
    assert measured["Finnish: shipped at or above its teacher, every seed"] == "+2.00 (9), -0.20 (10)"
    assert met["Finnish: shipped at or above its teacher, every seed"] == "**no**"
    assert measured["Finnish: paired interval's lower bound, every seed"] == "+0.50 (9), -0.70 (10)"
    assert met["Finnish: paired interval's lower bound, every seed"] == "**no**"
    assert (measured["Finnish: mean gain"], met["Finnish: mean gain"]) == ("+0.90", "**no**")
    assert (measured["German: mean gain"], met["German: mean gain"]) == ("+2.75", "yes")
    assert met["German: interval above 0, every seed"] == "yes"
    assert (measured["Spanish: mean gain"], met["Spanish: mean gain"]) == ("+2.50", "not yet (1 of 2 seeds, so far yes)")
    ece = "ECE of what shipped on de/test and fi/test, every seed"
    assert (measured[ece], met[ece]) == ("de 0.050 (9), de 0.040 (10), fi 0.050 (9), fi 0.070 (10)", "**no**")
    assert (measured["first language's whole run, to its package"], met["first language's whole run, to its package"]) == (
        "61.0 min (10)", "**no**")
    assert (measured["each further language"], met["each further language"]) == ("15.0 to 21.0 min", "**no**")
    columns, rows = seed_tables.summary_table(result)
    per_seed = {row[0]: row[4] for row in rows}
    assert per_seed == {"fi/test": "+2.00, -0.20", "de/test": "+3.00, +2.50", "es/test": "+2.50 (10)"}
    assert columns[4] == "gain per seed (seeds 9 to 10)"
    columns, rows = seed_tables.language_table(result, "es")
    assert [row[0] for row in rows] == ["10"] and rows[0][columns.index("ships")] == "student (pick: step 600)"
    # a language of a run that the gathering does not count (left_out): as if the run had left it out
    left = {**result, "left_out": {"10": ["es", "de"]}}
    met = {row[0]: row[-1] for row in seed_tables.acceptance_table(left)[1]}
    assert met["Spanish: mean gain"] == "not yet (not run)" and met["German: mean gain"] == "not yet (1 of 2 seeds, so far yes)"
    assert [row[0] for row in seed_tables.summary_table(left)[1]] == ["fi/test", "de/test"]
    # no run has Finnish: its bars say so, the others are judged as before
    for name in files:
        files[name]["languages"].pop("fi")
    columns, rows = seed_tables.acceptance_table(result)
    met = {row[0]: row[columns.index("met")] for row in rows}
    assert met["Finnish: mean gain"] == "not yet (not run)" and met[ece] == "not yet (not run)"
    assert met["German: mean gain"] == "yes"
