"""`python -m spacy_maral export` and `install-package`: ship a trained pipeline."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import typer

from spacy_maral.cli._app import app


@app.command("export")
def export_command(
    model: Path = typer.Argument(..., help="Trained pipeline directory (e.g. training/adapt-de/model-last)."),
    output_dir: Path = typer.Argument(..., help="Where to write the pipeline to package."),
    name: str = typer.Option("maral_ner", "--name", help="meta.json name (the package becomes LANG_NAME)."),
    version: str = typer.Option("0.1.0", "--version", help="meta.json version."),
    guard: Optional[Path] = typer.Option(None, "--guard", help="The verdict of `spacy_maral guard`: export the pipeline it chose (the teacher when the student is not trusted) instead of MODEL."),
    lang: Optional[str] = typer.Option(None, "--lang", help="Give the pipeline this language's tokenizer rules (spacy_maral.tokenizer.v1), e.g. the target language; default: keep its own."),
) -> None:
    """Copy a trained pipeline for `spacy package`, without the training-only state
    (the student's soft labels and neighbour index) and training-only components
    (maral_mlm), and with a package name/version (and optionally other tokenizer rules).
    """
    import spacy

    from spacy_maral.fileio import replace_dir
    from spacy_maral.pipeline.tokenizer import set_tokenizer_lang, tokenizer_lang

    if guard is not None:
        verdict = json.loads(Path(guard).read_text(encoding="utf8"))
        if verdict["chosen"] != "student":
            typer.secho(f"export: {guard} chose the {verdict['chosen']}: exporting {verdict['chosen_path']} instead of {model}",
                        fg=typer.colors.YELLOW, err=True)
        model = Path(verdict["chosen_path"])
    try:
        nlp = spacy.load(model)
    except (OSError, ValueError) as err:
        typer.secho(f"export failed: cannot load {model}: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1) from err
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
    with replace_dir(output_dir) as tmp:
        nlp.to_disk(tmp)
    typer.echo(f"{output_dir} ({nlp.lang}_{name} {version}, pipes {nlp.pipe_names}, tokenizer rules {tokenizer_lang(nlp)})")


@app.command("install-package")
def install_package_command(
    dist_dir: Path = typer.Argument(..., help="The dist/ folder written by `spacy package --build wheel`."),
    python: str = typer.Option("current", "--python", help="Interpreter whose environment gets the package (current: this one)."),
    check_file: Optional[Path] = typer.Option(None, "--check-file", help="After installing, spacy.load the package from another directory and label the first sentences of this corpus."),
    n: int = typer.Option(3, "--n", help="Sentences of --check-file to label."),
) -> None:
    """pip-install the newest wheel in DIST_DIR with --no-deps (the pipeline's
    dependencies, spacy-maral included, are already in the environment that built it),
    then check that `spacy.load(package)` works outside the project directory.
    """
    wheels = sorted(Path(dist_dir).glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        typer.secho(f"install-package: no .whl file in {dist_dir}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1)
    interpreter = sys.executable if python in ("", "current") else python
    cmd = [interpreter, "-m", "pip", "install", "--no-deps", "--force-reinstall", "-q", str(wheels[-1])]
    typer.echo(" ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        raise typer.Exit(code=1)
    package = wheels[-1].name.split("-")[0]
    typer.echo(f"installed {package} ({wheels[-1].name})")
    if check_file is not None:
        with tempfile.TemporaryDirectory() as elsewhere:
            check = [interpreter, "-m", "spacy_maral", "predict", package, "--from-file", str(Path(check_file).resolve()), "--n", str(n)]
            if subprocess.run(check, cwd=elsewhere).returncode != 0:
                typer.secho(f"install-package: spacy.load({package!r}) failed after installing", fg=typer.colors.RED, err=True)
                raise typer.Exit(code=1)
