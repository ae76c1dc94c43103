"""`python -m spacy_maral evaluate`: score pipelines side by side and draw predictions."""
import json
from pathlib import Path
from typing import List, Optional, Tuple

import typer

from spacy_maral.cli._app import Precision, app, precision_option


def per_sentence_path(output: Path) -> Path:
    """Where `evaluate -o OUTPUT` writes the per-sentence raw-text counts: OUTPUT with
    its .json suffix, if any, replaced by .per_sentence.json (metrics.json ->
    metrics.per_sentence.json, eval.de -> eval.de.per_sentence.json)."""
    stem = output.name[:-len(".json")] if output.name.lower().endswith(".json") else output.name
    return output.with_name(stem + ".per_sentence.json")


def shipped_spec(specs: List[Tuple[str, str]], guard: Path) -> str:
    """The name of the pipeline a guard verdict chose to ship: one of `specs`, or
    "shipped", appended to `specs`, when it is none of them.

    specs (List[Tuple[str, str]]): the (name, pipeline) of MODELS, extended in place.
    guard (Path): the verdict file.
    """
    from spacy_maral.evaluation.verdict import read_verdict

    _, chosen_path = read_verdict(guard)
    for name, path in specs:
        if Path(path).resolve() == chosen_path.resolve():
            return name
    if any(name == "shipped" for name, _ in specs):
        raise ValueError(f"{guard} chose {chosen_path}, and another pipeline is named 'shipped'")
    specs.append(("shipped", str(chosen_path)))
    return "shipped"


def model_specs(models: List[str]) -> List[Tuple[str, str]]:
    """The (name, pipeline) of each MODELS argument: NAME=PATH, or a bare PATH named by its
    last folder. A spec that is an existing path, or whose part before the first "=" holds
    a path separator, is a bare path (runs/lr=1e-4/model-best); the pipeline after the
    first "=" may hold more (best=runs/lr=1e-4/model-best).

    models (List[str]): the command's MODELS arguments.
    RETURNS (List[Tuple[str, str]]): one (name, pipeline) per argument, in order.
    RAISES (ValueError): two pipelines with one name (the later would hide the first).
    """
    specs: List[Tuple[str, str]] = []
    for spec in models:
        name, _, path = spec.partition("=")
        if not path or not name or Path(spec).exists() or "/" in name or "\\" in name:
            name, path = Path(spec).name, spec
        specs.append((name, path))
    names = [name for name, _ in specs]
    for name in names:
        if names.count(name) > 1:
            paths = ", ".join(path for other, path in specs if other == name)
            raise ValueError(f"two pipelines are named {name!r} ({paths}): name them NAME=PATH")
    return specs


