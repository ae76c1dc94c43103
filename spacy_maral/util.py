"""Small shared helpers: the registry, logging and the CLI's printer."""
import logging
import sys

from spacy.util import registry  # noqa: F401  (re-exported for the package's modules)
from wasabi import Printer

logger = logging.getLogger("spacy_maral")


def cli_printer() -> Printer:
    """wasabi's Printer, with its loading spinner only on a terminal: written to a log
    file, every frame of the spinner would stay in it."""
    return Printer(hide_animation=not sys.stdout.isatty())
