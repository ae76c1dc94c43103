"""The training logger of the shipped configs: spaCy's console logger, whose log file a
new training replaces.

spaCy's `spacy.ConsoleLogger.v3` writes nothing to its `output_file` where that file
already exists (it warns, and the training's log is lost), so a teacher or student
trained again into the same folder kept the log of the training before it.
`spacy_maral.ConsoleLogger.v1` takes the same settings, removes that file when a
training starts (not when the config is resolved: `spacy debug config` removes nothing)
and leaves everything else to spaCy's logger. A stage-2 run resumed from its checkpoint
counts its steps from 0 again, and its log holds that run's steps.
"""
import sys
from pathlib import Path
from typing import IO, Any, Callable, Dict, Optional, Tuple, Union

from spacy.language import Language

from spacy_maral.util import registry

LogStep = Callable[[Optional[Dict[str, Any]]], None]


@registry.loggers("spacy_maral.ConsoleLogger.v1")
def console_logger(
    progress_bar: Optional[str] = None,
    console_output: bool = True,
    output_file: Optional[Union[str, Path]] = None,
) -> Callable[..., Tuple[LogStep, Callable[[], None]]]:
    """spaCy's ConsoleLogger.v3 whose `output_file` a new training replaces.

    progress_bar (Optional[str]): "train", "eval" or None, as spaCy's.
    console_output (bool): print the table of losses and scores.
    output_file (Optional[Union[str, Path]]): the JSON-lines log, one line an evaluation;
        an existing file of that name is removed when the training starts.
    """

    def setup_printer(nlp: Language, stdout: IO = sys.stdout, stderr: IO = sys.stderr) -> Tuple[LogStep, Callable[[], None]]:
        if output_file is not None and Path(output_file).is_file():
            Path(output_file).unlink()  # spaCy's logger would log nothing where it exists
        spacy_logger = registry.loggers.get("spacy.ConsoleLogger.v3")
        return spacy_logger(progress_bar=progress_bar, console_output=console_output, output_file=output_file)(nlp, stdout, stderr)

    return setup_printer
