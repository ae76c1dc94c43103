"""`python -m spacy_maral languages`: the project's per-language workflow for each target language."""
from pathlib import Path

import typer

from spacy_maral.cli._app import app


@app.command(
    "languages",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def languages_command(
    ctx: typer.Context,
    langs: str = typer.Argument(..., help="The target languages, comma-separated spaCy codes, e.g. de,es,fi."),
    project: Path = typer.Option(Path("."), "--project", help="The spaCy project folder, its teachers trained (its `language` workflow runs for each language)."),
    text: str = typer.Option(..., "--text", help="Each language's raw text, {lang} where the language code goes (e.g. data/{lang}.txt); a relative path is read from --project, where the workflow runs."),
    test: str = typer.Option("none", "--test", help="Each language's test set (CoNLL-style), {lang} where the code goes; a language whose test set does not exist is trained and shipped, not scored; relative to --project, as --text."),
    name: str = typer.Option("maral_ner", "--name", help="The package name: xx_NAME for a run of one language, xx_NAME_LANG for each language of a run of several."),
    workflow: str = typer.Option("language", "--workflow", help="The project workflow that trains, guards, scores and packages one language."),
) -> None:
    """Train, guard, score and package each target language, one after the other, on the
    teachers the project trained once. Arguments after the options (--vars.KEY VALUE)
    go to every language's workflow. A language that fails is reported and the others go
    on; a language finished earlier from the same text, teachers, stage-2 config, source
    corpora and settings is kept.
    Every outcome is in PROJECT/metrics/languages.json. Exit status 1 if any failed.
    """
    from spacy_maral.pipeline.packaged import DEFAULT_VERSION, check_package_name
    from spacy_maral.util import Printer
    from spacy_maral.workflow.languages import SUMMARY, run_languages, setting, split_langs

    msg = Printer()
    try:
        codes = split_langs(langs)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="LANGS") from err
    try:
        check_package_name(name, setting(project, ctx.args, "version") or DEFAULT_VERSION)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--name/--vars.version") from err
    try:
        outcomes = run_languages(project, codes, text, test, name, settings=list(ctx.args),
                                 workflow=workflow, echo=msg.info)
    except ValueError as err:
        msg.fail(f"languages: {err}", exits=1)
    msg.divider("languages")
    rows = []
    for lang, outcome in outcomes.items():
        scores = "not scored (no test set)" if outcome.status == "shipped" else "-"
        if outcome.test_f1:
            scores = ", ".join(f"{model} {f1 * 100:.2f}" for model, f1 in outcome.test_f1.items())
        minutes = f"{outcome.seconds / 60:.1f}" if outcome.seconds is not None else "-"
        rows.append((lang, outcome.status, f"xx_{outcome.package}", outcome.shipped or "-", scores, minutes))
    msg.table(rows, header=("lang", "status", "package", "guard shipped", "raw-text F1 on test", "minutes"), divider=True)
    msg.info(f"outcomes: {project / SUMMARY}")
    failed = [lang for lang, outcome in outcomes.items() if outcome.status != "shipped"]
    if failed:
        shipped = [lang for lang in outcomes if lang not in failed]
        msg.fail(f"languages: {', '.join(failed)} failed (the logs are above)"
                 + (f"; {', '.join(shipped)} shipped" if shipped else ""), exits=1)
