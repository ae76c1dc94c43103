"""The tables of the final runs, gathered from each run's own results file: what shipped
per language and seed, the summary per language, and the acceptance bars over the seeds.
A gathering file (default-seeds.json, shipped-default-seeds.json) names its languages ("langs",
the first language of each run first), the runs ("sources": seed -> results file), the
guard's `max_dev_drop` per seed and "guard_now" (post-hoc scores of the guard as it is
now); for the acceptance bars also "seeds_planned" (the seeds a bar needs) and
"cost_seeds" (the runs whose wall times are cost figures); optionally "left_out" (seed ->
the languages of that run that the gathering does not count, with "left_out_why")."""
from statistics import mean
from typing import Optional

from results_io import interval, load_result, signed


def seed_runs(result: dict, lang: str, max_dev_drop: Optional[float] = None) -> list:
    """(seed, run) of `lang` in each final run that `result["sources"]` names, in seed
    order: a run as its own results file records it (teacher, shipped, shipped_f1,
    shipped_vs_teacher, guard), from `languages` (one seed a file; a run without `lang` is
    left out) or `runs` ("LANG/seedK"); a run whose `lang` `result["left_out"]` names is
    left out too.
    max_dev_drop: only the runs whose guard had this threshold (None: every run)."""
    out = []
    for seed, claim in sorted(result["sources"].items(), key=lambda x: int(x[0])):
        if max_dev_drop is not None and result["max_dev_drop"][seed] != max_dev_drop:
            continue
        if lang in result.get("left_out", {}).get(seed, []):
            continue
        source = load_result(claim)
        if "languages" in source and lang not in source["languages"]:
            continue  # a run that left this language out
        run = source["languages"][lang] if "languages" in source else source["runs"][f"{lang}/seed{seed}"]
        out.append((int(seed), run))
    return out


def guard_now(result: dict, lang: str, seed: int):
    """What the guard as it is now ships where it decides otherwise than the run's (a
    post-hoc score recorded in the results file that `result["guard_now"]` names), or None."""
    ref = result["guard_now"].get(f"{lang}/{seed}")
    return load_result(ref["file"])[ref["key"]] if ref else None


def _step(model: str) -> str:
    """"step 600" for ".../snapshots/step-000600", the folder's name otherwise (model-last)."""
    name = model.rsplit("/", 1)[-1]
    return f"step {int(name.split('-')[1])}" if name.startswith("step-") else name


def language_table(result: dict, lang: str) -> tuple:
    """One language over the final runs: the teacher, what shipped and its gain with the
    paired-bootstrap interval, ECE and the guard's decision; a row more where the guard as
    it is now decides otherwise (post hoc). Where a run chose the student's checkpoint
    (MINDROP), "ships" names the pick: "student (pick: step 800)"."""
    rows = []
    for seed, run in seed_runs(result, lang):
        guard, threshold = run["guard"], result["max_dev_drop"][str(seed)]
        agreement, shift = guard["agreement_f"], guard["target_label_shift"]
        figures = (f"agreement {agreement:.2f}{' < 60' if agreement < 60 else ''}; "
                   f"label shift {shift:.3f}{' > 0.2' if shift > 0.2 else ''}")
        if "teacher_dev_f" in guard:
            drop = guard["teacher_dev_f"] - guard["student_dev_f"]
            figures += f"; en/dev drop {drop:.2f}{f' > {threshold:g}' if drop > threshold else ''}"
        ships = run["shipped"]
        for pick in run.get("checkpoint", {}).values():  # the snapshot MINDROP picked
            ships += f" (pick: {_step(pick['model'])})"
        if run.get("read_as", "").startswith("post hoc"):
            ships += " (post hoc: the label-shift threshold was chosen after this test was read)"
        rows.append([str(seed), f"{run['teacher']['f1']:.2f}", figures, f"{threshold:g}", ships,
                     f"{run['shipped_f1']['f1']:.2f}", f"**{interval(run['shipped_vs_teacher'], 'difference_95ci')}**",
                     f"{run['teacher']['ece']:.3f}", f"{run['shipped_f1']['ece']:.3f}"])
        now = guard_now(result, lang, seed)
        if now:
            rows.append([f"{seed}, the guard now *", f"{run['teacher']['f1']:.2f}", now["guard"], "5",
                         now["shipped"], f"{now['f1']:.2f}", f"**{interval(now, 'difference_95ci')}**",
                         f"{run['teacher']['ece']:.3f}", f"{now['ece']:.3f}"])
    columns = ["seed", "teacher F1", "guard figures", "max_dev_drop", "ships", "shipped F1",
               "shipped - teacher [95%]", "teacher ECE", "shipped ECE"]
    return columns, rows


