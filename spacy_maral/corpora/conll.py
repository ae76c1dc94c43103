"""Convert CoNLL-style NER token files into spaCy Docs and `.spacy` DocBins.

One Doc per sentence, built on the file's own (gold) tokens: `Doc(vocab, words=...,
spaces=...)` with the spacing of ordinary prose (spacy_maral.corpora.detokenize: no space before
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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple, Union

from spacy.tokens import Doc, Span
from spacy.vocab import Vocab

from spacy_maral.corpora.detokenize import detokenized_spaces
from spacy_maral.corpora.lines import decoded_lines
from spacy_maral.corpora.report import ConversionError, ConversionStats, CorpusCounts, PathLike
from spacy_maral.corpora.tags import SCHEMES, TaggedSentence, _normalise_scheme, _SchemeEvidence, _SpanDecoder

__all__ = [
    "FORMATS",
    "SCHEMES",
    "ConversionError",
    "ConversionStats",
    "CorpusCounts",
    "detect_format",
    "detect_scheme",
    "read_conll",
]


FORMATS: Tuple[str, ...] = ("auto", "conll", "wikiann", "multiconer")

DOCSTART = "-DOCSTART-"
_BLANK_CHARS = " \t\r\n\f\v"
_FIELD_SEP = re.compile(r"[ \t]+")  # only ASCII blanks: a token may hold e.g. U+00A0
_LANG_PREFIX = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*:(.+)$")
_MULTICONER_COMMENT = re.compile(r"^#\s*id(?:\s|$)")
_SNIFF_LINES = 50  # non-empty lines read to guess the format
_SNIFF_ENTITY_STARTS = 2000  # entity starts read to guess the tag scheme


# ----------------------------------------------------------------------------- reading


@dataclass
class _DocStart:
    """A `-DOCSTART-` line (document separator)."""

    line: int


@dataclass
class _EndOfFile:
    """The end of the input, after `lines` lines."""

    lines: int


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


def _iter_sentences(path: Path, fmt: str) -> Iterator[Union[TaggedSentence, _DocStart, _EndOfFile]]:
    """Yield the sentences and `-DOCSTART-` separators of a file in order, then its end.

    path: the input file.
    fmt: "conll", "wikiann" or "multiconer" (not "auto").
    """
    sentence = TaggedSentence()
    expected: Optional[Tuple[int, int]] = None
    number = 0
    for number, text in decoded_lines(path):
        fields = _split_fields(text)
        is_comment = fmt == "multiconer" and _MULTICONER_COMMENT.match(text) is not None
        word = fields[0] if fields else ""
        if fields and not is_comment and fmt == "wikiann" and word != DOCSTART:
            word = _strip_lang_prefix(path, number, word)
        is_docstart = word == DOCSTART
        if not fields or is_comment or is_docstart:
            if sentence.words:
                yield sentence
                sentence = TaggedSentence()
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
        for _, text in decoded_lines(path):
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
        if isinstance(item, TaggedSentence):
            evidence.add(item.tags)
            if evidence.bioes_tags or evidence.starts >= _SNIFF_ENTITY_STARTS:
                break
    return evidence.scheme()


# ----------------------------------------------------------------------------- tags


def _make_doc(vocab: Vocab, words: List[str], spans: List[Tuple[int, int, str]]) -> Doc:
    """A sentence Doc on gold tokens with its entities; other tokens are outside ("O").

    The spaces between tokens are those of ordinary prose (spacy_maral.corpora.detokenize), so
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
            stats.add(doc)
            sentences += 1
            yield doc

