"""The lines of a UTF-8 text file, numbered, for every reader of text (CoNLL-style files,
plain target text, annotate's text and JSONL inputs): one place that decodes a line,
drops the byte-order mark and says how to re-encode a line that is not UTF-8."""
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


def decode_line(raw: bytes, number: int) -> str:
    """The text of one line of a UTF-8 file, its line break kept.

    raw (bytes): the line's bytes.
    number (int): its 1-based number: the first line loses a byte-order mark.
    RAISES (ValueError): the bytes are not UTF-8; the message says where in the line and
        how to re-encode the file (without the file's name: the caller names it).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start]
        raise ValueError(
            f"not valid UTF-8 (byte 0x{bad:02x} at byte {err.start + 1} of the line); {_encoding_hint(raw, number)}"
        ) from None
    return text[1:] if number == 1 and text.startswith("\ufeff") else text


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
                text = decode_line(raw, number + 1)
            except ValueError as err:
                raise ConversionError(path, number + 1, str(err)) from None
            lines = LINE_BREAK.split(text)
            if lines and lines[-1] == "":
                lines.pop()
            for line in lines:
                number += 1
                yield number, line
