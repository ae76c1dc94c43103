"""The lines of a UTF-8 text file, numbered, for every reader of the corpora (CoNLL-style
files and plain target text): one place that drops the byte-order mark, ends lines as
text mode does and names the file and line that is not UTF-8."""
import re
from pathlib import Path
from typing import Iterator, Tuple

from spacy_maral.corpora.report import ConversionError

LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _encoding_hint(raw: bytes, number: int) -> str:
    """How to re-encode a file whose bytes are not UTF-8: UTF-16 (a UTF-16 byte-order
    mark, or NUL bytes) or a single-byte encoding such as Latin-1."""
    if (number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        return "it looks like UTF-16: re-encode it as UTF-8, e.g. `iconv -f utf-16 -t utf-8`"
    return "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`"


def decoded_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """Yield (1-based number, text without the line break) for each line of a UTF-8 file.

    path (Path): the file; a leading byte-order mark is dropped, and LF, CRLF and a lone
        CR all end a line, as in text mode.
    RAISES (ConversionError): a line that is not UTF-8, named by file and line, with how
        to re-encode the file.
    """
    number = 0
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start]
                raise ConversionError(
                    path,
                    number + 1,
                    f"not valid UTF-8 (byte 0x{bad:02x} at byte {err.start + 1} of the line); {_encoding_hint(raw, number + 1)}",
                ) from None
            if number == 0 and text.startswith("\ufeff"):
                text = text[1:]
            lines = LINE_BREAK.split(text)
            if lines and lines[-1] == "":
                lines.pop()
            for line in lines:
                number += 1
                yield number, line
