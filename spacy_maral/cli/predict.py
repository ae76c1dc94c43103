"""`python -m spacy_maral predict`: print a pipeline's entities with their scores."""
from pathlib import Path
from typing import List, Optional

import typer

from spacy_maral.cli._app import Precision, app, precision_option


@app.command("predict")
def predict_command(
    model: str = typer.Argument(..., help="Installed package name (e.g. xx_maral_ner) or pipeline directory."),
    texts: Optional[List[str]] = typer.Argument(None, help="Sentences to label."),
    from_file: Optional[Path] = typer.Option(None, "--from-file", help="Also label sentences of this corpus (.spacy, CoNLL or text)."),
    n: int = typer.Option(5, "--n", min=0, help="How many sentences of --from-file to label."),
    precision: Precision = precision_option(),
) -> None:
    """Print MODEL's entities with their scores.

    Loads MODEL with spacy.load and prints doc.ents with the probabilities stored in
    doc.spans[spans_key].attrs["scores"]. A sentence the pipeline fails on (e.g. a text
    UTF-8 can't encode) is reported alone, the others are labelled, and the exit status is 1."""
    from spacy_maral.corpora.target_path import check_target_path
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.util import Printer

    msg = Printer()
    try:  # the corpus first, before the model loads (and before spaCy and torch are imported)
        if from_file is not None:
            check_target_path(from_file)
    except ValueError as err:
        msg.fail(f"predict: --from-file: {err}", exits=1)
    try:
        check_pipeline_found(model)
    except ValueError as err:
        msg.fail(f"predict: {err}", exits=1)
    for text in texts or []:
        if "\n" not in text and len(text) < 4096 and Path(text).is_file():  # a sentence that names a file
            msg.warn(f"predict: {text!r} is labelled as a sentence; it names a file: to label its lines, give --from-file {text}")

    from itertools import islice

    from spacy_maral.corpora.target_text import iter_target_docs
    from spacy_maral.pipeline.entity_scores import entity_scores, scores_key
    from spacy_maral.pipeline.loading import load_pipeline

    try:
        nlp = load_pipeline(model, precision=precision)
    except (OSError, ValueError) as err:
        msg.fail(f"predict: cannot load {model}: {err}", exits=1)
    sentences = list(texts or [])
    if from_file is not None:
        try:
            read = [d.text for d in islice(iter_target_docs(from_file, nlp), n)]
        except ValueError as err:  # not a readable corpus: the reader names the file (and line)
            msg.fail(f"predict: {err}", exits=1)
        if not read and n:
            msg.warn(f"predict: --from-file {from_file} holds no sentence: nothing read from it")
        sentences += read
    if not sentences:
        msg.warn("predict: no sentence to label (give sentences, or --from-file with some)")
    key = scores_key(nlp)
    msg.text(f"spacy.load({model!r}): pipes {nlp.pipe_names}")
    failed: List[str] = []

    def report(name: str, _pipe, docs, err: Exception) -> None:  # spaCy's error handler: these docs are left out
        for doc in docs:
            failed.append(f"predict: sentence {doc._context + 1} not labelled: {err}")
            msg.fail(failed[-1])

    nlp.set_error_handler(report)
    for doc, _ in nlp.pipe(((text, i) for i, text in enumerate(sentences)), as_tuples=True):
        msg.text(doc.text)
        for ent, score in zip(doc.ents, entity_scores(doc, key)):
            msg.text(f"    {ent.text:<30} {ent.label_:<6} {'' if score is None else f'{float(score):.3f}'}")
        if not doc.ents:
            msg.text("    (no entities)")
    if failed:
        raise typer.Exit(code=1)
