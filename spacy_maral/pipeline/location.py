"""Where `spacy.load` finds a pipeline: a folder, an installed package, or `blank:LANG`,
by the rules of spaCy's `util.load_model`, found without importing spaCy or torch, so
that a command refuses a misspelt pipeline at once instead of after its imports."""
from importlib import metadata
from pathlib import Path
from typing import Optional, Union


def installed_package(name: str) -> bool:
    """Whether `name` is an installed distribution, as spaCy's `util.is_package` asks
    (an installed pipeline package such as xx_maral_ner)."""
    try:
        metadata.distribution(name)
        return True
    except Exception:  # as spaCy's: not found, not a distribution name, or metadata it can't read
        return False


def pipeline_folder(model: Union[str, Path]) -> Optional[Path]:
    """The folder spacy.load reads `model` from: the directory itself, or an installed
    package's folder; None for a name that is neither (spacy.load's own error follows).

    model (Union[str, Path]): a pipeline directory or an installed package name (a Path
        is only ever a directory, as for spacy.load).
    """
    path = Path(str(model))
    if path.is_dir():
        return path
    if not isinstance(model, Path) and installed_package(str(model)):
        import spacy.util

        return spacy.util.get_package_path(str(model))
    return None


def pipeline_found(model: Union[str, Path]) -> bool:
    """Whether spacy.load(model) finds something to load: a string that starts with
    "blank:" or names an installed package, else a path that exists.

    model (Union[str, Path]): what the user gave as a pipeline.
    RETURNS (bool): False where spacy.load would raise "Can't find model" (E050, E052).
    """
    if isinstance(model, str) and (model.startswith("blank:") or installed_package(model)):
        return True
    return Path(model).exists()


def check_pipeline_found(model: Union[str, Path]) -> None:
    """Raise ValueError naming `model` where spacy.load would find no pipeline there, or a
    path that is not a pipeline folder (a file, or a folder without config.cfg, such as
    a training run's output folder, whose pipelines are its model-best and model-last).

    model (Union[str, Path]): a pipeline folder or an installed package name.
    RAISES (ValueError): neither exists, or the path is not a pipeline folder.
    """
    if not pipeline_found(model):
        raise ValueError(
            f"no pipeline {model}: neither a pipeline folder nor an installed package of that name "
            "(give the folder of a trained pipeline, e.g. training/student/model-best, or `pip install` its package)"
        )
    path = Path(str(model))
    if isinstance(model, str) and (model.startswith("blank:") or installed_package(model)):
        return
    if not (path / "config.cfg").is_file():
        inside = sorted(str(p.parent) for p in path.glob("*/config.cfg")) if path.is_dir() else []
        kind = "a file" if path.is_file() else "a folder without config.cfg"
        raise ValueError(f"{model} is {kind}, not a pipeline folder"
                         + (f": the pipelines in it are {', '.join(inside)}" if inside else ""))
