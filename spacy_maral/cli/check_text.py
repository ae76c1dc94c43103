"""`python -m spacy_maral check-text`: are the raw target texts fit to train on?"""
from typing import Optional

import typer

from spacy_maral.cli._app import app
from spacy_maral.pipeline.packaged import DEFAULT_VERSION


@app.command("check-text")
def check_text_command(
    langs: str = typer.Argument(..., help="The target languages, comma-separated spaCy codes, e.g. de or de,es,fi."),
    text: str = typer.Option(..., "--text", help="Each language's raw text: a path, with {lang} where the language code goes (e.g. data/{lang}.txt). Plain text (one sentence a line), CoNLL-style (tags unused) or .spacy."),
    source_lang: str = typer.Option("en", "--source-lang", help="The labelled source language: a warning when a text looks more like it than like its own language."),
    min_sentences: int = typer.Option(0, "--min-sentences", min=0, help="The fewest sentences a text must have: the run's budget of target sentences (0 = any)."),
    name: Optional[str] = typer.Option(None, "--name", help="The package name the run will ship (the workflow's `name`): checked too, so that `spacy package` does not refuse it after the training."),
    version: str = typer.Option(DEFAULT_VERSION, "--version", help="With --name: the package version, checked too."),
) -> None:
    """Check each language's raw text before anything trains: errors (a missing file, an
    unknown language code, an empty or whitespace-only text, fewer sentences than
    --min-sentences) stop with exit status 1 after every language was checked; doubts (a
    text mostly in the source language, or in another script than its language's) are
    printed as warnings with their figures.
    """
    from spacy_maral.corpora.target_path import check_target_path
    from spacy_maral.util import Printer
    from spacy_maral.workflow.languages import check_text_template, lang_path, split_langs

    msg = Printer()
    try:
        codes = split_langs(langs)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="LANGS") from err
    try:
        check_text_template(text, codes)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--text") from err
    if name is not None:
        from spacy_maral.pipeline.packaged import check_package_name

        try:
            check_package_name(name, version)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--name/--version") from err
    failed, paths = [], {}
    for lang in codes:  # a missing text, at once (spaCy, which the other checks need, takes seconds to import)
        path = lang_path(text, lang)
        try:
            check_target_path(path)
            paths[lang] = path
        except ValueError as err:
            failed.append(lang)
            msg.fail(f"{lang}: {err}")
    if paths:
        from spacy_maral.corpora.text_check import check_target_text
    for lang, path in paths.items():
        try:
            report = check_target_text(path, lang, source_lang=source_lang, min_sentences=min_sentences)
        except ValueError as err:
            failed.append(lang)
            msg.fail(f"{lang}: {err}")
            continue
        figures = [f"{report.sentences} sentences"]
        if report.source_share is not None:
            figures.append(f"{report.source_share:.0%} of sentences lean {source_lang} by stopwords")
        if report.script_share is not None:
            figures.append(f"{report.script_share:.0%} of letters in {lang}'s script")
        msg.good(f"{lang}: {path}: {', '.join(figures)}")
        for warning in report.warnings:
            msg.warn(f"{lang}: {warning}")
    if failed:
        failed = [lang for lang in codes if lang in failed]  # in the order given
        msg.fail(f"check-text: the text of {', '.join(failed)} can't be used; nothing was trained", exits=1)
