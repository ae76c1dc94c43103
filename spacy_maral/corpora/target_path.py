"""What a target corpus path may be, checked before anything heavy is imported: the
formats the readers take by suffix, and a refusal of a path they would misread (missing,
JSONL, Parquet or compressed, or a CoNLL-style file under a plain-text name). Imports
neither spaCy nor torch, so that commands refuse such a path at once."""
import re
from itertools import islice
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from spacy_maral.corpora.lines import decoded_lines

# inputs that would otherwise be read as plain text, line by line, without a complaint
NOT_PLAIN_TEXT = (".jsonl", ".json", ".parquet", ".gz", ".bz2", ".xz", ".zip")
CONLL_SUFFIXES = (".conll", ".conllu", ".iob", ".iob2", ".bio", ".bioes", ".tsv")
SNIFF_LINES = 50  # the first non-empty lines of a plain text that may show it is CoNLL-style
TAG_COLUMN = re.compile(r"^(O|[BIESLU][-_]\S+)$")  # a tag as a CoNLL-style file's last column


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


def tabular_line(path: Path) -> Optional[Tuple[int, str]]:
    """The first line of a file whose first SNIFF_LINES non-empty lines are mostly (80%)
    columns of one count, 2 to 5, as a token-a-line file's are whatever its tags (IO
    tags, lowercase ones), and sentences a line rarely are; None for any other file, an
    empty one included.

    path (Path): the file.
    """
    lines = [(n, line) for n, line in islice(decoded_lines(path), 4 * SNIFF_LINES) if line.strip()][:SNIFF_LINES]
    counts = [len(line.split()) for _, line in lines]
    common = max(set(counts), key=counts.count) if counts else 0
    if len(lines) >= 2 and 2 <= common <= 5 and counts.count(common) >= 0.8 * len(lines):
        return next((n, line) for (n, line), count in zip(lines, counts) if count == common)
    return None


def check_gold_path(path: Path) -> None:
    """Raise a clear ValueError for a gold corpus (a dev or test set, read for its entity
    tags) that check_target_path refuses, or that is plain text, whose sentences carry
    no tags (scored against it, every prediction would be wrong: a stored score map
    fitted to that, a guard that sees no source dev F1 to lose).

    path (Path): a `.spacy` file or folder of them, or a CoNLL-style file.
    """
    check_target_path(path)
    suffix = path.suffix.lower()
    if path.is_file() and suffix != ".spacy" and suffix not in CONLL_SUFFIXES:
        raise ValueError(
            f"{path} is read as plain text, one sentence a line, without entity tags: a gold corpus is "
            f".spacy or a CoNLL-style file ({', '.join(CONLL_SUFFIXES)})"
        )


def check_gold_entities(docs: Sequence[Any], path: Path) -> None:
    """Raise ValueError where the sentences of a gold corpus hold no entity at all (a
    corpus whose tags were lost, or all O), before anything is scored or fitted on it.

    docs (Sequence[Doc]): the corpus's sentences, their gold entities in doc.ents.
    path (Path): the corpus, for the message.
    """
    if docs and not any(doc.ents for doc in docs):
        raise ValueError(f"{path}: none of its {len(docs)} sentences has a gold entity (are its tags lost, or all O?): "
                         "a gold corpus with entity tags is needed here")
