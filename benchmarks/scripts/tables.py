"""The Markdown tables of BENCHMARKS.md, generated from benchmarks/results/ (one file per claim).

    python benchmarks/scripts/tables.py [FILE.md ...] [--check]

(by default BENCHMARKS.md and README.md). A page marks each table as

    <!-- table:CLAIM/NAME -->
    | ... |
    <!-- /table:CLAIM/NAME -->

where CLAIM is a file benchmarks/results/CLAIM.json. Its table NAME is either computed
from the file's measurements (the functions in COMPUTED, e.g. the three-seed means from
the per-seed F1 of every run) or stored in its "tables" entry as the columns and rows of
the measurement as it was reported (for results whose raw files were never kept).
One table is not one claim's: `results/index` lists every results file with its date and
the machine it ran on. Everything between the two markers is rewritten, keeping the
marker's indentation.
--check writes nothing and exits 1 when a table differs from what the results give.
"""
import json
import re
import sys
from pathlib import Path
from statistics import mean, stdev

from results_io import RESULTS, ROOT, bootstrap_of, interval, load_result, signed
from seed_tables import acceptance_table, language_table, summary_table

MARKER = re.compile(r"^(?P<indent>[ \t]*)<!-- table:(?P<name>[\w./-]+) -->[ \t]*$")


def render(columns: list, rows: list, indent: str = "") -> list:
    """Markdown lines of a table (every cell as given)."""
    def line(row: list) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in row) + "|"

    lines = [line(columns), "|" + "|".join("---" for _ in columns) + "|"] + [line(row) for row in rows]
    return [indent + line if line.strip() else line for line in lines]


# ------------------------------------------------------------------ computed tables


def _runs(result: dict) -> dict:
    return {(r["system"], r["seed"], r["lang"]): r for r in result["runs"]}


def _over_seeds(result: dict, system: str, lang: str) -> list:
    runs = _runs(result)
    return [runs[(system, s, lang)] for s in result["seeds"] if (system, s, lang) in runs]


def _sd(values: list) -> str:
    """The standard deviation over the seeds, or "one seed" for a single value."""
    return f"{stdev(values):.2f}" if len(values) > 1 else "one seed"


def _mean_sd(values: list) -> str:
    """Mean (standard deviation); none: not run."""
    return f"{mean(values):.2f} ({_sd(values)})" if values else "not run"


def _gain(result: dict, system: str, lang: str) -> float:
    """Mean over the seeds of the system's raw-text F1 minus its seed's teacher's."""
    runs = _runs(result)
    return mean(runs[(system, s, lang)]["raw_text_f1"] - runs[("teacher", s, lang)]["raw_text_f1"] for s in result["seeds"])


def three_seed_means(result: dict) -> tuple:
    """Raw-text F1 mean (sd) over the seeds, and each student's mean gain over its teacher."""
    rows = []
    for lang in result["langs"]:
        cells = [lang, _mean_sd([r["raw_text_f1"] for r in _over_seeds(result, "teacher", lang)])]
        for system in ("W", "P", "ST"):
            f1 = [r["raw_text_f1"] for r in _over_seeds(result, system, lang)]
            gain = _gain(result, system, lang)
            if system == result["default"]:
                cells.append(f"**{mean(f1):.2f}** ({stdev(f1):.2f}), gain **{signed(gain)}**")
            else:
                cells.append(f"{_mean_sd(f1)}, {signed(gain)}")
        rows.append(cells)
    return ["lang", "teacher", f"{result['default']} (default)", "P", "ST"], rows


def warm_self_training_three_seeds(result: dict) -> tuple:
    """ST-W against the teacher and W over the seeds: means (sd), and the per-seed
    bootstrap differences with their mean."""
    rows = []
    for lang in result["langs"]:
        teacher, stw, w = ([r["raw_text_f1"] for r in _over_seeds(result, s, lang)] for s in ("teacher", "ST-W", "W"))
        w_minus = [bootstrap_of(result, s, lang, "W", "ST-W")["difference"] for s in result["seeds"]]
        stw_minus = [bootstrap_of(result, s, lang, "ST-W", "teacher")["difference"] for s in result["seeds"]]
        rows.append([lang, _mean_sd(teacher), _mean_sd(stw), _mean_sd(w),
                     f"**{signed(mean(w_minus))}** (" + ", ".join(signed(x) for x in w_minus) + ")",
                     f"{signed(mean(stw_minus))} (" + ", ".join(signed(x) for x in stw_minus) + ")"])
    columns = ["lang", "teacher", "ST-W", "W (default)", "W - ST-W, mean of the seeds", "ST-W - teacher"]
    return columns, rows


