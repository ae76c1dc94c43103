"""Candidate DEVSEL's screen: a student's checkpoint chosen on its own language's dev set.

    python benchmarks/scripts/devsel_screen.py OUT.json NAME=RUN_DIR:PER_SENTENCE_JSON [...] --commit COMMIT

RUN_DIR holds one retrained student's screen (as mindrop_screen.py's): guard/sSTEP.json for
the snapshot of step STEP (s800 is model-last), whose source dev F1 the English dev rule
reads; PER_SENTENCE_JSON holds every snapshot's per-sentence counts (tp, predicted, gold)
on the target language's dev set. No model runs: 1,000 random halvings of each dev set
(numpy seed 0); DEVSEL picks the candidate with the highest F1 on half A (the later on a
tie), and on half B its F1 is compared with the English dev pick's. The candidates are
SKIP-FIRST's (selection.first_candidate_step): the snapshots of the second half of stage 2
and model-last (steps 500 to 800 here). Writes each case's figures and the rule of
PROTOCOL.md's "Candidate DEVSEL".
"""
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import numpy
from paired_bootstrap import f1
from stop_screen import provenance, take_commit

from spacy_maral.training.selection import SKIP_FIRST, first_candidate_step

HALVINGS = 1000


def candidate_steps(steps: Sequence[int]) -> List[int]:
    """The steps select-checkpoint keeps with SKIP_FIRST (the last one is model-last in these screens)."""
    first = first_candidate_step(max(steps), SKIP_FIRST)
    return sorted(step for step in steps if step >= first)


def english_dev_pick(run_dir: Path, candidates: Sequence[int]) -> int:
    """SKIP-FIRST's pick: the candidate step with the highest source dev F1, the later on a tie."""
    scores = {step: json.loads((run_dir / "guard" / f"s{step}.json").read_text())["student_dev_f"] for step in candidates}
    return max(candidates, key=lambda step: (scores[step], step))


def subset_f1(counts: numpy.ndarray, subsets: numpy.ndarray) -> numpy.ndarray:
    """F1 in points of every candidate on every subset of sentences: (subsets, candidates).

    counts (numpy.ndarray): (candidates, sentences, 3) per-sentence counts.
    subsets (numpy.ndarray): (subsets, sentences) booleans.
    """
    return 100.0 * f1(numpy.einsum("hs,csk->hck", subsets.astype(numpy.int64), counts))


def best_later_on_tie(scores: numpy.ndarray) -> numpy.ndarray:
    """For each row of (rows, candidates) scores, the index of the highest, the later on a tie."""
    return scores.shape[1] - 1 - numpy.argmax(scores[:, ::-1], axis=1)  # the first maximum from the end


def case_screen(run_dir: Path, per_sentence_json: Path, rng: numpy.random.Generator) -> dict:
    """DEVSEL against the English dev pick for one student, over HALVINGS halvings of its dev set."""
    per_sentence = json.loads(per_sentence_json.read_text())["raw_text"]
    candidates = candidate_steps([int(name[1:]) for name in per_sentence if name[:1] == "s" and name[1:].isdigit()])
    counts = numpy.stack([numpy.asarray(per_sentence[f"s{step}"], dtype=numpy.int64).reshape(-1, 3) for step in candidates])
    n = counts.shape[1]
    halves = numpy.zeros((HALVINGS, n), dtype=bool)
    for row in halves:
        row[rng.permutation(n)[: n // 2]] = True
    picks = best_later_on_tie(subset_f1(counts, halves))
    english = candidates.index(english_dev_pick(run_dir, candidates))
    on_b = subset_f1(counts, ~halves)
    gain = on_b[numpy.arange(HALVINGS), picks] - on_b[:, english]
    whole = subset_f1(counts, numpy.ones((1, n), dtype=bool))
    return {
        "sentences": int(n),
        "english_dev_pick": candidates[english],
        "whole_dev_f1": {str(step): round(float(score), 2) for step, score in zip(candidates, whole[0])},
        "devsel_pick_on_the_whole_dev_set": candidates[int(best_later_on_tie(whole)[0])],
        "devsel_picks_on_half_a": {str(step): int((picks == i).sum()) for i, step in enumerate(candidates)},
        "held_out_gain_mean": round(float(gain.mean()), 2),
        "held_out_gain_percentiles_2_5_97_5": [round(float(q), 2) for q in numpy.percentile(gain, [2.5, 97.5])],
        "share_of_halvings_lower": round(float((gain < 0).mean()), 3),
    }


def tables(cases: Dict[str, dict], spanish: List[str]) -> dict:
    """Each case: the English dev pick, DEVSEL's picks on half A, and the held-out gain."""
    rows = []
    for name, c in cases.items():
        picks = ", ".join(f"{step}: {k}" for step, k in c["devsel_picks_on_half_a"].items() if k)
        low, high = c["held_out_gain_percentiles_2_5_97_5"]
        rows.append([name, "es/dev" if name in spanish else "fi/dev", c["sentences"], f"step {c['english_dev_pick']}", picks,
                     f"{c['held_out_gain_mean']:+.2f} [{low:+.2f}, {high:+.2f}]", f"{100 * c['share_of_halvings_lower']:.0f}%"])
    return {"screen": {"columns": ["case", "dev set", "sentences", "English dev pick", "DEVSEL's picks on half A (step: halvings)",
                                   "held-out gain, mean [2.5%, 97.5% of halvings]", "halvings where DEVSEL's pick is lower"],
                       "rows": rows}}


def main(argv) -> None:
    commit, argv = take_commit(argv)
    out = Path(argv[0])
    rng = numpy.random.default_rng(0)
    cases = {}
    for arg in argv[1:]:
        name, _, paths = arg.partition("=")
        run_dir, _, per_sentence = paths.partition(":")
        cases[name] = case_screen(Path(run_dir), Path(per_sentence), rng)
    spanish = [name for name in cases if name.startswith("es")]
    gains = {name: c["held_out_gain_mean"] for name, c in cases.items()}
    spanish_mean = round(float(numpy.mean([gains[name] for name in spanish])), 2)
    adopted = all(g >= -0.5 for g in gains.values()) and spanish_mean >= 0.5
    result = {
        "claim": f"Candidate DEVSEL on dev sets: {'adopted' if adopted else 'not adopted'} (held-out gain over the English "
                 "dev pick: " + ", ".join(f"{n} {g:+.2f}" for n, g in gains.items()) + f"; Spanish mean {spanish_mean:+.2f})",
        "measured": "No model run: the per-sentence counts (raw text, exact character offsets) of every snapshot of the "
                    "STOP and MINDROP screens on the target dev set, and each snapshot's English dev F1 from its guard "
                    f"report; {HALVINGS} random halvings of each dev set (numpy seed 0): DEVSEL picks on one half, and on "
                    "the other its pick's F1 minus the English dev pick's (candidates: steps 500, 600, 700 and model-last)",
        **provenance("devsel_screen.py", [argv[0]] + [f"{name}=<its screen folder>:<its per-sentence counts>" for name in cases],
                     "DEVSEL", commit),
        "cases": cases,
        "rule": {"held_out_gain": gains, "spanish_mean": spanish_mean, "adopted": adopted,
                 "bars": "each case at least -0.5, the Spanish cases' mean at least +0.5"},
        "tables": tables(cases, spanish),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("claim", "rule")}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
