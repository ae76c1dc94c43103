"""The target-language text in the formats the commands take: plain text (one sentence
a line), a CoNLL-style file (its tags, if any, kept for diagnostics) or `.spacy`
(a file or a directory of shards), tokenized by a pipeline's tokenizer."""
from pathlib import Path
from typing import Iterator

from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.conll import read_conll
from spacy_maral.corpora.docbin import read_docs
from spacy_maral.corpora.lines import decoded_lines
from spacy_maral.corpora.target_path import CONLL_SUFFIXES, check_target_path


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
