"""`python -m spacy_maral evaluate`: score pipelines side by side and draw predictions."""
import json
from pathlib import Path
from typing import List, Optional

import typer

from . import app


@app.command("evaluate")
def evaluate_command(
    test_path: Path = typer.Argument(..., help="Gold test corpus (.spacy file or directory, or a CoNLL-style file)."),
    models: List[str] = typer.Argument(..., help="Pipelines to score, each NAME=PATH (or a bare PATH)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="JSON file for the metrics of every pipeline."),
    html: Optional[Path] = typer.Option(None, "--html", help="displaCy page of the last pipeline's predictions, with scores."),
    n_sample: int = typer.Option(30, "--n-sample", help="Test sentences drawn on the displaCy page."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Docs per nlp.pipe batch."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
) -> None:
    """Entity-level P/R/F1 (spaCy's NER scorer, over all gold entities) and F1 per type
    of each pipeline on the same test set, as one table; optionally a JSON file and a
    displaCy HTML page of the last pipeline's entities with their probabilities.
    """
    import spacy
    from thinc.api import require_gpu
    from wasabi import Printer

    from ..convert import ConversionError
    from ..pseudo_label import iter_target_docs
    from ..report import evaluate_pipeline, format_table, write_predictions_page
    from ..fileio import atomic_write_text

    if gpu_id >= 0:
        require_gpu(gpu_id)
    msg = Printer()
    results = {}
    nlp = None
    try:
        for spec in models:
            name, _, path = spec.rpartition("=") if "=" in spec else (Path(spec).name, "", spec)
            nlp = spacy.load(path)
            docs = list(iter_target_docs(test_path, nlp))
            if not docs:
                raise ValueError(f"{test_path} holds no sentences")
            msg.info(f"{name}: {path} on {len(docs)} sentences of {test_path}")
            results[name] = evaluate_pipeline(nlp, docs, batch_size=batch_size)
    except (OSError, ValueError, ConversionError) as err:
        msg.fail(f"evaluate failed: {err}", exits=1)
    print(format_table(results))
    if output is not None:
        atomic_write_text(output, json.dumps({"test": str(test_path), "results": results}, indent=2))
        msg.good(f"metrics: {output}")
    if html is not None and nlp is not None:
        texts = [d.text for d in docs[:n_sample]]
        write_predictions_page(nlp, texts, html, title=f"{name} on {test_path.name}")
        msg.good(f"displaCy page: {html}")
