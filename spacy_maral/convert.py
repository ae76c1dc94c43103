"""Convert CoNLL-style NER token files into spaCy Docs and `.spacy` DocBins.

One Doc per sentence, built on the file's own (gold) tokens: `Doc(vocab, words=...,
spaces=...)` with the spacing of ordinary prose (spacy_maral.detokenize: no space before
closing punctuation or after an opening bracket), so `doc.text` is the raw sentence, and
the entities in `doc.ents` (every other token explicitly outside, "O").

Formats (`fmt`):
    conll       two or more columns separated by spaces or tabs, the tag in the LAST
                column, a blank line between sentences. `-DOCSTART-` lines in any form
                (alone, with extra columns, tab or space separated) are document
                separators, never tokens; one that directly follows tokens ends the
                sentence.
    wikiann     the Rahimi et al. (2019) WikiANN split: `lang:token<TAB>tag`; the
                `lang:` prefix is stripped.
    multiconer  CoNLL-like with `# id ...` comment lines that start a sentence and `_ _`
                middle columns (`word _ _ B-PER`).
    auto        sniffed from the first non-empty lines.

Tag schemes (`scheme`): `iob2` (B- starts every entity), `iob1` (I- starts an entity, B-
only separates two adjacent entities of one type; converted to IOB2), `bioes` (also
BILOU: L- is read as E-, U- as S-) and `auto`, detected from the tags. Labels are
whatever the data carries.

Ill-formed but decodable tag sequences (an `I-X` after `O` in IOB2 data, a BIOES entity
never closed with `E-`, ...) are repaired leniently and each repair is recorded, with its
line, in `ConversionStats.repairs`; `strict=True` raises a `ConversionError` instead.
Malformed files (wrong column count, a tag outside the scheme, non-UTF-8 bytes, no
sentences at all) always raise a `ConversionError` naming the file and the 1-based line.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

from spacy.tokens import Doc, DocBin, Span
from spacy.util import get_lang_class
from spacy.vocab import Vocab, create_vocab

from .detokenize import detokenized_spaces

__all__ = [
    "FORMATS",
    "SCHEMES",
    "ConversionError",
    "ConversionStats",
    "CorpusCounts",
    "convert_file",
    "detect_format",
    "detect_scheme",
    "docs_to_conll",
    "read_conll",
]

PathLike = Union[str, "os.PathLike[str]"]

FORMATS: Tuple[str, ...] = ("auto", "conll", "wikiann", "multiconer")
SCHEMES: Tuple[str, ...] = ("auto", "iob1", "iob2", "bioes")
_SCHEME_ALIASES: Dict[str, str] = {"iob": "iob2", "bio": "iob2", "bilou": "bioes", "iobes": "bioes"}

DOCSTART = "-DOCSTART-"
_BLANK_CHARS = " \t\r\n\f\v"
_FIELD_SEP = re.compile(r"[ \t]+")  # only ASCII blanks: a token may hold e.g. U+00A0
_TAG = re.compile(r"^(?:O|([BIESLU])-(\S+))$")
_LANG_PREFIX = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*:(.+)$")
_MULTICONER_COMMENT = re.compile(r"^#\s*id(?:\s|$)")
_SCHEME_PREFIXES: Dict[str, str] = {"iob1": "BI", "iob2": "BI", "bioes": "BIESLU"}
_SCHEME_NAMES: Dict[str, str] = {"iob1": "IOB1", "iob2": "IOB2", "bioes": "BIOES/BILOU"}
_SNIFF_LINES = 50  # non-empty lines read to guess the format
_SNIFF_ENTITY_STARTS = 2000  # entity starts read to guess the tag scheme


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
class ConversionStats:
    """What a conversion read, repaired and wrote.

    path: the input file.
    fmt: the file format used (detected when "auto" was asked).
    scheme: the tag scheme used (detected when "auto" was asked).
    sentences: sentences read (`-DOCSTART-` lines are not sentences).
    tokens: tokens read.
    entities: entities read, per label.
    documents: `-DOCSTART-` lines seen.
    lines: lines read.
    repairs: (1-based line, message) for every lenient repair of a tag sequence.
    written: what was written and read back from the output (`convert_file` only).
    """

    path: str = ""
    fmt: str = ""
    scheme: str = ""
    sentences: int = 0
    tokens: int = 0
    entities: Counter = field(default_factory=Counter)
    documents: int = 0
    lines: int = 0
    repairs: List[Tuple[int, str]] = field(default_factory=list)
    written: Optional[CorpusCounts] = None

    @property
    def total_entities(self) -> int:
        """The number of entities read over all labels."""
        return sum(self.entities.values())

    def add_doc(self, doc: Doc) -> None:
        """Count one converted sentence.

        doc: the sentence Doc with its entities.
        """
        self.sentences += 1
        self.tokens += len(doc)
        self.entities.update(ent.label_ for ent in doc.ents)


# ----------------------------------------------------------------------------- reading


@dataclass
class _Sentence:
    """The token lines of one sentence: words, raw tags and their 1-based line numbers."""

    words: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    lines: List[int] = field(default_factory=list)


@dataclass
class _DocStart:
    """A `-DOCSTART-` line (document separator)."""

    line: int


@dataclass
class _EndOfFile:
    """The end of the input, after `lines` lines."""

    lines: int


def _decoded_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """Yield (1-based number, text without the line break) for each line of a UTF-8 file.

    path: the file; a leading byte-order mark is dropped and CRLF endings are accepted.
    """
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start]
                raise ConversionError(
                    path,
                    number,
                    f"not valid UTF-8 (byte 0x{bad:02x} at byte {err.start + 1} of the "
                    "line); re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`",
                ) from None
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text.rstrip("\r\n")


def _split_fields(text: str) -> List[str]:
    """The columns of a line, split on runs of spaces and tabs ([] for a blank line).

    text: the line without its line break.
    """
    stripped = text.strip(_BLANK_CHARS)
    return _FIELD_SEP.split(stripped) if stripped else []


def _strip_lang_prefix(path: Path, number: int, token: str) -> str:
    """The token of a WikiANN `lang:token` column.

    path: the input file (for the error message).
    number: the 1-based line number (for the error message).
    token: the first column of the line.
    """
    match = _LANG_PREFIX.match(token)
    if match is None:
        raise ConversionError(
            path, number, f"expected a WikiANN 'lang:token' column, found {token!r}"
        )
    return match.group(1)


def _check_columns(
    path: Path, number: int, fields: List[str], fmt: str, expected: Optional[Tuple[int, int]]
) -> Tuple[int, int]:
    """Check a token line's column count; return (count, line) fixing the file's count.

    path: the input file (for the error message).
    number: the 1-based line number.
    fields: the line's columns.
    fmt: the file format ("wikiann" requires exactly two columns).
    expected: (column count, line it was set on) from the first token line, or None.
    """
    if len(fields) < 2:
        raise ConversionError(
            path,
            number,
            f"empty tag: the token {fields[0]!r} has no tag column "
            "(expected at least 2 columns, the tag last)",
        )
    if fmt == "wikiann" and len(fields) != 2:
        raise ConversionError(
            path, number, f"found {len(fields)} columns, expected 2 (lang:token TAB tag)"
        )
    if expected is None:
        return len(fields), number
    if len(fields) != expected[0]:
        raise ConversionError(
            path,
            number,
            f"found {len(fields)} columns, expected {expected[0]} "
            f"as on the first token line (line {expected[1]})",
        )
    return expected


def _iter_sentences(path: Path, fmt: str) -> Iterator[Union[_Sentence, _DocStart, _EndOfFile]]:
    """Yield the sentences and `-DOCSTART-` separators of a file in order, then its end.

    path: the input file.
    fmt: "conll", "wikiann" or "multiconer" (not "auto").
    """
    sentence = _Sentence()
    expected: Optional[Tuple[int, int]] = None
    number = 0
    for number, text in _decoded_lines(path):
        fields = _split_fields(text)
        is_comment = fmt == "multiconer" and _MULTICONER_COMMENT.match(text) is not None
        word = fields[0] if fields else ""
        if fields and not is_comment and fmt == "wikiann" and word != DOCSTART:
            word = _strip_lang_prefix(path, number, word)
        is_docstart = word == DOCSTART
        if not fields or is_comment or is_docstart:
            if sentence.words:
                yield sentence
                sentence = _Sentence()
            if is_docstart:
                yield _DocStart(number)
            continue
        expected = _check_columns(path, number, fields, fmt, expected)
        sentence.words.append(word)
        sentence.tags.append(fields[-1])
        sentence.lines.append(number)
    if sentence.words:
        yield sentence
    yield _EndOfFile(number)


# ----------------------------------------------------------------------------- detection


def _normalise_fmt(fmt: str) -> str:
    """Validate a format name.

    fmt: one of FORMATS.
    """
    value = fmt.lower()
    if value not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return value


def _normalise_scheme(scheme: str) -> str:
    """Validate a scheme name, mapping aliases (bilou -> bioes, iob -> iob2).

    scheme: one of SCHEMES or an alias.
    """
    value = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    if value not in SCHEMES:
        raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    return value


def _looks_like_wikiann(token_lines: List[List[str]]) -> bool:
    """Whether sniffed token lines are all `lang:token tag` pairs.

    token_lines: the columns of the first non-blank, non-DOCSTART lines.
    """
    return bool(token_lines) and all(
        len(fields) == 2 and _LANG_PREFIX.match(fields[0]) is not None for fields in token_lines
    )


def detect_format(path: PathLike) -> str:
    """Guess the format of a token file from its first non-empty lines.

    path: the input file.

    Returns "multiconer" when a `# id` comment line is seen, "wikiann" when every token
    line is `lang:token tag`, else "conll". Undecodable bytes end the sniffing early (the
    reader reports them with their line).
    """
    path = Path(path)
    token_lines: List[List[str]] = []
    seen = 0
    try:
        for _, text in _decoded_lines(path):
            fields = _split_fields(text)
            if not fields:
                continue
            if _MULTICONER_COMMENT.match(text):
                return "multiconer"
            if fields[0] != DOCSTART:
                token_lines.append(fields)
            seen += 1
            if seen >= _SNIFF_LINES:
                break
    except ConversionError:
        pass
    return "wikiann" if _looks_like_wikiann(token_lines) else "conll"


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


def detect_scheme(path: PathLike, fmt: str = "auto") -> str:
    """Guess the tag scheme of a file: "bioes", "iob1" or "iob2".

    path: the input file.
    fmt: its format (one of FORMATS; "auto" sniffs it).

    Any E-/S-/L-/U- tag means BIOES; otherwise IOB1 when more entities start with I- than
    with B- (B- right after the same type does not count), else IOB2. Reads until enough
    entity starts are seen, so a few stray I- tags in IOB2 data stay repairs.
    """
    path = Path(path)
    fmt = _normalise_fmt(fmt)
    if fmt == "auto":
        fmt = detect_format(path)
    evidence = _SchemeEvidence()
    for item in _iter_sentences(path, fmt):
        if isinstance(item, _Sentence):
            evidence.add(item.tags)
            if evidence.bioes_tags or evidence.starts >= _SNIFF_ENTITY_STARTS:
                break
    return evidence.scheme()


# ----------------------------------------------------------------------------- tags


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

    def decode(self, sentence: _Sentence) -> List[Tuple[int, int, str]]:
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


def _make_doc(vocab: Vocab, words: List[str], spans: List[Tuple[int, int, str]]) -> Doc:
    """A sentence Doc on gold tokens with its entities; other tokens are outside ("O").

    The spaces between tokens are those of ordinary prose (spacy_maral.detokenize), so
    doc.text is the raw sentence a user would type and the pipeline's own tokenizer can
    be trained and evaluated on it.

    vocab: the shared vocabulary.
    words: the tokens.
    spans: (start, end, label) token spans.
    """
    doc = Doc(vocab, words=words, spaces=detokenized_spaces(words))
    entities = [Span(doc, start, end, label=label) for start, end, label in spans]
    doc.set_ents(entities, default="outside")
    return doc


def read_conll(
    path: PathLike,
    fmt: str = "auto",
    scheme: str = "auto",
    strict: bool = False,
    stats: Optional[ConversionStats] = None,
    *,
    vocab: Optional[Vocab] = None,
) -> Iterator[Doc]:
    """Stream one Doc per sentence from a CoNLL-style file (constant memory).

    path: the input file (UTF-8).
    fmt: "auto", "conll", "wikiann" or "multiconer".
    scheme: "auto", "iob1", "iob2" or "bioes" ("bilou" and "iob" are accepted aliases).
    strict: raise a ConversionError on a tag sequence that would need a repair.
    stats: filled in while reading (counts, detected fmt and scheme, repairs); pass one to
        see them, the generator owns a private one otherwise. Reused for several files, it
        adds up the counts and holds the last file's path, fmt and scheme.
    vocab: the vocabulary of the Docs (a new blank one when None).

    Raises ConversionError (file and 1-based line in the message) on malformed input or
    when the file holds no sentence; ValueError on an unknown fmt or scheme.
    """
    path = Path(path)
    fmt = _normalise_fmt(fmt)
    scheme = _normalise_scheme(scheme)
    stats = stats if stats is not None else ConversionStats()
    stats.path = str(path)
    stats.fmt = detect_format(path) if fmt == "auto" else fmt
    stats.scheme = detect_scheme(path, stats.fmt) if scheme == "auto" else scheme
    vocab = vocab if vocab is not None else Vocab()
    decoder = _SpanDecoder(path, stats.scheme, strict, stats.repairs)
    sentences = 0
    for item in _iter_sentences(path, stats.fmt):
        if isinstance(item, _DocStart):
            stats.documents += 1
        elif isinstance(item, _EndOfFile):
            stats.lines += item.lines
            if sentences == 0:
                raise ConversionError(
                    path, max(item.lines, 1), "no sentences found (empty file or only separators)"
                )
        else:
            doc = _make_doc(vocab, item.words, decoder.decode(item))
            stats.add_doc(doc)
            sentences += 1
            yield doc


def _blank_vocab(lang: str) -> Vocab:
    """The vocabulary of a blank spaCy pipeline for a language code.

    lang: a spaCy language code ("xx" for multi-language).
    """
    try:
        language = get_lang_class(lang)
    except (ImportError, KeyError) as err:
        raise ValueError(f"unknown spaCy language code {lang!r}") from err
    # The language's vocabulary alone: spacy.blank() would also build a pipeline (seconds).
    return create_vocab(lang, language.Defaults)


def _count_doc_bin(data: bytes, vocab: Vocab) -> CorpusCounts:
    """Read serialized DocBin bytes back and count what they hold.

    data: the DocBin bytes.
    vocab: the vocabulary to deserialize into.
    """
    counts = CorpusCounts()
    for doc in DocBin().from_bytes(data).get_docs(vocab):
        counts.add(doc)
    return counts


def _current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write bytes to a temp file beside `path`, then rename it over `path`.

    path: the destination; its folder is created if needed. A failure leaves any
        existing file at `path` untouched and no temp file behind.
    data: the content.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o666 & ~_current_umask())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def convert_file(
    input_path: PathLike,
    output_path: PathLike,
    fmt: str = "auto",
    scheme: str = "auto",
    strict: bool = False,
    lang: str = "xx",
) -> ConversionStats:
    """Convert a CoNLL-style file into a `.spacy` DocBin, written atomically.

    input_path: the CoNLL-style file (UTF-8).
    output_path: the `.spacy` file to write; its folder is created if needed. It is only
        replaced (by a rename) once the whole input converted, so an error never leaves
        a partial or broken file.
    fmt: "auto", "conll", "wikiann" or "multiconer".
    scheme: "auto", "iob1", "iob2" or "bioes".
    strict: raise a ConversionError on a tag sequence that would need a repair.
    lang: spaCy language code whose blank vocabulary the Docs use.

    Returns the ConversionStats, with `written` counted from the serialized DocBin read
    back. Raises ConversionError on malformed input, ValueError on a bad fmt, scheme or
    lang.
    """
    vocab = _blank_vocab(lang)
    stats = ConversionStats()
    doc_bin = DocBin(store_user_data=False)
    for doc in read_conll(input_path, fmt, scheme, strict, stats, vocab=vocab):
        doc_bin.add(doc)
    data = doc_bin.to_bytes()
    stats.written = _count_doc_bin(data, vocab)
    _atomic_write_bytes(Path(output_path), data)
    return stats


def _iob2_tag(token_iob: str, token_type: str) -> str:
    """A token's IOB2 tag; missing annotation ("") is written as O.

    token_iob: `token.ent_iob_` ("B", "I", "O" or "").
    token_type: `token.ent_type_`.
    """
    return f"{token_iob}-{token_type}" if token_iob in ("B", "I") else "O"


def _check_writable(token: str, doc_index: int, token_index: int) -> None:
    """Refuse a token that would not read back as itself.

    token: the token text.
    doc_index: index of its Doc (for the message).
    token_index: index of the token in the Doc (for the message).
    """
    if not token or token == DOCSTART or any(ch in token for ch in _BLANK_CHARS):
        raise ValueError(
            f"doc {doc_index}, token {token_index}: {token!r} cannot be written as a CoNLL "
            "token (empty, whitespace or -DOCSTART-)"
        )


def docs_to_conll(docs: Iterable[Doc]) -> str:
    """Write Docs as two-column IOB2 CoNLL: `token<TAB>tag`, a blank line between Docs.

    docs: the Docs (one sentence each); empty Docs are skipped.

    The text ends with a newline and has no trailing blank line, so
    `docs_to_conll(read_conll(p, scheme="iob2"))` reproduces such a file exactly.
    Raises ValueError for a token that could not be read back (empty, containing
    whitespace, or `-DOCSTART-`).
    """
    blocks = []
    for doc_index, doc in enumerate(docs):
        lines = []
        for token in doc:
            _check_writable(token.text, doc_index, token.i)
            lines.append(f"{token.text}\t{_iob2_tag(token.ent_iob_, token.ent_type_)}")
        if lines:
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n" if blocks else ""
