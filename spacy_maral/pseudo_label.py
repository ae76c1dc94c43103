"""Teacher pseudo-labelling of a target corpus (METHOD.md section 4).

The teacher (a trained pipeline with maral_ner) scores every span of every target
sentence; the non-overlapping decoded entity spans keep their full probability vectors
as soft labels (doc.spans["maral_pseudo"], attrs "probs" and "classes"); every other span
is O. Tags the target corpus happens to carry are moved to
doc.spans["maral_diagnostic_gold"] (for diagnostics only) and doc.ents is cleared.

Output: a directory of DocBin shards `shard-00000.spacy`, ... of `shard_size` sentences,
each written atomically. Memory stays constant in the corpus size, and a run that is
killed keeps its finished shards: started again, it skips them.
"""
import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Dict, Iterable, Iterator, List

import numpy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, SpanGroup
from tqdm import tqdm

from .component import MaralNER, find_maral_ner, mask_space_spans
from .convert import read_conll
from .decoding import decode_doc
from .fileio import atomic_open, atomic_write_text
from .readers import bare_copy, docbin_paths
from .soft_labels import DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, attach_soft_labels
from .spans import doc_span_slices


@dataclass
class PseudoLabelStats:
    """What a pseudo-labelling run read and wrote."""

    sentences: int = 0
    skipped_sentences: int = 0
    shards_written: int = 0
    shards_kept: int = 0
    entities: Counter = field(default_factory=Counter)
    diagnostic_gold: int = 0

    def to_dict(self) -> Dict[str, object]:
        return {
            "sentences": self.sentences, "skipped_sentences_from_finished_shards": self.skipped_sentences,
            "shards_written": self.shards_written, "shards_kept": self.shards_kept,
            "entities": dict(self.entities), "diagnostic_gold_entities": self.diagnostic_gold,
        }


CONLL_SUFFIXES = (".conll", ".conllu", ".iob", ".iob2", ".bio", ".bioes", ".tsv")


def iter_target_docs(path: Path, nlp: Language) -> Iterator[Doc]:
    """Target sentences from a .spacy file/directory, a CoNLL-style file, or plain text.

    path (Path): a `.spacy` file or a directory of them; a file ending in one of
        CONLL_SUFFIXES (read with the converter: its tags, if any, stay on the Docs and
        are moved aside for diagnostics by the labeller); any other file is plain text,
        one sentence a line, tokenized with the teacher's tokenizer (empty lines skipped).
    nlp (Language): the teacher, whose vocab and tokenizer the Docs use.
    """
    path = Path(path)
    if path.is_dir() or path.suffix == ".spacy":
        for file in docbin_paths(path):
            yield from DocBin().from_disk(file).get_docs(nlp.vocab)
        return
    if path.suffix.lower() in CONLL_SUFFIXES:
        yield from read_conll(path, vocab=nlp.vocab)
        return
    if not path.exists():
        raise ValueError(f"target corpus {path} does not exist")
    with path.open(encoding="utf8") as f:
        for line_no, line in enumerate(f, start=1):
            try:
                text = line.strip()
            except UnicodeDecodeError as err:  # pragma: no cover - decoding happens in iteration
                raise ValueError(f"{path}, line {line_no}: not UTF-8 ({err})") from err
            if text:
                yield nlp.make_doc(text)


def label_batch(nlp: Language, ner: MaralNER, docs: List[Doc]) -> List[Doc]:
    """Attach soft labels to a batch of target docs (in place) and return them."""
    for doc in docs:
        if doc.ents:
            doc.spans[DIAGNOSTIC_GOLD_KEY] = SpanGroup(doc, name=DIAGNOSTIC_GOLD_KEY, spans=list(doc.ents))
        doc.ents = []
    runnable = [doc for doc in docs if len(doc)]
    predicted = list(nlp.pipe([bare_copy(d, nlp.vocab) for d in runnable], disable=[ner.name]))
    if not predicted:
        return docs
    scores = ner.predict(predicted)
    probs = ner.probabilities(scores)
    for doc, sl in zip(runnable, doc_span_slices(len(predicted), scores.spans)):
        spans = scores.spans[sl]
        kept = decode_doc(spans[:, 1], spans[:, 2], mask_space_spans(doc, spans, probs[sl]), len(doc))
        rows = [sl.start + int(numpy.flatnonzero((spans[:, 1] == s) & (spans[:, 2] == e))[0]) for s, e, _, _ in kept]
        attach_soft_labels(doc, [(s, e) for s, e, _, _ in kept], probs[rows] if rows else numpy.zeros((0, len(ner.classes))), ner.classes)
    return docs


def pseudo_label(
    nlp: Language,
    input_path: Path,
    output_dir: Path,
    batch_size: int = 32,
    shard_size: int = 1000,
    limit: int = 0,
    progress: bool = True,
) -> PseudoLabelStats:
    """Label a target corpus with a teacher pipeline, shard by shard.

    nlp (Language): the teacher pipeline (transformer + maral_ner).
    input_path (Path): target corpus: .spacy file or directory, or a text file.
    output_dir (Path): directory for the shards and summary.json.
    batch_size (int): sentences per teacher batch.
    shard_size (int): sentences per output shard.
    limit (int): stop after this many sentences (0 = all).
    progress (bool): show a tqdm progress bar.
    RETURNS (PseudoLabelStats): counts of what was read and written.
    """
    ner = find_maral_ner(nlp)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    stats = PseudoLabelStats()
    docs: Iterable[Doc] = iter_target_docs(input_path, nlp)
    if limit > 0:
        docs = islice(docs, limit)
    bar = tqdm(desc="pseudo-labelling", unit="sent", disable=not progress)
    shard_no = 0
    docs = iter(docs)
    while True:
        chunk = list(islice(docs, shard_size))
        if not chunk:
            break
        path = output_dir / f"shard-{shard_no:05d}.spacy"
        if _complete_shard(path, len(chunk)):
            stats.shards_kept += 1
            stats.skipped_sentences += len(chunk)
            for doc in DocBin().from_disk(path).get_docs(nlp.vocab):
                _count(doc, stats)
        else:
            out = DocBin(store_user_data=True)
            for start in range(0, len(chunk), batch_size):
                for doc in label_batch(nlp, ner, chunk[start : start + batch_size]):
                    out.add(doc)
                    _count(doc, stats)
            with atomic_open(path, "wb") as f:
                f.write(out.to_bytes())
            stats.shards_written += 1
        stats.sentences += len(chunk)
        bar.update(len(chunk))
        shard_no += 1
    bar.close()
    if stats.sentences == 0:
        raise ValueError(f"the target corpus {input_path} has no sentences")
    atomic_write_text(output_dir / "summary.json", json.dumps({"classes": list(ner.classes), **stats.to_dict()}, indent=2))
    return stats


def _complete_shard(path: Path, expected: int) -> bool:
    if not path.exists():
        return False
    try:
        return len(DocBin().from_disk(path)) == expected
    except Exception:  # a damaged shard is relabelled
        return False


def _count(doc: Doc, stats: PseudoLabelStats) -> None:
    if PSEUDO_KEY in doc.spans:
        stats.entities.update(span.label_ for span in doc.spans[PSEUDO_KEY])
    if DIAGNOSTIC_GOLD_KEY in doc.spans:
        stats.diagnostic_gold += len(doc.spans[DIAGNOSTIC_GOLD_KEY])
