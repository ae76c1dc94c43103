"""Characters that are not text, and where an entity may not have them.

Not text: the Unicode categories Cc (controls), Cf (format), Co (private use), Cs
(surrogates) and Cn (unassigned), except the whitespace controls TAB, LF, VT, FF and CR,
which stay whitespace as spaCy tokenizes them (whitespace tokens; an entity never starts
or ends on one). An entity never starts or ends on, nor contains, a character that is not
text, with one exception: the joiners ZWNJ and ZWJ (U+200C, U+200D) are part of words in
Persian and Indic scripts (and of emoji sequences), so an entity may have them inside, never
at its start or end.

This module is the one definition: the tokenizer (spacy_maral.tokenizer.v1) makes each
such character its own token and splits the joiners off a token's edges, decoding never
keeps a span that has them where it may not (whatever the tokenizer), and the count of
words without subwords leaves them out (they can't be entities).
"""
import re
import sys
import unicodedata
from functools import lru_cache
from typing import List, Optional, Tuple

import numpy
from spacy.tokens import Doc

NON_TEXT_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})
WHITESPACE_CONTROLS = frozenset("\t\n\x0b\x0c\r")
JOINERS = frozenset("\u200c\u200d")


def is_non_text(char: str) -> bool:
    """Whether `char` is not text (never in an entity): see the module's docstring."""
    return unicodedata.category(char) in NON_TEXT_CATEGORIES and char not in WHITESPACE_CONTROLS and char not in JOINERS


@lru_cache(maxsize=None)
def _patterns() -> Tuple["re.Pattern[str]", "re.Pattern[str]"]:
    """(the characters that are not text, those and the joiners) as regex classes, built
    once per process from this Python's Unicode database (about 0.4 s)."""
    ranges: List[Tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if is_non_text(chr(cp)):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    body = "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)
    joiners = "".join(f"\\U{ord(c):08x}" for c in sorted(JOINERS))
    return re.compile(f"[{body}]"), re.compile(f"[{body}{joiners}]")


def non_text_re() -> "re.Pattern[str]":
    """The characters that are not text, as a compiled regex class."""
    return _patterns()[0]


def edge_re() -> "re.Pattern[str]":
    """The characters an entity may not start or end on besides whitespace: those that
    are not text, and the joiners."""
    return _patterns()[1]


def split_off(word: str) -> List[str]:
    """`word` cut so that each character that is not text is a piece of its own and no
    other piece starts or ends with a joiner (a joiner at an edge is its own piece).

    word (str): a token's text.
    RETURNS (List[str]): the pieces, in order; [word] when nothing is cut.
    """
    if not edge_re().search(word):
        return [word]
    pieces: List[str] = []
    run: List[str] = []

    def flush() -> None:  # a run of text, its edge joiners as pieces of their own
        start, end = 0, len(run)
        while start < end and run[start] in JOINERS:
            start += 1
        while end > start and run[end - 1] in JOINERS:
            end -= 1
        pieces.extend(run[:start] + (["".join(run[start:end])] if end > start else []) + run[end:])
        run.clear()

    for char in word:
        if is_non_text(char):
            flush()
            pieces.append(char)
        else:
            run.append(char)
    flush()
    return pieces


def entity_bounds(doc: Doc) -> Optional[Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]]:
    """Per token of `doc`: may no entity start on it, end on it, or contain it, by its
    characters that are not text (the whitespace rule is decoding's); None when the doc
    has no such character (the common case, one regex search).

    RETURNS (Optional[Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]]): three bool
        arrays (n_tokens,): no_start, no_end, no_inside.
    """
    if not edge_re().search(doc.text):
        return None
    non_text, edge = non_text_re(), edge_re()
    no_start = numpy.zeros(len(doc), dtype=bool)
    no_end = numpy.zeros(len(doc), dtype=bool)
    no_inside = numpy.zeros(len(doc), dtype=bool)
    for token in doc:
        text = token.text
        if not edge.search(text):
            continue
        no_inside[token.i] = non_text.search(text) is not None
        no_start[token.i] = no_inside[token.i] or text[0] in JOINERS
        no_end[token.i] = no_inside[token.i] or text[-1] in JOINERS
    return no_start, no_end, no_inside


def is_non_text_token(text: str) -> bool:
    """Whether a token is only characters that are not text or joiners (it can't be
    part of an entity's words, so it needs no subword either)."""
    return bool(text) and all(is_non_text(c) or c in JOINERS for c in text)
