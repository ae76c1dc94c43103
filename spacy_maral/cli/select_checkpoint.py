"""`python -m spacy_maral select-checkpoint`: each student's checkpoint by its dev F1 (the
source language's, or the development language's own for its students)."""
from pathlib import Path
from typing import Optional

import typer

from spacy_maral.cli._app import Precision, app, precision_option
from spacy_maral.training.selection import SKIP_FIRST, check_skip_first


def _skip_first(value: float) -> float:
    """--skip-first in [0, 1), refused before any work."""
    try:
        check_skip_first(value)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--skip-first") from err
    return value


@app.command("select-checkpoint")
def select_checkpoint_command(
    students: Path = typer.Argument(..., help="The students.json of `train-students`, whose runs wrote snapshots (their epoch hook's snapshot_every)."),
    dev_path: Path = typer.Argument(..., help="Gold source dev corpus (.spacy or CoNLL), e.g. corpus/en-dev.spacy: what ranks the checkpoints, unless --target-dev does."),
    output: Path = typer.Option(..., "--output", "-o", help="The summary of the picks, in the shape of students.json (for `average --runs`)."),
    source_lang: Optional[str] = typer.Option(None, "--source-lang", help="Tokenizer rules for the source dev text (default: each pipeline's own)."),
    target_lang: Optional[str] = typer.Option(None, "--target-lang", help="The language the students were adapted to; with --target-dev in that language, it ranks the checkpoints."),
    target_dev: Optional[Path] = typer.Option(None, "--target-dev", help="The development language's gold dev corpus (the workflow's dev_lang), e.g. corpus/es-dev.spacy: the checkpoints of its students (--target-lang equal to --target-dev-lang) are ranked on it instead of DEV."),
    target_dev_lang: Optional[str] = typer.Option(None, "--target-dev-lang", help="The language of --target-dev (needed with it), also its tokenizer rules."),
    dev_limit: int = typer.Option(1000, "--dev-limit", help="Dev sentences used, of whichever dev set ranks (0 = all)."),
    skip_first: float = typer.Option(SKIP_FIRST, "--skip-first", callback=_skip_first, help="The fraction of training (of the last snapshot's step) whose snapshots are not candidates: 0.5 with snapshots up to step 800 leaves steps 100 to 400 out (0 = every snapshot)."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Texts per batch."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
    precision: Precision = precision_option(),
) -> None:
    """Choose each student's checkpoint: of its snapshots and its model-last, the one with
    the highest F1 on raw text (on a tie, the later) on the source dev set DEV, or, for
    students of the development language (--target-lang equal to --target-dev-lang), on
    that language's own dev set --target-dev. The snapshots of the first --skip-first of
    training are not candidates; a run without snapshots keeps its model-last. Writes
    --output in the shape of students.json, each student's model its pick, with the rule and
    every candidate's F1.
    """
    from spacy_maral.corpora.target_path import check_gold_entities, check_gold_path
    from spacy_maral.fileio import check_output_file
    from spacy_maral.training.run_summary import read_summary
    from spacy_maral.training.selection import select_runs, selection_dev
    from spacy_maral.util import Printer

    msg = Printer()
    try:
        ranking = selection_dev(dev_path, source_lang, target_lang, target_dev, target_dev_lang)
    except ValueError as err:
        msg.fail(f"select-checkpoint: {err}", exits=1)
    try:
        check_gold_path(ranking.path)
    except ValueError as err:
        msg.fail(f"select-checkpoint: the {ranking.name} set: {err}", exits=1)
    try:
        check_output_file(output, "--output")
        read_summary(students, role="student")  # before spaCy and torch are imported: a students.json that can't be read
    except ValueError as err:
        msg.fail(f"select-checkpoint: {err}", exits=1)

    from thinc.api import require_gpu

    from spacy_maral.corpora.target_text import iter_target_docs
    from spacy_maral.evaluation.guard import dev_f1
    from spacy_maral.pipeline.loading import load_pipeline

    if gpu_id >= 0:
        require_gpu(gpu_id)
    dev = []

    def score(path: Path) -> float:
        nlp = load_pipeline(path, precision=precision)
        if not dev:
            docs = list(iter_target_docs(ranking.path, nlp, gold_tokens=True))
            dev.extend(docs[:dev_limit] if dev_limit > 0 else docs)
            if not dev:
                raise ValueError(f"no sentences in {ranking.path}")
            check_gold_entities(dev, ranking.path)
        return dev_f1(nlp, dev, ranking.lang, batch_size)

    def progress(i: int, n: int, path: Path) -> None:
        msg.text(f"  [{i + 1}/{n}] {path}")

    msg.info(f"ranking the checkpoints on the {ranking.name} set: {ranking.path}")
    try:
        picked = select_runs(students, output, score, progress=progress, skip_first=skip_first, dev_name=ranking.name)
    except (OSError, ValueError) as err:
        msg.fail(f"select-checkpoint failed: {err}", exits=1)
    for seed, entry in picked.items():
        scores = ", ".join(f"{c['name']} {c['dev_f']:.2f}" for c in entry["selection"]["candidates"])
        msg.good(f"seed {seed}: {entry['model']} ({ranking.name} F1: {scores})")
    msg.good(f"picks: {output}")
