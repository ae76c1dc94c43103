"""Tag schemes (IOB1, IOB2, BIOES/BILOU): telling them apart from the tags, and decoding
one sentence's tags into entity spans, repairing (and recording) ill-formed sequences."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from spacy_maral.corpora.report import ConversionError

SCHEMES: Tuple[str, ...] = ("auto", "iob1", "iob2", "bioes")
_SCHEME_ALIASES: Dict[str, str] = {"iob": "iob2", "bio": "iob2", "bilou": "bioes", "iobes": "bioes"}
_SCHEME_PREFIXES: Dict[str, str] = {"iob1": "BI", "iob2": "BI", "bioes": "BIESLU"}
_SCHEME_NAMES: Dict[str, str] = {"iob1": "IOB1", "iob2": "IOB2", "bioes": "BIOES/BILOU"}
_TAG = re.compile(r"^(?:O|([BIESLU])-(\S+))$")


@dataclass
class TaggedSentence:
    """The token lines of one sentence: words, raw tags and their 1-based line numbers."""

    words: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    lines: List[int] = field(default_factory=list)


def _normalise_scheme(scheme: str) -> str:
    """Validate a scheme name, mapping aliases (bilou -> bioes, iob -> iob2).

    scheme: one of SCHEMES or an alias.
    """
    value = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    if value not in SCHEMES:
        raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    return value


@dataclass
class _SchemeEvidence:
    """Counts that separate the tag schemes."""

    bioes_tags: int = 0  # E-, S-, L-, U- tags
    b_starts: int = 0  # B-X not preceded by a tag of type X
    i_starts: int = 0  # I-X not preceded by a tag of type X

    @property
    def starts(self) -> int:
        """Entity starts seen so far."""
        return self.b_starts + self.i_starts

    def add(self, tags: List[str]) -> None:
        """Count the evidence in one sentence's tags.

        tags: the raw tags (unparseable ones count as O; the reader reports them).
        """
        previous = ""
        for tag in tags:
            match = _TAG.match(tag)
            prefix, label = (match.group(1), match.group(2)) if match else (None, None)
            if prefix in ("E", "S", "L", "U"):
                self.bioes_tags += 1
            elif prefix == "B" and label != previous:
                self.b_starts += 1
            elif prefix == "I" and label != previous:
                self.i_starts += 1
            previous = label or ""

    def scheme(self) -> str:
        """The scheme the evidence points to (IOB2 when there is no evidence)."""
        if self.bioes_tags:
            return "bioes"
        return "iob1" if self.i_starts > self.b_starts else "iob2"


class _SpanDecoder:
    """Turn one sentence's tags into entity spans, recording or raising on repairs.

    path: the input file (for messages).
    scheme: "iob1", "iob2" or "bioes".
    strict: raise a ConversionError instead of repairing.
    repairs: the list the (line, message) repairs are appended to.
    """

    def __init__(
        self, path: Path, scheme: str, strict: bool, repairs: List[Tuple[int, str]]
    ) -> None:
        self.path = path
        self.scheme = scheme
        self.strict = strict
        self.repairs = repairs
        self.allowed = _SCHEME_PREFIXES[scheme]
        self.spans: List[Tuple[int, int, str]] = []
        self.start: Optional[int] = None
        self.label = ""

    def decode(self, sentence: TaggedSentence) -> List[Tuple[int, int, str]]:
        """The (start, end, label) token spans of a sentence.

        sentence: its words, tags and line numbers.
        """
        self.spans, self.start, self.label = [], None, ""
        previous = "the sentence start"
        step = self._step_bioes if self.scheme == "bioes" else self._step_iob
        for i, (word, tag, line) in enumerate(zip(sentence.words, sentence.tags, sentence.lines)):
            prefix, label = self._parse(tag, line)
            step(i, prefix, label, f"{tag} on {word!r} after {previous}", line)
            previous = tag
        if self.start is not None and self.scheme == "bioes":
            message = f"{self.label} entity not closed with E- at the sentence end; closed there"
            self._repair(sentence.lines[-1], message)
        self._close(len(sentence.words))
        return self.spans

    def _parse(self, tag: str, line: int) -> Tuple[str, str]:
        """Split a tag into (prefix, label), ("O", "") for outside; raise if not in the scheme.

        tag: the raw tag.
        line: its 1-based line number.
        """
        match = _TAG.match(tag)
        if match is None or (match.group(1) and match.group(1) not in self.allowed):
            wanted = "O or B/I-<label>" if self.allowed == "BI" else "O or B/I/E/S/L/U-<label>"
            name = _SCHEME_NAMES[self.scheme]
            raise ConversionError(
                self.path, line, f"tag {tag!r} does not fit the {name} scheme (expected {wanted})"
            )
        if match.group(1) is None:
            return "O", ""
        prefix = {"L": "E", "U": "S"}.get(match.group(1), match.group(1))
        return prefix, match.group(2)

    def _repair(self, line: int, message: str) -> None:
        """Record a lenient repair, or raise in strict mode.

        line: the 1-based line number.
        message: what was repaired.
        """
        if self.strict:
            raise ConversionError(self.path, line, f"{message} (strict mode)")
        self.repairs.append((line, message))

    def _open(self, i: int, label: str) -> None:
        """Start an entity at token i.

        i: token index.
        label: entity label.
        """
        self.start, self.label = i, label

    def _close(self, end: int) -> None:
        """End the open entity (if any) before token `end`.

        end: exclusive token index.
        """
        if self.start is not None:
            self.spans.append((self.start, end, self.label))
        self.start, self.label = None, ""

    def _continues(self, label: str) -> bool:
        """Whether an entity of this label is open.

        label: entity label.
        """
        return self.start is not None and self.label == label

    def _step_iob(self, i: int, prefix: str, label: str, where: str, line: int) -> None:
        """Consume one IOB1/IOB2 tag.

        i: token index.
        prefix: "O", "B" or "I".
        label: entity label ("" for O).
        where: the tag, word and previous tag, for repair messages.
        line: the 1-based line number.
        """
        if prefix == "O":
            self._close(i)
            return
        if prefix == "I" and self._continues(label):
            return
        if prefix == "I" and self.scheme == "iob2":
            self._repair(line, f"{where} starts a new entity (IOB2 expects B-{label})")
        if prefix == "B" and self.scheme == "iob1" and not self._continues(label):
            self._repair(line, f"{where} starts a new entity (IOB1 uses B- only after I-{label})")
        self._close(i)
        self._open(i, label)

    def _step_bioes(self, i: int, prefix: str, label: str, where: str, line: int) -> None:
        """Consume one BIOES tag (L- already read as E-, U- as S-).

        i: token index.
        prefix: "O", "B", "I", "E" or "S".
        label: entity label ("" for O).
        where: the tag, word and previous tag, for repair messages.
        line: the 1-based line number.
        """
        if prefix in ("I", "E") and self._continues(label):
            if prefix == "E":
                self._close(i + 1)
            return
        problems = []
        if self.start is not None:
            problems.append(f"closes the open {self.label} entity (no E-{self.label})")
        if prefix in ("I", "E"):
            kind = "an entity" if prefix == "I" else "a single-token entity"
            problems.append(f"starts {kind} (no B-{label})")
        if problems:
            self._repair(line, f"{where} {' and '.join(problems)}")
        self._close(i)
        if prefix in ("B", "I"):
            self._open(i, label)
        elif prefix in ("S", "E"):
            self.spans.append((i, i + 1, label))


# ----------------------------------------------------------------------------- docs