def seed_bootstraps(result: dict, seed: int) -> tuple:
    """One seed's paired bootstraps of the students against the teacher and against ST."""
    rows = []
    for lang in result["langs"]:
        for a, b in (("P", "teacher"), ("W", "teacher"), ("ST", "teacher"), ("P", "ST"), ("W", "ST")):
            x = bootstrap_of(result, seed, lang, a, b)
            rows.append([f"{lang}: {a} - {b}", signed(x["difference"]), f"[{signed(x['ci95'][0])}, {signed(x['ci95'][1])}]"])
    return ["comparison", "difference", "95% interval"], rows


# the final runs with a development language (three-seed-development-language.json)


def _seeds_of(result: dict, system: str, lang: str) -> list:
    return [r["seed"] for r in _over_seeds(result, system, lang)]


def final_means(result: dict) -> tuple:
    """Teacher, default student W and ST-W over the seeds each has: F1 mean (sd), each
    student's mean gain over its seed's teacher, and W - ST-W over the seeds both have."""
    rows = []
    for lang in result["langs"]:
        cells = [lang, _mean_sd([r["raw_text_f1"] for r in _over_seeds(result, "teacher", lang)])]
        for system in ("W", "ST-W"):
            f1 = [r["raw_text_f1"] for r in _over_seeds(result, system, lang)]
            if not f1:
                cells.append("not run")
                continue
            gains = [bootstrap_of(result, s, lang, system, "teacher")["difference"] for s in _seeds_of(result, system, lang)]
            bold = "**" if system == result["default"] else ""
            cells.append(f"{bold}{mean(f1):.2f}{bold} ({_sd(f1)}), gain {bold}{signed(mean(gains))}{bold} "
                         f"({', '.join(signed(g) for g in gains)})" + ("" if len(f1) == len(result["seeds"]) else
                                                                      f", seeds {', '.join(map(str, _seeds_of(result, system, lang)))}"))
        w_minus = [bootstrap_of(result, s, lang, "W", "ST-W")["difference"] for s in _seeds_of(result, "ST-W", lang)]
        cells.append(f"{signed(mean(w_minus))} ({', '.join(signed(x) for x in w_minus)})" if w_minus else "")
        rows.append(cells)
    return ["lang", "teacher", f"{result['default']} (default)", "ST-W", "W - ST-W"], rows


def final_seeds(result: dict) -> tuple:
    """Per seed and language: F1 of the teacher and students, the paired bootstraps, the
    guard's figures and stage 2's cost."""
    rows = []
    runs = _runs(result)
    # W's paired baselines: ST-W (what MARAL's own parts add), and W1 where it ran (W from
    # the seed's teacher alone: what the ensemble adds)
    baselines = ["ST-W"] + (["W1"] if any(system == "W1" for system, _, _ in runs) else [])
    for lang in result["langs"]:
        for seed in result["seeds"]:
            teacher = runs.get(("teacher", seed, lang))
            if teacher is None:  # the seed's runs of this language are not there yet
                continue
            for system in ["W"] + baselines:
                r = runs.get((system, seed, lang))
                if r is None:
                    continue
                g = r["guard"]
                vs_w = [interval(bootstrap_of(result, seed, lang, "W", other)) if system == "W"
                        and (other, seed, lang) in runs else "" for other in baselines]
                rows.append([seed, lang, system, f"{teacher['raw_text_f1']:.2f}", f"{r['raw_text_f1']:.2f} ({r['gold_tokens_f1']:.2f})",
                             interval(bootstrap_of(result, seed, lang, system, "teacher"))] + vs_w +
                            [f"{g['student_dev_f1']:.2f} ({g['teacher_dev_f1']:.2f})", f"{g['agreement_f1']:.1f}",
                             f"{g['target_entity_ratio']:.2f}", f"{g['target_label_shift']:.3f}",
                             "trusted" if g["trusted"] else "NOT trusted",
                             f"{r['stage2']['wall_s'] / 60:.1f}", f"{r['stage2']['peak_rss_gb']:.2f}"])
    columns = (["seed", "lang", "student", "teacher F1", "student F1 (gold tokens)", "student - teacher [95%]"]
               + [f"W - {other} [95%]" for other in baselines]
               + ["en/dev F1 (teacher)", "agreement", "entity ratio", "label shift", "guard", "stage-2 min", "peak RSS GB"])
    return columns, rows


