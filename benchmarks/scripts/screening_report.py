"""Add stage-2 screening rows to a results file, read from the runs' own outputs.

    python benchmarks/scripts/screening_report.py RESULTS.json --row NAME EVAL MODEL TIMING GUARD [--row ...]
        [--teacher-row EVAL MODEL] [--seed N] [--mean-seeds A,B] [--command CMD ...] [--commit SHA]

NAME: the candidate's name in the table. EVAL: the `spacy_maral evaluate -o` JSON of
es/dev; MODEL: the name the model had there. TIMING: its stage-2 `measure` JSON (wall
and peak RSS), or "-" when the candidate added no training (e.g. an average of an
existing run's snapshots). GUARD: its `spacy_maral guard` JSON, or "-". The teacher row
gives the reference F1; every candidate row says its difference from it. Rows are added
or replaced by name, in the order given; the table "screening" (seed 0; "seedN" for
--seed N) is rebuilt from all rows of that seed, and the table "two_seed_means" from the
candidates that both screened seeds have (the protocol's rule 3; seeds 0 and 1 unless
--mean-seeds names others, recorded in the file).
"""
import argparse
import json
from pathlib import Path
from typing import Optional


def raw_f1(eval_path: Path, model: str) -> dict:
    results = json.loads(Path(eval_path).read_text(encoding="utf8"))["results"]
    if model not in results:
        raise SystemExit(f"{eval_path} has no model {model!r} (it has {sorted(results)})")
    raw = results[model]["raw_text"]
    return {"es_dev_raw_f1": round(100 * raw["ents_f"], 2), "p": round(100 * raw["ents_p"], 2), "r": round(100 * raw["ents_r"], 2)}


def optional_json(path: str) -> Optional[dict]:
    return None if path == "-" else json.loads(Path(path).read_text(encoding="utf8"))


def row_of(name: str, entry: dict, teacher_f1: float) -> list:
    wall = f"{entry['wall_s'] / 60:.1f} min" if entry.get("wall_s") else ""
    rss = f"{entry['peak_rss_gb']:.2f} GB" if entry.get("peak_rss_gb") else ""
    guard = entry.get("guard") or {}
    drift = ""
    if guard.get("agreement_f") is not None:
        drift = f"{guard['agreement_f']:.1f}"
        if guard.get("target_entity_ratio") is not None:
            drift += f" / {guard['target_entity_ratio']:.2f}x / {guard['target_label_shift']:.3f}"
    return [name, f"{entry['es_dev_raw_f1']:.2f}", f"{entry['es_dev_raw_f1'] - teacher_f1:+.2f}", wall, rss, drift]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--row", nargs=5, action="append", default=[], metavar=("NAME", "EVAL", "MODEL", "TIMING", "GUARD"))
    parser.add_argument("--teacher-row", nargs=2, metavar=("EVAL", "MODEL"))
    parser.add_argument("--command", action="append", default=[], help="a command that made the new rows (recorded)")
    parser.add_argument("--commit", help="the commit the new rows ran on (recorded)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the rows (0: the screening)")
    parser.add_argument("--mean-seeds", help="the two screened seeds whose mean rule 3 reads, e.g. 1,2 (default 0,1)")
    args = parser.parse_args()
    result = json.loads(args.results.read_text(encoding="utf8"))
    suffix = "" if args.seed == 0 else f"_seed{args.seed}"
    if args.teacher_row:
        result["teacher_es_dev_raw_f1" + suffix] = raw_f1(*args.teacher_row)["es_dev_raw_f1"]
    teacher_f1 = result["teacher_es_dev_raw_f1" + suffix]
    candidates = result.setdefault("candidates" + suffix, {})
    for name, eval_path, model, timing, guard in args.row:
        entry = raw_f1(Path(eval_path), model)
        t = optional_json(timing)
        if t is not None:
            entry.update({"wall_s": t["wall_s"], "peak_rss_gb": t["peak_rss_gb"]})
        g = optional_json(guard)
        if g is not None:
            entry["guard"] = {k: g.get(k) for k in ("agreement_f", "target_entity_ratio", "target_label_shift",
                                                    "student_dev_f", "teacher_dev_f", "trusted")}
        candidates[name] = entry
    result["command"] = list(result.get("command", [])) + [c for c in args.command if c not in result.get("command", [])]
    if args.commit:
        earlier = result.get("commit", "")
        result["commit"] = earlier if args.commit in earlier else f"{earlier}, {args.commit}".strip(", ")
    rows = [["teacher (stage 1)", f"{teacher_f1:.2f}", "", "", "", ""]]
    rows += [row_of(name, entry, teacher_f1) for name, entry in candidates.items()]
    result.setdefault("tables", {})["screening" if args.seed == 0 else f"seed{args.seed}"] = {
        "columns": [f"seed {args.seed}, es/dev raw text", "F1", "vs teacher", "stage-2 wall", "stage-2 peak RSS",
                    "guard: agreement / entity ratio / label shift"],
        "rows": rows,
    }
    if args.mean_seeds:
        result["mean_seeds"] = [int(x) for x in args.mean_seeds.split(",")]
    seeds = result.get("mean_seeds", [0, 1])
    per_seed = [result.get("candidates" + ("" if n == 0 else f"_seed{n}"), {}) for n in seeds]
    both = [name for name in per_seed[0] if all(name in c for c in per_seed[1:])]
    if both:
        means = {name: sum(c[name]["es_dev_raw_f1"] for c in per_seed) / len(seeds) for name in both}
        reference = next(iter(means.values()))  # the first row: the default
        result["tables"]["two_seed_means"] = {
            "columns": ["es/dev raw-text F1"] + [f"seed {n}" for n in seeds] + ["mean", "vs the default"],
            "rows": [[name] + [f"{c[name]['es_dev_raw_f1']:.2f}" for c in per_seed] + [f"{means[name]:.2f}",
                     "" if i == 0 else f"{means[name] - reference:+.2f}"] for i, name in enumerate(both)],
        }
    args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
