"""The target-language text in the formats the commands take: plain text (one sentence
a line), a CoNLL-style file (its tags, if any, kept for diagnostics) or `.spacy`
(a file or a directory of shards), tokenized by a pipeline's tokenizer."""
import re
from itertools import islice
from pathlib import Path
from typing import Iterator, Optional, Tuple

from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.conll import read_conll
from spacy_maral.corpora.docbin import read_docs
from spacy_maral.corpora.lines import decoded_lines

# inputs that would otherwise be read as plain text, line by line, without a complaint
NOT_PLAIN_TEXT = (".jsonl", ".json", ".parquet", ".gz", ".bz2", ".xz", ".zip")
CONLL_SUFFIXES = (".conll", ".conllu", ".iob", ".iob2", ".bio", ".bioes", ".tsv")
SNIFF_LINES = 50  # the first non-empty lines of a plain text that may show it is CoNLL-style
TAG_COLUMN = re.compile(r"^(O|[BIESLU][-_]\S+)$")  # a tag as a CoNLL-style file's last column


def iter_target_docs(path: Path, nlp: Language, gold_tokens: bool = False) -> Iterator[Doc]:
    """Target sentences from a .spacy file/directory, a CoNLL-style file, or plain text.

    path (Path): a `.spacy` file or a directory of them; a file ending in one of
        CONLL_SUFFIXES (read with the converter: its tags, if any, stay on the Docs and
        are moved aside for diagnostics by the labeller); any other file is plain text,
        one sentence a line (empty lines skipped).
    nlp (Language): the teacher, whose vocab and tokenizer the Docs use.
    gold_tokens (bool): keep the tokens of a .spacy or CoNLL corpus; by default their
        raw text (doc.text) is tokenized with the teacher's tokenizer, as a user's text
        would be, and any tags are carried over by character offsets (a tag whose
        boundary falls inside a token is dropped: diagnostics only).
    """
    for doc in _read_target_docs(Path(path), nlp):
        yield doc if gold_tokens else retokenized(doc, nlp)


def check_target_path(path: Path) -> None:
    """Raise a clear ValueError for a target corpus that does not exist or has a format
    the readers would otherwise take for plain text (JSONL, Parquet, compressed)."""
    if not path.exists():
        raise ValueError(f"target corpus {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in NOT_PLAIN_TEXT:
        raise ValueError(
            f"{path}: the target text must be plain text (one sentence a line), a CoNLL-style "
            f"file or .spacy, not {suffix}: write its texts one a line to a .txt file first"
        )
    if path.is_file() and suffix != ".spacy" and suffix not in CONLL_SUFFIXES:
        found = conll_looking_line(path)
        if found is not None:
            raise ValueError(
                f"{path}, line {found[0]}: {found[1]!r} is a CoNLL-style token line, not a sentence: the file "
                f"would be read as plain text, one sentence a line, its tags lost. Give it one of the suffixes "
                f"{', '.join(CONLL_SUFFIXES)} to read it as CoNLL, or write its sentences one a line"
            )


def conll_looking_line(path: Path) -> Optional[Tuple[int, str]]:
    """The first line that shows a would-be plain text to be a CoNLL-style file: a
    -DOCSTART- line, or, where most of its first SNIFF_LINES non-empty lines end in a
    tag column (O, B-PER, I_LOC, ...) after a token, the first such line; else None.

    path (Path): a file read as plain text unless this finds one.
    """
    lines = [(n, line) for n, line in islice(decoded_lines(path), 4 * SNIFF_LINES) if line.strip()][:SNIFF_LINES]
    for number, line in lines:
        if line.startswith("-DOCSTART-"):
            return number, line
    tagged = [(n, line) for n, line in lines if len(line.split()) >= 2 and TAG_COLUMN.match(line.split()[-1])]
    return tagged[0] if len(lines) >= 2 and len(tagged) >= 0.8 * len(lines) else None


def _read_target_docs(path: Path, nlp: Language) -> Iterator[Doc]:
    check_target_path(path)
    if path.is_dir() or path.suffix.lower() == ".spacy":
        yield from read_docs(path, nlp)
        return
    if path.suffix.lower() in CONLL_SUFFIXES:
        yield from read_conll(path, vocab=nlp.vocab)
        return
    for _, line in decoded_lines(path):
        text = line.strip()
        if text:
            yield nlp.make_doc(text)


def retokenized(doc: Doc, nlp: Language) -> Doc:
    """`doc`'s text tokenized by nlp's tokenizer, with its entities moved by character
    offsets (those whose boundaries fall inside a new token are dropped).

    doc (Doc): a sentence, e.g. on a corpus's gold tokens.
    nlp (Language): the pipeline whose tokenizer to use.
    RETURNS (Doc): the new doc (`doc` itself when the tokens are already the same).
    """
    new = nlp.make_doc(doc.text)
    if [t.text for t in new] == [t.text for t in doc]:
        return doc
    if doc.ents:
        spans = [new.char_span(e.start_char, e.end_char, label=e.label_, alignment_mode="strict") for e in doc.ents]
        new.set_ents([s for s in spans if s is not None], default="outside")
    return new
