"""`python -m spacy_maral calibrate`: fit the entity-score map (a temperature, or Platt
scaling) on a gold dev set."""
import json
from pathlib import Path
from typing import Literal, Optional

import typer

from spacy_maral.cli._app import Precision, app, precision_option


@app.command("calibrate")
def calibrate_command(
    model: Path = typer.Argument(..., help="Trained pipeline directory with a maral_ner component."),
    dev_path: Path = typer.Argument(..., help="Gold dev corpus (.spacy or CoNLL): a development language's dev set (the workflow's dev_lang) or the source language's; never a test set that a claim reads."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the calibrated pipeline: a new or empty folder, or one an earlier calibrate --output wrote (default: MODEL, its pipeline files replaced atomically). Files in it that calibrate did not write are kept."),
    report: Optional[Path] = typer.Option(None, "--report", help="JSON file with the score map (temperature, slope, offset) and the calibration before and after."),
    lang: Optional[str] = typer.Option(None, "--lang", help="Tokenize the dev text with this language's rules while fitting (default: the pipeline's tokenizer); the saved pipeline keeps its own."),
    limit: int = typer.Option(0, "--limit", help="Use the first N dev sentences (0 = all)."),
    given: float = typer.Option(0.0, "--temperature", "-t", help="Store this temperature instead of fitting one (0 = fit on DEV, or the --target-lang rule); DEV is still scored at it for the report."),
    score_map: Literal["temperature", "platt"] = typer.Option("temperature", "--score-map", help="What to fit on DEV: 'temperature' (one T) or 'platt' (a slope and an offset on the log-odds of the scores at T = 1; better calibrated on a held-out part of the development language's dev set). A stored temperature (--temperature, or the --target-lang rule) has no Platt map."),
    target_lang: Optional[str] = typer.Option(None, "--target-lang", help="The language the student MODEL was adapted to. When it is not --lang (DEV's language), the student is stored with the temperature that the development language's students were fitted to (2.0) instead of a fit on DEV, unless --temperature gives one."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Texts per batch."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
    precision: Precision = precision_option(),
) -> None:
    """Fit the map of the entity scores on a gold dev set and store it.

    Fits the map of the reported entity scores on the raw text of the dev set: the
    temperature T of softmax(logits / T) (maral_ner's `score_temperature`), or with
    --score-map platt the slope a and offset b of sigmoid(a logit(p) + b) on the scores p
    at T = 1 (`score_slope`, `score_offset`); either minimises the log loss of the scores
    of the predicted entities against their exact correctness. Predictions do not change;
    only doc.spans[...].attrs["scores"] do. With --temperature
    the given T is stored instead, and the report gives the dev set's calibration at it;
    with --target-lang other than --lang, the temperature of the development language's
    students is (spacy_maral.evaluation.calibration.student_temperature).
    """
    from spacy_maral.corpora.target_path import check_gold_entities, check_gold_path
    from spacy_maral.fileio import atomic_write_text, check_output_file, check_replaceable, in_place_owner, replace_dir, replace_owned_dir
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.util import Printer

    msg = Printer()
    if target_lang is not None and lang is None:
        msg.fail(f"--target-lang {target_lang} needs --lang, the language of {dev_path}", exits=1)
    new_folder = output is not None and Path(output).resolve() != Path(model).resolve()  # else the model is updated in place
    if new_folder:
        try:
            check_replaceable(output, "calibrate --output")  # before any work: a user's folder is never replaced
        except ValueError as err:
            msg.fail(str(err), exits=1)
    try:  # before the model loads or is touched (and before spaCy and torch are imported)
        check_output_file(report, "--report")
        check_gold_path(dev_path)
        check_pipeline_found(model)
    except ValueError as err:
        msg.fail(f"calibrate: {err}", exits=1)

    from thinc.api import require_gpu

    from spacy_maral.corpora.target_text import iter_target_docs
    from spacy_maral.evaluation.calibration import calibrate, nothing_to_fit, student_temperature
    from spacy_maral.evaluation.raw_text import entity_logits
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.maral_ner import find_maral_ner
    from spacy_maral.pipeline.tokenizer import tokenizer_rules

    try:
        stored = student_temperature(given, target_lang, lang)  # None: fit on the dev set
    except ValueError as err:
        msg.fail(f"--temperature {err}", exits=1)
    if gpu_id >= 0:
        require_gpu(gpu_id)
    try:
        nlp = load_pipeline(model, precision=precision)
        ner = find_maral_ner(nlp)
        docs = list(iter_target_docs(dev_path, nlp, gold_tokens=True))
        if limit > 0:
            docs = docs[:limit]
        if not docs:
            raise ValueError(f"{dev_path} holds no sentences")
        check_gold_entities(docs, dev_path)
        with tokenizer_rules(nlp, lang), msg.loading(f"predicting {len(docs)} sentences of {dev_path}"):
            logits, classes, correct = entity_logits(nlp, docs, batch_size=batch_size)
    except (OSError, ValueError) as err:
        msg.fail(f"calibrate failed: {err}", exits=1)
    found = calibrate(logits, classes, correct, current=ner.score_map, stored=stored, method=score_map)
    before, after, new_map = found.before, found.after, found.score_map
    if not len(correct):
        msg.warn(f"{model} predicts no entity on {dev_path}: "
                 + ("nothing to calibrate, the scores stay as decoded" if stored is None
                    else f"{describe(new_map)} is stored, its calibration not measured"))
    elif stored is None and nothing_to_fit(correct):
        msg.warn(f"all {len(correct)} predicted entities are {'right' if correct.all() else 'wrong'} on {dev_path}: "
                 "nothing to calibrate on, the scores stay as decoded")
    else:
        if stored is None and score_map == "platt" and not new_map.is_platt:
            msg.warn(f"Platt's fit on {dev_path} found no increasing map (its slope is not above 0): the temperature was fitted instead")
        msg.info(
            f"{len(correct)} predicted entities, {int(correct.sum())} exactly right: ECE {before['ece']:.4f} "
            f"-> {after['ece']:.4f} at {describe(new_map)}"
            + ("" if stored is None else " (given, not fitted)" if given > 0
               else f" (a student of {target_lang}, not of {lang}: not fitted)")
        )
    ner.score_map = new_map
    target = output if output is not None else model
    try:  # the files in TARGET that calibrate did not write are kept (fileio.replace_dir)
        with (replace_owned_dir(target, "calibrate --output") if new_folder
              else replace_dir(target, in_place_owner(target))) as tmp:
            nlp.to_disk(tmp)
    except (OSError, ValueError) as err:
        msg.fail(f"calibrate failed: {err}", exits=1)
    msg.good(f"score map {describe(new_map)} stored in {target}")
    if report is not None:
        try:
            atomic_write_text(report, json.dumps({
                "model": str(model), "dev": str(dev_path), "sentences": len(docs), "lang": lang,
                "temperature": new_map.temperature, "slope": new_map.slope, "offset": new_map.offset,
                "score_map": "platt" if new_map.is_platt else "temperature", "fitted": found.fitted,
                "target_lang": target_lang, "before": before, "after": after,
            }, indent=2))
        except OSError as err:
            msg.fail(f"calibrate: the score map is stored in {target}, but its report {report} could not be written: {err}", exits=1)
        msg.good(f"report: {report}")


def describe(score_map) -> str:
    """The stored map in words: its temperature, and Platt's slope and offset if any."""
    text = f"T={score_map.temperature:.3f}"
    if score_map.is_platt:
        text += f", Platt slope {score_map.slope:.3f}, offset {score_map.offset:+.3f}"
    return text
