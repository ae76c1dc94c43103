"""Writing corpora: CoNLL-style files to `.spacy` DocBins (convert_file, atomically, with
the written corpus read back and counted), and Docs back to CoNLL lines."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from spacy.tokens import Doc, DocBin
from spacy.util import get_lang_class
from spacy.vocab import Vocab, create_vocab

from spacy_maral.corpora.conll import _BLANK_CHARS, DOCSTART, PathLike, read_conll
from spacy_maral.corpora.report import ConversionStats, CorpusCounts
from spacy_maral.fileio import atomic_write_bytes, check_output_file

# what a CoNLL corpus holds per token (the spaces are always stored): spaCy's default 13
# attributes, all zero here, made a DocBin and its serialization 4x larger in memory
CORPUS_ATTRS = ("ORTH", "ENT_IOB", "ENT_TYPE")


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
    check_output_file(Path(output_path))
    vocab = _blank_vocab(lang)
    stats = ConversionStats()
    doc_bin = DocBin(attrs=CORPUS_ATTRS, store_user_data=False)
    for doc in read_conll(input_path, fmt, scheme, strict, stats, vocab=vocab):
        doc_bin.add(doc)
    data = doc_bin.to_bytes()
    stats.written = _count_doc_bin(data, vocab)
    atomic_write_bytes(Path(output_path), data)
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
