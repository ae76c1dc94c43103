"""The RATE rule: a student's decision rule (`inference_tau`, the weight of the source
class prior) set per language without target tags, as the value of a grid at which the
student's entities on the pseudo-labelled target text are closest in number to the
pseudo-labels' own entities (`spacy_maral.training.decision_rule`, which the guard's
fallback uses).

    python benchmarks/scripts/rate_rule.py OUT.json STUDENT PSEUDO_DIR [--write DIR] [--batch-size 64]

PSEUDO_DIR: the shards of `pseudo-label` (their tokens and their entity count; no tags
read). --write DIR: a copy of STUDENT whose config sets the chosen inference_tau (for
`evaluate`). Writes the entity count at every grid value and the choice.
"""
import argparse
import json
import shutil
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("student", type=Path)
    parser.add_argument("pseudo", type=Path)
    parser.add_argument("--write", type=Path, default=None)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    from thinc.api import Config
    from tqdm import tqdm

    from spacy_maral.corpora.docbin import read_docs
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.maral_ner import find_maral_ner
    from spacy_maral.training.decision_rule import rate_inference_tau

    nlp = load_pipeline(args.student)
    ner = find_maral_ner(nlp)
    stored_tau = float(ner.inference_tau)
    docs = [d for d in read_docs(args.pseudo, nlp) if len(d)]
    with tqdm(total=len(docs), desc="student on the target text", unit="sent") as bar:
        rate = rate_inference_tau(nlp, docs, batch_size=args.batch_size, progress=bar.update)
    pseudo_entities, counts, chosen = rate.pseudo_label_entities, rate.entities, rate.chosen
    result = {
        "rule": ("RATE: the inference_tau of the grid at which the student's entities on the pseudo-labelled "
                 "target text are closest in number to the pseudo-labels'"),
        "student": str(args.student), "pseudo_labels": str(args.pseudo), "sentences": len(docs),
        "pseudo_label_entities": pseudo_entities, "stored_inference_tau": stored_tau,
        "student_entities": {f"{tau:g}": n for tau, n in counts.items()}, "chosen_inference_tau": chosen,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rule"}, indent=1))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    if args.write is not None:
        shutil.copytree(args.student, args.write)
        config = Config().from_disk(args.write / "config.cfg", interpolate=False)
        config["components"][ner.name]["inference_tau"] = chosen
        config.to_disk(args.write / "config.cfg")


if __name__ == "__main__":
    main()
