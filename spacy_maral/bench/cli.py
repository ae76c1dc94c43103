"""`python -m spacy_maral.bench`: the benchmark project's tools, `measure`,
`benchmark-report` and `parallel`, apart from the user's commands of `python -m
spacy_maral` (with their help layout: spacy_maral.cli._app.MaralTyper)."""
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional

import typer

from spacy_maral.cli._app import MaralTyper
from spacy_maral.util import Printer

app = MaralTyper(
    name="spacy_maral.bench",
    help="spacy-maral's benchmark tools: measure a command, run commands side by side, write the benchmark report.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@app.command("measure", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def measure_command(
    ctx: typer.Context,
    output: Path = typer.Argument(..., help="JSON file for the wall time and peak memory."),
) -> None:
    """Run a command and record its wall time and peak memory.

    Runs the command that follows OUTPUT (after `--`) and records its wall time and the
    peak resident memory in OUTPUT, e.g.
    `python -m spacy_maral.bench measure training/ner/timing.json -- python -m spacy train ...`.
    """
    from spacy_maral.fileio import check_output_file
    from spacy_maral.workflow.measured import run_measured

    msg = Printer()
    try:  # before the command runs
        check_output_file(output, "OUTPUT")
    except ValueError as err:
        msg.fail(f"measure: {err}", exits=2)
    cmd = [a for a in ctx.args if a != "--"] if ctx.args[:1] == ["--"] else list(ctx.args)
    if not cmd:
        msg.fail("measure: no command given", exits=2)
    if cmd[0] != "python" and shutil.which(cmd[0]) is None:  # "python" runs as this interpreter (run_measured)
        msg.fail(f"measure: {cmd[0]} can't be run (not a program on PATH, or not executable); {output} not written", exits=127)
    try:
        result = run_measured(cmd, output)
    except subprocess.CalledProcessError as err:
        msg.fail(f"measure: {shlex.join(cmd)} failed (exit {err.returncode}); {output} not written", exits=err.returncode or 1)
    msg.text(f"{result['wall_s']} s, peak RSS {result['peak_rss_gb']} GB -> {output}")


@app.command("benchmark-report")
def benchmark_report_command(
    test_path: Path = typer.Argument(..., help="Gold target-language test set."),
    dev_path: Path = typer.Argument(..., help="Source dev set (entity vectors for the projection plot)."),
    output_dir: Path = typer.Argument(..., help="Folder for BENCHMARKS.md, benchmark.json and the plots."),
    system: List[str] = typer.Option(..., "--system", help="NAME=RUN_DIR[@CHECKPOINT] (a `spacy train --output` folder; CHECKPOINT model-best, the default, or model-last); repeat, in table order."),
    before: Optional[str] = typer.Option(None, "--before", help="Stage-1 maral system (plots)."),
    after: Optional[str] = typer.Option(None, "--after", help="Adapted maral system (plots)."),
    speed: Optional[str] = typer.Option(None, "--speed", help="NER,MARAL: the two systems to time."),
    timing: List[str] = typer.Option([], "--timing", help="NAME=FILE: another measured step (spacy_maral.bench measure JSON)."),
    command: str = typer.Option("", "--command", help="The command line that ran the benchmark, for the report."),
    n_projection: int = typer.Option(300, "--n-projection", help="Sentences whose entities the projection plot draws."),
    speed_limit: int = typer.Option(0, "--speed-limit", help="Time only the first N test sentences (0 = all)."),
    speed_from: Optional[Path] = typer.Option(None, "--speed-from", help="Reuse the speed block of this earlier benchmark.json instead of timing (for a report regenerated on a busy machine)."),
    lang: Optional[str] = typer.Option(None, "--lang", help="Give every system this language's tokenizer rules (the target language) before scoring."),
) -> None:
    """Evaluate every system on the target test set, time inference, draw the plots and
    write the report."""
    from spacy_maral.bench.summary import System, run_benchmark_report
    from spacy_maral.corpora.target_path import check_gold_path

    def pair(spec: str) -> List[str]:
        if "=" not in spec:
            raise typer.BadParameter(f"{spec!r}: expected NAME=PATH")
        return spec.split("=", 1)

    def make_system(name: str, spec: str) -> System:
        path, _, checkpoint = spec.partition("@")
        if checkpoint not in ("", "model-best", "model-last"):
            raise typer.BadParameter(f"{name}={spec}: the checkpoint must be model-best or model-last")
        return System(name, Path(path), checkpoint or "model-best")

    systems = [make_system(n, p) for n, p in map(pair, system)]
    timings = {n: Path(p) for n, p in map(pair, timing)}
    check_names(systems, before, after, speed, timings)  # before any work: a name that matches nothing is an error
    try:  # before any work or any folder: the corpora, and at least one system to report
        check_gold_path(test_path)
        check_gold_path(dev_path)
        if not any(s.model.exists() for s in systems):
            raise ValueError("none of the systems exists (" + ", ".join(f"{s.name}: {s.model}" for s in systems)
                             + "): nothing to report")
    except ValueError as err:
        Printer().fail(f"benchmark-report: {err}", exits=1)
    try:
        run_benchmark_report(
            systems, test_path, dev_path, output_dir, before=before, after=after,
            speed_pair=speed.split(",") if speed else None, extra_timings=timings,
            command=command, n_projection=n_projection, speed_limit=speed_limit, speed_from=speed_from, lang=lang,
        )
    except (OSError, ValueError) as err:  # e.g. a damaged pipeline, named with its file
        Printer().fail(f"benchmark-report failed: {err}", exits=1)


def check_names(systems: list, before: Optional[str], after: Optional[str], speed: Optional[str], timings: dict) -> None:
    """Usage errors for options that would otherwise leave a plot, the speed block or a
    step out of the report silently: --before, --after and --speed must name systems
    given with --system, and each --timing file must exist."""
    names = [s.name for s in systems]
    for hint, value in (("--before", before), ("--after", after)):
        if value is not None and value not in names:
            raise typer.BadParameter(f"{value!r} is not one of the systems ({', '.join(names)})", param_hint=hint)
    if speed:
        pair = speed.split(",")
        if len(pair) != 2 or any(name not in names for name in pair):
            raise typer.BadParameter(f"{speed!r}: give two of the systems ({', '.join(names)}) as NER,MARAL", param_hint="--speed")
    for name, path in timings.items():
        if not path.is_file():
            raise typer.BadParameter(f"{name}={path}: no such file", param_hint="--timing")


@app.command("parallel")
def parallel_command(
    commands: List[str] = typer.Argument(..., help="Commands, one quoted string each (a leading python means this interpreter)."),
    jobs: int = typer.Option(2, "--jobs", "-j", help="How many run at once; with more than 1, each gets an equal share of the CPU cores."),
    log_dir: Path = typer.Option(Path("logs"), "--log-dir", help="Each command's output goes to LOG_DIR/NN-LABEL.log (NN its place in the list, LABEL from its arguments)."),
    append: str = typer.Option("", "--append", help="Arguments added to the end of every command (one quoted string), e.g. the overrides that several trainings share."),
) -> None:
    """Run independent commands side by side, sharing the CPU cores.

    For example two trainings on a 2-core CPU, where two 1-thread runs beat two 2-thread
    runs one after the other. Once all have ended, exits with 1 if any failed, having
    printed the tail of each failed one's log."""
    from spacy_maral.workflow.parallel import run_parallel

    failed = run_parallel(commands, jobs=jobs, log_dir=log_dir, append=append)
    if failed:
        raise typer.Exit(code=1)
