"""Reading `.spacy` (DocBin) corpora: a file or a folder of shards, streamed in order,
with errors that name the file; and bare copies of Docs (the same tokens, no annotation)."""
from pathlib import Path
from typing import Iterator, List, Union

from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab


def docbin_paths(path: Union[str, Path]) -> List[Path]:
    """A .spacy file, or the sorted .spacy files of a directory (pseudo-label shards)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".spacy")
        if not files:
            raise ValueError(f"{path} has no .spacy files")
        return files
    if not path.exists():
        raise ValueError(f"corpus file {path} does not exist")
    return [path]


def read_docbin(path: Path, nlp: Language) -> Iterator[Doc]:
    """Stream the docs of one .spacy file, in order; an error names the file when it is
    not a readable DocBin."""
    try:
        yield from DocBin().from_disk(path).get_docs(nlp.vocab)
    except (ValueError, OSError, KeyError, TypeError, IndexError) as err:
        raise ValueError(f"{path}: not a readable .spacy (DocBin) file ({type(err).__name__}: {err})") from err


def read_docs(path: Union[str, Path], nlp: Language) -> Iterator[Doc]:
    """Stream the docs of a .spacy file or directory, in order."""
    for file in docbin_paths(path):
        yield from read_docbin(file, nlp)


def bare_copy(doc: Doc, vocab: Vocab) -> Doc:
    """A new Doc with the same tokens (words and spaces) and no annotation."""
    return Doc(vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
