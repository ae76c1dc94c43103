"""Class-mean geometry of trained maral pipelines, two ways (see spacy_maral.margins):
the estimator state the logits use, and the class means of the span vectors of gold spans.

    python scripts/class_geometry.py OUT.json DOCS.spacy NAME=MODEL_DIR ... [--limit 500]
"""
import json
from pathlib import Path
from typing import List

import spacy
import typer

from spacy_maral.margins import class_mean_geometry, span_class_geometry
from spacy_maral.pseudo_label import iter_target_docs

KEYS = ("min_angle_deg", "min_angle_entities_deg", "mean_cosine", "max_cosine")


def main(
    output: Path = typer.Argument(..., help="JSON file to write"),
    docs_path: Path = typer.Argument(..., help="gold-annotated docs (.spacy or CoNLL), e.g. the source dev set"),
    models: List[str] = typer.Argument(..., help="NAME=MODEL_DIR pairs"),
    limit: int = typer.Option(500, help="use the first N docs"),
) -> None:
    result = {"docs": str(docs_path), "limit": limit, "models": {}}
    for pair in models:
        name, path = pair.split("=", 1)
        nlp = spacy.load(path)
        docs = list(iter_target_docs(docs_path, nlp, gold_tokens=True))[:limit]
        state = class_mean_geometry(nlp)
        spans = span_class_geometry(nlp, docs)
        result["models"][name] = {"model": path, "estimator_state": state, "span_vectors": spans}
        print(f"{name:>14}: state {', '.join(f'{k} {state[k]}' for k in KEYS)}")
        print(f"{'':>14}  spans {', '.join(f'{k} {spans[k]}' for k in KEYS)}, R {spans['resultant']}")
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