def final_scores(result: dict) -> tuple:
    """The scores' calibration: the temperature fitted on the development language's dev
    set, its ECE before and after (in sample), and on each test set ECE and precision at
    score >= 0.9, per seed."""
    rows = []
    for lang in result["langs"]:
        for system in ("teacher", "W", "ST-W", "W1"):
            found = _over_seeds(result, system, lang)
            if not found:
                continue
            temps = [r["temperature"] for r in found]
            tests = [r["test_scores"] for r in found]

            def at_09(t: dict) -> str:
                p = t["precision_at_0.9"]
                return f"{100 * p:.1f} ({t['count_at_0.9']})" if p is not None else f"none ({t['count_at_0.9']})"

            rows.append([lang, system, ", ".join(f"{t['temperature']:.2f}" for t in temps),
                         ", ".join(f"{t['dev_ece_before']:.3f} -> {t['dev_ece_after']:.3f}" for t in temps),
                         ", ".join(f"{t['ece']:.3f}" for t in tests), ", ".join(at_09(t) for t in tests),
                         ", ".join(f"{100 * t['precision_at_0.5']:.1f}" for t in tests)])
    columns = ["test", "system", "temperature per seed", "es/dev ECE before -> after", "test ECE per seed",
               "test precision at >= 0.9 (entities)", "test precision at >= 0.5"]
    return columns, rows


def final_acceptance(result: dict) -> tuple:
    """The acceptance criteria the runs can answer, each with its measured value; while
    a language's seeds are not all run, "not yet" and the seeds measured so far."""
    seeds, default = result["seeds"], result["default"]
    de_runs, es_runs = _over_seeds(result, default, "de"), _over_seeds(result, default, "es")
    de = [r["raw_text_f1"] for r in de_runs]
    boots = [bootstrap_of(result, r["seed"], "de", default, "teacher") for r in de_runs]
    es = [r["raw_text_f1"] for r in es_runs]
    ece = [r["test_scores"]["ece"] for r in de_runs]
    rss = max(r["stage2"]["peak_rss_gb"] for r in result["runs"] if "stage2" in r)
    found = {"de": len(de_runs), "es": len(es_runs)}

    def met(ok: bool, lang: str = "de") -> str:  # lang "": measured whole, not per seed
        if lang and found[lang] < len(seeds):
            return f"not yet ({found[lang]} of {len(seeds)} seeds{', so far yes' if ok else ', so far **no**'})"
        return "yes" if ok else "**no**"

    rows = [
        ["German mean F1", ">= 66.0", f"{mean(de):.2f}", met(mean(de) >= 66.0)],
        ["German F1, every seed", ">= 65.0", ", ".join(f"{x:.2f}" for x in de), met(min(de) >= 65.0)],
        ["German: student above its teacher, interval above 0, every seed", "every seed",
         ", ".join(interval(b) for b in boots), met(all(b["ci95"][0] > 0 for b in boots))],
        ["Spanish mean F1 (development language's test)", ">= 70.0", f"{mean(es):.2f}" if es else "not run yet",
         met(bool(es) and mean(es) >= 70.0, "es")],
        ["ECE on de/test, every seed", "<= 0.05", ", ".join(f"{x:.3f}" for x in ece), met(max(ece) <= 0.05)],
        ["stage 2 peak RSS, every run", "< 8 GB", f"{rss:.2f} GB", met(rss < 8.0, "")],
    ]
    if "workflow" in result:  # measured once for the default, in another results file
        wall = result["workflow"]["make_conll_wall_s"]
        rows.append(["`make conll` (German), whole workflow", "<= 90 min", f"{wall // 60} min {wall % 60} s",
                     met(wall <= 90 * 60, "")])
    return ["criterion", "required", "measured", "met"], rows


