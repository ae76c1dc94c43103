"""Progress messages of the encoder build: logged always, printed when asked."""
import logging

from spacy_maral.util import Printer

logger = logging.getLogger("spacy_maral.encoders")


class Reporter:
    """Progress messages: logged always, printed (the commands' Printer) when enabled."""

    def __init__(self, enabled: bool) -> None:
        """enabled (bool): whether to print the messages (they are logged in any case)."""
        self.enabled = enabled
        self.printer = Printer()

    def __call__(self, message: str) -> None:
        """message (str): the text to report."""
        logger.info(message)
        if self.enabled:
            self.printer.info(message)
