"""A pipeline's folder on disk (found by `location.pipeline_folder`): its config read without
loading the pipeline, and the one rule that names the file when a file of it is damaged.

Loading reads many files (config.cfg, meta.json, tokenizer, vocab/*, each component's
cfg and weights) through spaCy, thinc, srsly, numpy and torch, whose errors rarely say
which file they were reading ("Expected object or value", "Unpack failed: incomplete
input"). `naming_the_damaged_file` records every file opened under the folder while it
loads (a Python audit hook, active only inside the block) and turns an error into a
`DamagedPipelineError` that names the file: the one the error itself names, else the last
one opened.
"""
import contextvars
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional, Union

from catalogue import RegistryError
from thinc.api import Config

from spacy_maral.pipeline.location import pipeline_folder

_OPENED: "contextvars.ContextVar[Optional[List[str]]]" = contextvars.ContextVar("spacy_maral_opened", default=None)
_HOOKED = False
MAX_DETAIL = 400  # characters of the underlying error kept in the one-line message


class DamagedPipelineError(ValueError):
    """A file of a pipeline folder could not be read; the message names it (one line).

    path (Path): the damaged (or missing) file.
    """

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> Any:  # pickles (a worker process or a Ray actor raises it)
        return type(self), (str(self), self.path)


def _audit(event: str, args: Any) -> None:
    if event != "open":
        return
    opened = _OPENED.get()
    if opened is not None and args and isinstance(args[0], (str, bytes, os.PathLike)):
        try:
            opened.append(os.fsdecode(args[0]))
        except Exception:  # an audit hook must never raise
            pass


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _damaged_file(err: BaseException, opened: List[str], folder: Path) -> Optional[Path]:
    """The file of `folder` that `err` is about: one its message names, else the last one
    opened under the folder (None: the error came before any)."""
    root = os.path.abspath(folder)
    for match in re.findall(re.escape(str(folder) + os.sep) + r"[^\s'\":;,()]+", str(err)):
        return Path(match.rstrip("."))
    for name in reversed(opened):
        full = os.path.abspath(name)
        if full.startswith(root + os.sep) and not full.endswith((".py", ".pyc")):
            return Path(folder) / os.path.relpath(full, root)
    return None


@contextmanager
def naming_the_damaged_file(folder: Union[str, Path]) -> Iterator[None]:
    """Within the block, an error raised while the files of `folder` are read becomes a
    DamagedPipelineError naming the file (an ImportError or a RegistryError, a package or
    a registered function that is missing, stays as it is).

    folder (Union[str, Path]): the pipeline folder (or one component's folder).
    RAISES (DamagedPipelineError): "FILE: can't be read (TYPE: DETAIL); the pipeline
        directory FOLDER is damaged or incomplete", on one line.
    """
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)  # permanent, as audit hooks are; it records only inside this block
        _HOOKED = True
    folder = Path(folder)
    outer = _OPENED.get()
    opened = outer if outer is not None else []
    start = len(opened)
    token = _OPENED.set(opened)
    try:
        yield
    except (DamagedPipelineError, ImportError, RegistryError):  # a package or a registered function missing: not a file
        raise
    except Exception as err:
        damaged = _damaged_file(err, opened[start:], folder)
        if damaged is None:
            raise
        detail = _one_line(str(err) or type(err).__name__)
        verdict = f"the pipeline directory {folder} is damaged or incomplete"
        if str(damaged) in detail:  # the error names the file already
            message = detail if "damaged" in detail or "incomplete" in detail else f"{detail}; {verdict}"
        else:
            message = f"{damaged}: can't be read ({type(err).__name__}: {detail}); {verdict}"
        raise DamagedPipelineError(message, damaged) from err
    finally:
        _OPENED.reset(token)


def load_naming_the_damaged_file(model: Union[str, Path], **kwargs: Any):
    """spacy.load(model, **kwargs); a damaged file of its folder is named
    (DamagedPipelineError)."""
    import spacy

    folder = pipeline_folder(model)
    if folder is None:
        return spacy.load(model, **kwargs)
    if Path(str(model)).is_dir():
        for required in ("config.cfg", "meta.json"):  # what spacy.load reads first, whatever the pipeline
            missing = folder / required
            if not missing.is_file():
                raise DamagedPipelineError(f"{missing} is missing; the pipeline directory {folder} is incomplete", missing)
    with naming_the_damaged_file(folder):
        return spacy.load(model, **kwargs)


def pipeline_config(model: Union[str, Path]) -> Config:
    """The config a pipeline was saved with (not interpolated), read without loading it.

    model (Union[str, Path]): a pipeline directory or an installed package name.
    RAISES (OSError): no such pipeline; (DamagedPipelineError): a damaged config.cfg.
    """
    folder = pipeline_folder(model)
    if folder is None:
        raise OSError(f"can't find the pipeline {model}: neither a directory nor an installed package")
    candidates = [folder / "config.cfg", *sorted(folder.glob("*/config.cfg"))]  # a package keeps it one level down
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        missing = folder / "config.cfg"
        raise DamagedPipelineError(f"{missing} is missing; the pipeline directory {folder} is incomplete", missing)
    with naming_the_damaged_file(folder):
        return Config().from_disk(path, interpolate=False)
