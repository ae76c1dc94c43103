"""Small shared helpers: the registry, logging and the one printer of every command."""
import logging
import sys
from contextlib import contextmanager
from typing import IO, Any, Collection, Iterator, NoReturn, Optional, overload

import wasabi
from wasabi.util import ICONS, color

logger = logging.getLogger("spacy_maral")

LINE_WIDTH = 80  # a divider's width


def __getattr__(name: str) -> Any:
    """`registry`: spaCy's, re-exported for the package's modules, imported (with spaCy) on
    first use, so that the command line starts without spaCy."""
    if name == "registry":
        from spacy.util import registry

        return registry
    raise AttributeError(f"module 'spacy_maral.util' has no attribute {name!r}")


class Printer:
    """The one printer of every command (`python -m spacy_maral ...`, `python -m
    spacy_maral.bench ...`) and of the library code that reports to them.

    What a command reports goes to stdout (`text`, `info`, `good`, `divider`, `table`,
    `loading`); its warnings and errors go to stderr (`warn`, `fail`, and
    `text(..., err=True)` for the lines that detail them). Messages carry wasabi's icons,
    in colour only on a terminal, and are never wrapped (a path in a log stays whole);
    the loading spinner turns only on a terminal (written to a log file, every frame of
    it would stay there).
    """

    def text(self, message: str = "", err: bool = False) -> None:
        """A plain line: on stdout, or with `err` on stderr (the details of a warning or error)."""
        self._write(message, sys.stderr if err else sys.stdout)

    def info(self, message: str) -> None:
        """Progress, or a figure of the result (stdout)."""
        self._styled("info", message, sys.stdout)

    def good(self, message: str) -> None:
        """Something done, e.g. the file written (stdout)."""
        self._styled("good", message, sys.stdout)

    def warn(self, message: str) -> None:
        """A warning: the command goes on (stderr)."""
        self._styled("warn", message, sys.stderr)

    @overload
    def fail(self, message: str) -> None: ...

    @overload
    def fail(self, message: str, exits: int) -> NoReturn: ...

    def fail(self, message: str, exits: Optional[int] = None) -> None:
        """An error (stderr); with `exits`, the command ends there with that exit status."""
        self._styled("fail", message, sys.stderr)
        if exits is not None:
            raise SystemExit(exits)

    def divider(self, title: str = "") -> None:
        """A heading line, ==== title ==== (stdout)."""
        title = f" {title} " if title else ""
        side = "=" * max(0, (LINE_WIDTH - len(title)) // 2)
        line = f"{side}{title}{side}".ljust(LINE_WIDTH, "=")
        self._write("\n" + (color(line, bold=True) if _colours(sys.stdout) else line), sys.stdout)

    def table(self, data: Collection, **settings: object) -> None:
        """A table (wasabi.table: header, aligns, divider, ...) (stdout)."""
        self._write(wasabi.table(data, **settings), sys.stdout)

    @contextmanager
    def loading(self, message: str) -> Iterator[None]:
        """Show `message` while the block runs: with a spinner on a terminal, else once (stdout)."""
        with wasabi.Printer(hide_animation=not sys.stdout.isatty()).loading(message):
            yield

    def _styled(self, style: str, message: str, stream: IO[str]) -> None:
        line = f"{ICONS[style]} {message}"
        self._write(color(line, fg=style) if _colours(stream) else line, stream)

    @staticmethod
    def _write(text: str, stream: IO[str]) -> None:
        print(text, file=stream, flush=True)


def _colours(stream: IO[str]) -> bool:
    """Whether to colour what goes to `stream`: a terminal that takes ANSI colours."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and wasabi.util.supports_ansi()