@app.command("evaluate")
def evaluate_command(
    test_path: Path = typer.Argument(..., help="Gold test corpus (.spacy file or directory, or a CoNLL-style file)."),
    models: List[str] = typer.Argument(..., help="Pipelines to score, each NAME=PATH (or a bare PATH)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="JSON file for the metrics of every pipeline."),
    html: Optional[Path] = typer.Option(None, "--html", help="displaCy page of the last pipeline's predictions, with scores."),
    reliability_png: Optional[Path] = typer.Option(None, "--reliability", help="Reliability diagram (PNG) of the pipelines' entity scores on the raw text."),
    lang: Optional[str] = typer.Option(None, "--lang", help="Give every pipeline this language's tokenizer rules (spacy_maral.tokenizer.v1) before scoring, e.g. the target language for a teacher trained with the source rules."),
    n_sample: int = typer.Option(30, "--n-sample", help="Test sentences drawn on the displaCy page."),
    limit: int = typer.Option(0, "--limit", help="Score the first N test sentences (0 = all)."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Docs per nlp.pipe batch."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
    precision: Precision = precision_option(),
    guard: Optional[Path] = typer.Option(None, "--guard", help="A verdict of `spacy_maral guard`: the pipeline it chose to ship is scored too, as `shipped`, when it is none of MODELS (the guard's fallback); --output records which one shipped."),
    if_exists: bool = typer.Option(False, "--if-exists", help="A TEST that does not exist is no test set: say so, write --output saying nothing was scored, and exit 0."),
) -> None:
    """Score pipelines side by side on a gold test set, on gold tokens and on raw text.

    Scores each pipeline twice on the same test set: on the gold tokens (spaCy's NER
    scorer) and on the raw text (the sentences detokenized, run through the whole
    pipeline with nlp.pipe(texts), scored by exact character offsets and label). Prints
    both tables, the gold entities each pipeline can't reach (a boundary inside one of
    its tokens, or wider than max_width) with the recall ceiling, and the calibration of
    the entity scores (ECE over 10 bins, precision at score >= 0.5 and >= 0.9). Optionally
    a JSON file (and beside it OUTPUT.per_sentence.json: true positives, predicted and
    gold entities of each sentence on the raw text, for paired bootstraps), a
    reliability diagram and a displaCy page of the last pipeline.
    """

    from spacy_maral.corpora.target_path import check_gold_entities, check_gold_path
    from spacy_maral.fileio import atomic_write_text, check_output_file
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.util import Printer

    msg = Printer()
    try:  # before minutes of scoring (and before spaCy and torch are imported)
        for option, path in (("--output", output), ("--html", html), ("--reliability", reliability_png)):
            check_output_file(path, option)
        check_output_file(per_sentence_path(output) if output is not None else None, "--output's per-sentence file")
        if not (if_exists and not test_path.exists()):
            check_gold_path(test_path)  # a missing or unreadable test set, before the pipelines load
    except ValueError as err:
        msg.fail(f"evaluate: {err}", exits=1)
    if if_exists and not test_path.exists():
        where = "given (none)" if str(test_path) == "none" else f"at {test_path}"  # the workflow's target_test none
        msg.warn(f"evaluate: no test set {where}: nothing scored (the pipelines are not evaluated)")
        if output is not None:
            atomic_write_text(output, json.dumps({"test": None, "looked_for": str(test_path), "results": {}}, indent=2))
        return
    try:
        specs = model_specs(models)
        for _, path in specs:
            check_pipeline_found(path)
    except ValueError as err:
        msg.fail(f"evaluate: {err}", exits=1)

    from thinc.api import require_gpu

    from spacy_maral.corpora import ConversionError
    from spacy_maral.corpora.target_text import iter_target_docs
    from spacy_maral.evaluation.calibration import plot_reliability
    from spacy_maral.evaluation.raw_text import evaluate_raw_text
    from spacy_maral.evaluation.report import evaluate_pipeline, format_quality_table, format_table, write_predictions_page
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.tokenizer import set_tokenizer_lang, tokenizer_lang

    if gpu_id >= 0:
        require_gpu(gpu_id)
    results = {}
    nlp = None
    try:
        shipped = shipped_spec(specs, guard) if guard is not None else None
    except ValueError as err:
        msg.fail(f"evaluate: {err}", exits=1)
    try:
        for name, path in specs:
            nlp = load_pipeline(path, precision=precision)
            if lang:
                set_tokenizer_lang(nlp, lang)
            docs = list(iter_target_docs(test_path, nlp, gold_tokens=True))
            if limit > 0:
                docs = docs[:limit]
            if not docs:
                raise ValueError(f"{test_path} holds no sentences")
            check_gold_entities(docs, test_path)
            msg.info(f"{name}: {path} on {len(docs)} sentences of {test_path} (tokenizer rules: {tokenizer_lang(nlp)})")
            result = evaluate_pipeline(nlp, docs, batch_size=batch_size)
            result["raw_text"] = evaluate_raw_text(nlp, docs, batch_size=batch_size)
            result["tokenizer"] = tokenizer_lang(nlp)
            results[name] = result
    except (OSError, ValueError, ConversionError) as err:
        msg.fail(f"evaluate failed: {err}", exits=1)
    msg.divider("raw text (nlp.pipe on the detokenized sentences, exact character offsets)")
    msg.text(format_table({name: r["raw_text"] for name, r in results.items()}))
    msg.divider("gold tokens (spaCy's NER scorer)")
    msg.text(format_table(results))
    msg.divider("raw text: unreachable gold entities and score calibration")
    msg.text(format_quality_table({name: r["raw_text"] for name, r in results.items()}))
    if output is not None:
        # the per-sentence counts (for paired bootstraps) go to their own compact file
        per_sentence = {name: r["raw_text"].pop("per_sentence") for name, r in results.items()}
        atomic_write_text(output, json.dumps({"test": str(test_path), "shipped": shipped, "results": results}, indent=2))
        counts_path = per_sentence_path(output)
        atomic_write_text(counts_path, json.dumps(
            {"test": str(test_path), "columns": ["tp", "predicted", "gold"], "raw_text": per_sentence},
            separators=(",", ":")))
        msg.good(f"metrics: {output} (per-sentence raw-text counts: {counts_path})")
    if reliability_png is not None:
        curves = {n: r["raw_text"]["calibration"] for n, r in results.items() if "calibration" in r["raw_text"]}
        if curves:
            plot_reliability(curves, reliability_png, title=f"Entity scores on {test_path.name} (raw text)")
            msg.good(f"reliability diagram: {reliability_png}")
    if html is not None and nlp is not None:
        texts = [d.text for d in docs[:n_sample]]
        write_predictions_page(nlp, texts, html, title=f"{name} on {test_path.name}")
        msg.good(f"displaCy page: {html}")
