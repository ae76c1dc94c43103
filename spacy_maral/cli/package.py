"""`python -m spacy_maral export` and `install-package`: ship a trained pipeline."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import typer

from spacy_maral.cli._app import Precision, app
from spacy_maral.pipeline.packaged import DEFAULT_VERSION
from spacy_maral.util import Printer


@app.command("export")
def export_command(
    model: Path = typer.Argument(..., help="Trained pipeline directory (e.g. training/adapt-de/model-last)."),
    output_dir: Path = typer.Argument(..., help="Where to write the pipeline to package: a new or empty folder, or one this command wrote. Files in it that export did not write are kept."),
    name: str = typer.Option("maral_ner", "--name", help="meta.json name (the package becomes LANG_NAME)."),
    version: str = typer.Option(DEFAULT_VERSION, "--version", help="meta.json version."),
    guard: Optional[Path] = typer.Option(None, "--guard", help="The verdict of `spacy_maral guard`: export the pipeline it chose (the student; where it distrusts the student, the fallback, else the teacher) instead of MODEL."),
    lang: Optional[str] = typer.Option(None, "--lang", help="Give the pipeline this language's tokenizer rules (spacy_maral.tokenizer.v1), e.g. the target language; default: keep its own."),
    precision: Precision = typer.Option("auto", "--precision", help="The encoder's precision that the exported pipeline loads with, written in its config (users override it at load time): auto (bfloat16 where the CPU has native bfloat16, AVX512-BF16 or AMX; fp32 elsewhere), fp32, bf16 or int8. The weights stay fp32."),
) -> None:
    """Copy a trained pipeline for `spacy package`, without its training-only parts.

    Leaves out the training-only state (the student's soft labels and neighbour index)
    and training-only components (maral_mlm), and gives the pipeline a package name and
    version (and optionally other tokenizer rules).
    """

    from spacy_maral.fileio import check_replaceable, replace_owned_dir
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.pipeline.packaged import check_package_name

    msg = Printer()
    try:
        check_package_name(name, version)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--name/--version") from err
    try:
        check_replaceable(output_dir, "export")  # before any work: a user's folder is never replaced
    except ValueError as err:
        msg.fail(str(err), exits=1)
    if guard is not None:
        chosen, chosen_path = read_guard_verdict(guard)
        if chosen != "student" or Path(chosen_path).resolve() != Path(model).resolve():
            msg.warn(f"export: {guard} chose the {chosen}: exporting {chosen_path} instead of {model}")
        model = chosen_path
    try:  # before spaCy and torch are imported
        check_pipeline_found(model)
    except ValueError as err:
        msg.fail(f"export failed: {err}", exits=1)

    from spacy_maral.corpora.text_check import language_rules
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.tokenizer import set_tokenizer_lang, tokenizer_lang

    if lang:
        try:  # before the pipeline loads
            language_rules(lang)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--lang") from err

    try:
        nlp = load_pipeline(model, precision=precision)
    except (OSError, ValueError) as err:
        msg.fail(f"export failed: cannot load {model}: {err}", exits=1)
    for _, pipe in nlp.pipeline:
        if hasattr(pipe, "drop_adaptation_state"):
            pipe.drop_adaptation_state()
    for pipe_name in [n for n, pipe in nlp.pipeline if getattr(pipe, "training_only", False)]:
        nlp.remove_pipe(pipe_name)
    if lang:
        set_tokenizer_lang(nlp, lang)
    nlp.meta["name"] = name
    nlp.meta["version"] = version
    nlp.meta.setdefault("description", "Cross-lingual NER (spacy-maral: large-margin vMF span classifier)")
    try:  # files in OUTPUT_DIR that export did not write are kept (fileio.replace_dir)
        with replace_owned_dir(output_dir, "export") as tmp:
            nlp.to_disk(tmp)
    except (OSError, ValueError) as err:
        msg.fail(f"export failed: {err}", exits=1)
    msg.text(f"{output_dir} ({nlp.lang}_{name} {version}, pipes {nlp.pipe_names}, tokenizer rules {tokenizer_lang(nlp)})")


def read_guard_verdict(path: Path) -> "tuple[str, Path]":
    """The (chosen, chosen_path) of a `spacy_maral guard` verdict file; exits with a clear
    message (status 1) when it is unreadable or is not such a verdict.

    path (Path): the verdict file (--guard).
    """
    from spacy_maral.evaluation.verdict import read_verdict

    try:
        return read_verdict(path)
    except ValueError as err:
        Printer().fail(f"export failed: --guard {err}", exits=1)


@app.command("install-package")
def install_package_command(
    dist_dir: Path = typer.Argument(..., help="The dist/ folder written by `spacy package --build wheel`."),
    python: str = typer.Option("current", "--python", help="Interpreter whose environment gets the package (current: this one)."),
    check_file: Optional[Path] = typer.Option(None, "--check-file", help="After installing, spacy.load the package from another directory and label the first sentences of this corpus."),
    n: int = typer.Option(3, "--n", help="Sentences of --check-file to label."),
) -> None:
    """Install the newest wheel of DIST_DIR and check that it loads.

    pip-installs the newest wheel in DIST_DIR with --no-deps (the pipeline's
    dependencies, spacy-maral included, are already in the environment that built it),
    then checks that `spacy.load(package)` works outside the project directory.
    """
    from spacy_maral.corpora.target_path import check_target_path
    from spacy_maral.pipeline.packaged import installed_tokenizer_lang, wheel_tokenizer_lang

    msg = Printer()
    wheels = sorted(Path(dist_dir).glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        msg.fail(f"install-package: no .whl file in {dist_dir}", exits=1)
    interpreter = sys.executable if python in ("", "current") else python
    if shutil.which(interpreter) is None:
        msg.fail(f"install-package: --python {python} is not an interpreter that can be run; nothing was installed", exits=1)
    if check_file is not None:
        try:
            check_target_path(Path(check_file))
        except ValueError as err:
            msg.fail(f"install-package: --check-file: {err}; nothing was installed", exits=1)
    package = wheels[-1].name.split("-")[0]
    new_lang, old_lang = wheel_tokenizer_lang(wheels[-1]), installed_tokenizer_lang(interpreter, package)
    if old_lang and new_lang and old_lang != new_lang:
        msg.warn(f"install-package: the {package} installed now is a {old_lang} pipeline; this {new_lang} one replaces "
                 f"it, and spacy.load({package!r}) loads {new_lang} from now on. To keep a package per language, give "
                 "each its own name (the workflow's `name`, or one run of several `target_langs`: NAME_LANG each); "
                 f"pip install the earlier wheel to go back")
    cmd = [interpreter, "-m", "pip", "install", "--no-deps", "--force-reinstall", "-q", str(wheels[-1])]
    msg.text(" ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        raise typer.Exit(code=1)
    msg.text(f"installed {package} ({wheels[-1].name})")
    if check_file is not None:
        with tempfile.TemporaryDirectory() as elsewhere:
            check = [interpreter, "-m", "spacy_maral", "predict", package, "--from-file", str(Path(check_file).resolve()), "--n", str(n)]
            if subprocess.run(check, cwd=elsewhere).returncode != 0:
                msg.fail(f"install-package: {package} was installed, but loading it and labelling {check_file} with it "
                         "failed (above)", exits=1)