def headline(result: dict) -> tuple:
    """Per language: the teacher's and the shipped student's raw-text F1 over the seeds, the
    student's gain per seed with its paired-bootstrap interval and their mean, and the
    test-set ECE of both at their stored temperatures."""
    rows, default = [], result["default"]
    for lang in result["langs"]:
        teacher, student = _over_seeds(result, "teacher", lang), _over_seeds(result, default, lang)
        boots = [bootstrap_of(result, r["seed"], lang, default, "teacher") for r in student]
        rows.append([f"{lang}/test", len(student), _mean_sd([r["raw_text_f1"] for r in teacher]),
                     f"**{_mean_sd([r['raw_text_f1'] for r in student])}**",
                     f"**{signed(mean(b['difference'] for b in boots))}**",
                     ", ".join(interval(b) for b in boots),
                     ", ".join(f"{r['test_scores']['ece']:.3f}" for r in teacher),
                     ", ".join(f"{r['test_scores']['ece']:.3f}" for r in student)])
    columns = ["test set", "seeds", "teacher F1", "student F1", "gain", "gain per seed [95%]",
               "teacher ECE per seed", "student ECE per seed"]
    return columns, rows


def stored_rows(result: dict, table: str, rows: tuple) -> tuple:
    """Some rows of a stored table, with its columns."""
    stored = result["tables"][table]
    return stored["columns"], [stored["rows"][i] for i in rows]


def score_map_finnish(result: dict) -> tuple:
    """ECE on fi/dev of each Finnish model under each score map, and their mean."""
    maps = list(result["finnish_mean_ece"])
    rows = [[name, f"{run['precision'] * 100:.1f}"] + [f"{run['ece'][m]:.3f}" for m in maps]
            for name, run in result["finnish"].items()]
    rows.append(["mean", ""] + [f"{result['finnish_mean_ece'][m]:.3f}" for m in maps])
    return ["Finnish model (fi/dev)", "precision"] + maps, rows


def score_map_spanish(result: dict) -> tuple:
    """ECE on the held-out es/dev sentences of each Spanish student, fitted in-language."""
    maps = list(next(iter(result["spanish"].values()))["ece"])
    rows = [[name, str(run["held_out_entities"]), f"{run['fitted']['T']:.2f}", f"{run['fitted']['P'][0]:.2f}, {run['fitted']['P'][1]:+.2f}"]
            + [f"{run['ece'][m]:.3f}" for m in maps] for name, run in result["spanish"].items()]
    return ["Spanish student (held-out es/dev)", "entities", "fitted T", "Platt a, b"] + maps, rows