def summary_table(result: dict, max_dev_drop: Optional[float] = None) -> tuple:
    """Per language over the final runs: the mean gain of what shipped over its teacher,
    as run and with the guard as it is now (post-hoc rows in its place), the gain per
    seed, how many shipped below their teacher, how many gains have an interval above 0,
    the lowest interval bound and the largest ECE.

    max_dev_drop: only the runs whose guard had this threshold (None: every run)."""
    rows, runs_of = [], {lang: seed_runs(result, lang, max_dev_drop) for lang in result["langs"]}
    every = sorted({seed for runs in runs_of.values() for seed, _ in runs})
    for lang, runs in runs_of.items():
        if not runs:
            continue
        gains = [run["shipped_vs_teacher"]["difference"] for _, run in runs]
        now = [(guard_now(result, lang, seed) or run["shipped_vs_teacher"])["difference"] for seed, run in runs]
        per_seed = [signed(g) + (f" ({signed(n)} *)" if n != g else "") for g, n in zip(gains, now)]
        if [seed for seed, _ in runs] != every:  # a language some runs left out: name each gain's seed
            per_seed = [f"{text} ({seed})" for text, (seed, _) in zip(per_seed, runs)]
        lows = [run["shipped_vs_teacher"]["difference_95ci"][0] for _, run in runs]
        rows.append([f"{lang}/test", str(len(runs)), f"{mean(run['teacher']['f1'] for _, run in runs):.2f}",
                     f"**{signed(mean(gains))}**" + (f" ({signed(mean(now))} *)" if now != gains else ""),
                     ", ".join(per_seed), str(sum(g < 0 for g in gains)), str(sum(low > 0 for low in lows)),
                     signed(min(lows)), f"{max(run['shipped_f1']['ece'] for _, run in runs):.3f}"])
    columns = ["test set", "seeds", "teacher F1 (mean)", "mean gain", f"gain per seed (seeds {every[0]} to {every[-1]})",
               "below the teacher", "interval above 0", "lowest interval bound", "largest shipped ECE"]
    return columns, rows


def acceptance_table(result: dict) -> tuple:
    """The issue's bars over the final runs that `result["sources"]` names, each with its
    measured value (the seed in parentheses): a bar over seeds says "not yet" while its
    language has fewer than `result["seeds_planned"]` runs. Cost: the wall times of the
    runs `result["cost_seeds"]` names (those run on an idle machine), judged as measured."""
    planned = result["seeds_planned"]
    runs = {lang: seed_runs(result, lang) for lang in result["langs"]}
    diffs = {lang: [run["shipped_vs_teacher"] for _, run in r] for lang, r in runs.items()}

    def met(ok, found: int) -> str:
        if found == 0:
            return "not yet (not run)"
        if found < planned:
            return f"not yet ({found} of {planned} seeds{', so far yes' if ok else ', so far **no**'})"
        return "yes" if ok else "**no**"

    def per_seed(lang: str, values) -> str:
        return ", ".join(f"{v} ({seed})" for v, (seed, _) in zip(values, runs[lang]))

    def bar(name: str, lang: str, required: str, measured, test) -> list:
        """A row on one language's runs; `measured` and `test` read its differences."""
        found = diffs[lang]
        return [name, required, measured(found) if found else "not run", met(bool(found) and test(found), len(found))]

    gains = lambda found: [x["difference"] for x in found]  # noqa: E731
    lows = lambda found: [x["difference_95ci"][0] for x in found]  # noqa: E731
    rows = [
        bar("Finnish: shipped at or above its teacher, every seed", "fi", ">= 0",
            lambda f: per_seed("fi", map(signed, gains(f))), lambda f: min(gains(f)) >= 0),
        bar("Finnish: paired interval's lower bound, every seed", "fi", ">= -0.5",
            lambda f: per_seed("fi", map(signed, lows(f))), lambda f: min(lows(f)) >= -0.5),
        bar("Finnish: mean gain", "fi", ">= +1.0", lambda f: signed(mean(gains(f))), lambda f: mean(gains(f)) >= 1.0),
        bar("German: mean gain", "de", ">= +2.5", lambda f: signed(mean(gains(f))), lambda f: mean(gains(f)) >= 2.5),
        bar("German: interval above 0, every seed", "de", "every seed",
            lambda f: per_seed("de", [interval(x, "difference_95ci") for x in f]), lambda f: min(lows(f)) > 0),
        bar("Spanish: mean gain", "es", ">= +2.0", lambda f: signed(mean(gains(f))), lambda f: mean(gains(f)) >= 2.0),
    ]
    ece = [(lang, seed, run["shipped_f1"]["ece"]) for lang in ("de", "fi") for seed, run in runs[lang]]
    rows.append(["ECE of what shipped on de/test and fi/test, every seed", "<= 0.06",
                 ", ".join(f"{lang} {x:.3f} ({seed})" for lang, seed, x in ece) or "not run",
                 met(bool(ece) and max(x for *_, x in ece) <= 0.06, min(len(runs["de"]), len(runs["fi"])))])
    costs = [(seed, load_result(result["sources"][seed])["cost"]) for seed in result["cost_seeds"]]
    first = [cost["first_language_packaged_min"] for _, cost in costs]
    further = [cost[f"{lang}_workflow_min"] for _, cost in costs for lang in result["langs"][1:]
               if f"{lang}_workflow_min" in cost]
    if first:
        rows.append(["first language's whole run, to its package", "<= 60 min",
                     ", ".join(f"{x} min ({seed})" for x, (seed, _) in zip(first, costs)), "yes" if max(first) <= 60 else "**no**"])
    if further:
        rows.append(["each further language", "<= 20 min", f"{min(further)} to {max(further)} min",
                     "yes" if max(further) <= 20 else "**no**"])
    return ["criterion", "required", "measured (seed)", "met"], rows
