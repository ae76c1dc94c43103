"""The guard's verdict file as its readers see it (`export --guard`, `evaluate --guard`,
`languages`): where a pipeline is recorded, and which pipeline the guard chose, read
without importing spaCy, so that a bad verdict is refused at once. The guard itself
writes it (spacy_maral.evaluation.guard.write_verdict)."""
import json
import os
from pathlib import Path
from typing import Tuple, Union


def where(pipeline: Union[str, Path]) -> str:
    """How a verdict records a pipeline: a folder by its absolute path (read from any
    folder, `export --guard` finds the one the guard chose), a package by its name."""
    return os.path.abspath(pipeline) if Path(pipeline).exists() else str(pipeline)


def read_verdict(path: Path) -> Tuple[str, Path]:
    """The (chosen, chosen_path) of a verdict file of write_verdict.

    path (Path): the verdict file.
    RAISES (ValueError): the file is unreadable or is not such a verdict; the message
        names the file and what is wrong.
    """
    try:
        verdict = json.loads(Path(path).read_text(encoding="utf8"))
        chosen, chosen_path = verdict["chosen"], verdict["chosen_path"]
        if not isinstance(chosen, str) or not isinstance(chosen_path, str):
            raise TypeError("'chosen' and 'chosen_path' must be strings")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        detail = f"no {err} field" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise ValueError(f"{path} is not a verdict of `spacy_maral guard` ({detail})") from err
    return chosen, Path(chosen_path)
