"""What a conversion reports: the error that names file and line, and the counts of
what was read, repaired and written."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

if TYPE_CHECKING:  # the annotation only: this module (and lines.py) stays free of spaCy
    from spacy.tokens import Doc

PathLike = Union[str, "os.PathLike[str]"]


class ConversionError(ValueError):
    """A malformed input file (or, in strict mode, an ill-formed tag sequence).

    path: the input file.
    line: the 1-based line number where the problem is.
    reason: what is wrong there.
    """

    def __init__(self, path: PathLike, line: int, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        super().__init__(f"{self.path}, line {line}: {reason}")


@dataclass
class CorpusCounts:
    """Sentence, token and per-label entity counts of a set of Docs.

    sentences: number of Docs (one per sentence).
    tokens: number of tokens.
    entities: number of entities per label.
    """

    sentences: int = 0
    tokens: int = 0
    entities: Counter = field(default_factory=Counter)

    @property
    def total_entities(self) -> int:
        """The number of entities over all labels."""
        return sum(self.entities.values())

    def add(self, doc: Doc) -> None:
        """Count one Doc.

        doc: a sentence Doc with its entities in `doc.ents`.
        """
        self.sentences += 1
        self.tokens += len(doc)
        self.entities.update(ent.label_ for ent in doc.ents)


@dataclass
class ConversionStats(CorpusCounts):
    """What a conversion read, repaired and wrote: the counts of what it read
    (CorpusCounts: sentences, tokens, entities per label; `-DOCSTART-` lines are not
    sentences), and

    path: the input file.
    fmt: the file format used (detected when "auto" was asked).
    scheme: the tag scheme used (detected when "auto" was asked).
    documents: `-DOCSTART-` lines seen.
    lines: lines read.
    repairs: (1-based line, message) for every lenient repair of a tag sequence.
    written: what was written and read back from the output (`convert_file` only).
    """

    path: str = ""
    fmt: str = ""
    scheme: str = ""
    documents: int = 0
    lines: int = 0
    repairs: List[Tuple[int, str]] = field(default_factory=list)
    written: Optional[CorpusCounts] = None
