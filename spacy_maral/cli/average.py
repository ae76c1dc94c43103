"""`python -m spacy_maral average`: the mean of the weights of several pipelines."""
from pathlib import Path
from typing import List, Optional

import typer

from spacy_maral.cli._app import app


@app.command("average")
def average_command(
    inputs: Optional[List[Path]] = typer.Argument(None, help="Pipeline directories of one architecture and label set: the snapshots of a run (its epoch hook's snapshot_dir, e.g. step-*) and its model-last, or runs that started from the same weights. The last one gives everything that is not a weight. None with --runs or --snapshots that list some; the mean of one pipeline is the pipeline."),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the averaged pipeline: a new or empty folder, or one this command wrote. Files in it that average did not write are kept."),
    snapshots: Optional[Path] = typer.Option(None, "--snapshots", help="A snapshot folder of the epoch hook (snapshot_dir): its step-NNNNNN pipelines from --from-step on are averaged too, before INPUTS, in step order. A missing or empty folder adds none."),
    from_step: int = typer.Option(0, "--from-step", help="With --snapshots: the first step whose snapshot is averaged; past the last snapshot of a folder that has some, an error."),
    weights: Optional[str] = typer.Option(None, "--weights", help="One weight per pipeline averaged, comma-separated, in order (--runs' and --snapshots' first, then INPUTS), normalized to sum to 1; e.g. TEACHER STUDENT --weights 0.5,0.5 interpolates a teacher and its student (WiSE-FT). Default: the uniform mean."),
    runs: Optional[Path] = typer.Option(None, "--runs", help="The students.json of `train-students` (or a teachers.json): the runs it lists are averaged too, before INPUTS, in seed order. One that lists none adds none (a soup that is off: the output is INPUTS' mean)."),
) -> None:
    """Average the trainable weights of pipelines (checkpoint averaging, model soups).

    Every trainable weight of every pipe, and maral_ner's class means, are the uniform
    mean over INPUTS; the configuration, vocabulary, labels and adaptation state are
    those of the last input. Run `calibrate` on the result: averaging changes the scores.
    """
    from spacy_maral.fileio import check_replaceable, replace_owned_dir
    from spacy_maral.training.mixing import mean_factors
    from spacy_maral.training.run_summary import check_summary_models
    from spacy_maral.training.snapshots import snapshots_from
    from spacy_maral.util import Printer

    msg = Printer()
    try:
        check_replaceable(output, "average --output")  # before any work: a user's folder is never replaced
        inputs = list(inputs or [])
        if snapshots is not None:
            found = snapshots_from(snapshots, from_step)
            every = snapshots_from(snapshots)
            if every and not found:  # a --from-step that matches none of the snapshots there
                raise typer.BadParameter(f"{from_step} is past the last snapshot in {snapshots} ({every[-1].name})", param_hint="--from-step")
            msg.info(f"{len(found)} snapshot(s) of {snapshots} from step {from_step} on")
            inputs = found + inputs
        if runs is not None:
            listed = [Path(m) for m in check_summary_models(runs)]
            msg.info(f"{len(listed)} run(s) listed in {runs}")
            inputs = listed + inputs
        if not inputs:
            raise ValueError("no pipelines to average: give INPUTS, or --runs or --snapshots that list some")
        for path in inputs:
            if not (Path(path) / "config.cfg").is_file():
                raise ValueError(f"{path} is not a pipeline directory (no config.cfg)")
        # spacy.load as saved: the output keeps the last input's runtime settings
        factors = None
        if weights is not None:
            try:
                factors = [float(w) for w in weights.split(",")]
            except ValueError as err:
                raise ValueError(f"--weights {weights!r}: give numbers separated by commas") from err
            mean_factors(factors, len(inputs))  # before anything loads
        from spacy_maral.training.averaging import average_pipelines  # spaCy and torch: after the checks

        nlp = average_pipelines(inputs, progress=lambda i, n, p: msg.info(f"[{i}/{n}] loading {p}"), weights=factors)
    except (OSError, ValueError) as err:
        msg.fail(f"average failed: {err}", exits=1)
    try:  # files in OUTPUT that average did not write are kept (fileio.replace_dir)
        with replace_owned_dir(output, "average --output") as tmp:
            nlp.to_disk(tmp)
    except (OSError, ValueError) as err:
        msg.fail(f"average failed: {err}", exits=1)
    kind = "weighted mean" if weights is not None else "mean"
    msg.good(f"the {kind} of {len(inputs)} pipelines' weights written to {output}")