COMPUTED = {
    "three-seed-ensemble/headline": headline,
    "three-seed-protocol/means": three_seed_means,
    "three-seed-protocol/warm-self-training-means": warm_self_training_three_seeds,
    "three-seed-protocol/bootstrap-seed-1": lambda r: seed_bootstraps(r, 1),
    "three-seed-protocol/bootstrap-seed-2": lambda r: seed_bootstraps(r, 2),
    "three-seed-development-language/means": final_means,
    "three-seed-development-language/seeds": final_seeds,
    "three-seed-development-language/scores": final_scores,
    "three-seed-development-language/acceptance": final_acceptance,
    # the final runs of the three-teacher default, E (its students are named W in the runs)
    "three-seed-ensemble/means": final_means,
    "three-seed-ensemble/seeds": final_seeds,
    "three-seed-ensemble/scores": final_scores,
    "three-seed-ensemble/acceptance": final_acceptance,
    # German seed 2 of E again, beside ST-W, on retrained teachers (a pair of its own)
    "german-seed2-ablation/seeds": final_seeds,
    "german-seed2-ablation/scores": final_scores,
    # the whole run and its teacher step (the timing rules read both)
    "workflow-conll-german-soup/whole": lambda r: stored_rows(r, "steps", (0, 1)),
    "workflow-conll-german-soup-side-by-side/whole": lambda r: stored_rows(r, "steps", (0, 1)),
    # the guard's figures over all the students (the file has the groups too)
    "guard-predictors/all-students": lambda r: stored_rows(r, "predictors", tuple(
        i for i, row in enumerate(r["tables"]["predictors"]["rows"]) if row[0] == "all students")),
    # what the default shipped per language over the final runs (their own results files)
    "default-seeds/summary": summary_table,
    "default-seeds/as-it-ships": lambda r: summary_table(r, max_dev_drop=5),
    "default-seeds/fi": lambda r: language_table(r, "fi"),
    "default-seeds/de": lambda r: language_table(r, "de"),
    "default-seeds/es": lambda r: language_table(r, "es"),
    # what the default with MINDROP shipped (seeds 10 on), and the bars
    "mindrop-seeds/summary": summary_table,
    "mindrop-seeds/acceptance": acceptance_table,
    "mindrop-seeds/fi": lambda r: language_table(r, "fi"),
    "mindrop-seeds/de": lambda r: language_table(r, "de"),
    "mindrop-seeds/es": lambda r: language_table(r, "es"),
    # the default with SKIP-FIRST (MINDROP from the second half of stage 2) on every language
    "skip-first-seeds/summary": summary_table,
    "skip-first-seeds/fi": lambda r: language_table(r, "fi"),
    "skip-first-seeds/de": lambda r: language_table(r, "de"),
    "skip-first-seeds/es": lambda r: language_table(r, "es"),
    # the default as it ships: SKIP-FIRST for Finnish and German, DEVSEL for Spanish
    "shipped-default-seeds/summary": summary_table,
    "shipped-default-seeds/acceptance": acceptance_table,
    "shipped-default-seeds/es": lambda r: language_table(r, "es"),
    # score maps on fi/dev (Finnish models) and held-out es/dev (Spanish students)
    "score-map-dev/finnish": score_map_finnish,
    "score-map-dev/spanish": score_map_spanish,
    # the bare length-sorted encoder against annotate end to end
    "annotate-throughput/against-the-encoder": lambda r: stored_rows(r, "host-side", (2, 4)),
}


# ------------------------------------------------------------------ the document


def machine_kind(machine: str) -> str:
    """The machine of a results file up to its first ";" (its load and threads follow in
    the file), parentheses closed."""
    kind = machine.split(";")[0].strip()
    return kind + ")" * (kind.count("(") - kind.count(")"))


def results_index() -> tuple:
    """Every results file: its date, the machine it ran on and its claim."""
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf8"))
        rows.append([f"[{path.stem}](benchmarks/results/{path.name})", result["date"], machine_kind(result["machine"]),
                     result["claim"].replace("|", "/")])
    return ["results file", "date", "machine", "claim"], rows


def table_lines(name: str, indent: str) -> list:
    if name == "results/index":
        return render(*results_index(), indent)
    claim, _, table = name.partition("/")
    result = load_result(claim)
    if name in COMPUTED:
        columns, rows = COMPUTED[name](result)
    else:
        try:
            stored = result["tables"][table]
        except KeyError:
            raise SystemExit(f"benchmarks/results/{claim}.json has no table {table!r}") from None
        columns, rows = stored["columns"], stored["rows"]
    return render(columns, rows, indent)


def generate(text: str) -> str:
    """The document with every marked table rewritten from the results."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        match = MARKER.match(lines[i])
        if match:
            name, indent = match["name"], match["indent"]
            end = f"<!-- /table:{name} -->"
            j = i + 1
            while j < len(lines) and lines[j].strip() != end:
                j += 1
            if j == len(lines):
                raise SystemExit(f"table {name}: no closing marker {end}")
            out += table_lines(name, indent)
            out.append(lines[j])
            i = j
        i += 1
    return "\n".join(out)


def main(argv: list) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or [ROOT / "BENCHMARKS.md", ROOT / "README.md"]
    stale = 0
    for path in paths:
        text = path.read_text(encoding="utf8")
        new = generate(text)
        if new == text:
            continue
        if check:
            print(f"{path}: tables are out of date; run python benchmarks/scripts/tables.py", file=sys.stderr)
            stale = 1
        else:
            path.write_text(new, encoding="utf8")
    return stale


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
