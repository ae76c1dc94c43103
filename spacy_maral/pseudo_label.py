"""Teacher pseudo-labelling of a target corpus (METHOD.md section 4).

The teacher (a trained pipeline with maral_ner) scores every span of every target
sentence; the non-overlapping decoded entity spans keep their full probability vectors
as soft labels (doc.spans["maral_pseudo"], attrs "probs" and "classes"); every other span
is O. Tags the target corpus happens to carry are moved to
doc.spans["maral_diagnostic_gold"] (for diagnostics only) and doc.ents is cleared.

Output: a directory of DocBin shards `shard-00000.spacy`, ... of `shard_size` sentences,
each written atomically. Memory stays constant in the corpus size, and a run that is
killed keeps its finished shards: started again, it skips them. `_manifest.json` records
what the shards are made from (input files, teacher, decision rule, tokenizer, shard
size, limit); a run with anything else refuses the folder instead of mixing its shards
with stale ones (the stage-2 reader reads every shard there).

A shard is labelled in batches of similar length (spacy_maral.batching: less padding)
and written in the corpus order. The work on a shard depends on that shard alone, and
every engine (this process, or Ray actors: spacy_maral.ray_engine) runs the same
`label_shard_bytes` on the same shard bytes, so their shards are bit-identical.
"""
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional

import numpy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, SpanGroup
from tqdm import tqdm

from .batching import length_sorted_batches
from .component import MaralNER, find_maral_ner
from .convert import read_conll
from .fileio import MANIFEST, atomic_open, atomic_write_text, check_manifest, remove_stale_temporaries
from .readers import bare_copy, docbin_paths, read_docs
from .soft_labels import DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, attach_soft_labels


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


SHARDS = "shard-*.spacy"
# inputs that would otherwise be read as plain text, line by line, without a complaint
NOT_PLAIN_TEXT = (".jsonl", ".json", ".parquet", ".gz", ".bz2", ".xz", ".zip")
LINE_BREAK = re.compile(r"\r\n|\r|\n")
CONLL_SUFFIXES = (".conll", ".conllu", ".iob", ".iob2", ".bio", ".bioes", ".tsv")


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


def _read_target_docs(path: Path, nlp: Language) -> Iterator[Doc]:
    check_target_path(path)
    if path.is_dir() or path.suffix.lower() == ".spacy":
        yield from read_docs(path, nlp)
        return
    if path.suffix.lower() in CONLL_SUFFIXES:
        yield from read_conll(path, vocab=nlp.vocab)
        return
    line_no = 0
    with path.open("rb") as f:  # bytes, so that a decoding error can name its line
        for raw in f:
            try:
                decoded = raw.decode("utf8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}, line {line_no + 1}: not valid UTF-8 ({err.reason} at byte {err.start})") from err
            lines = LINE_BREAK.split(decoded)  # \n, \r\n and a lone \r end a line, as in text mode
            if lines[-1] == "":
                lines.pop()
            for line in lines:
                line_no += 1
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
    for doc, kept in zip(runnable, ner.decode(predicted, scores)):
        rows = [r for *_, r in kept]
        attach_soft_labels(doc, [(s, e) for s, e, *_ in kept], probs[rows] if rows else numpy.zeros((0, len(ner.classes))), ner.classes)
    return docs


def label_shard(nlp: Language, ner: MaralNER, docs: List[Doc], batch_size: int) -> List[Doc]:
    """Label one shard's docs (in place) in length-sorted batches; return them in order.

    nlp (Language): the teacher.
    ner (MaralNER): its maral_ner component.
    docs (List[Doc]): the shard's target sentences, in corpus order.
    batch_size (int): sentences per teacher batch.
    """
    for batch in length_sorted_batches(docs, batch_size):
        label_batch(nlp, ner, batch)
    return docs


def shard_bytes(docs: Iterable[Doc]) -> bytes:
    """The DocBin bytes of a shard (user data and span groups kept)."""
    out = DocBin(store_user_data=True)
    for doc in docs:
        out.add(doc)
    return out.to_bytes()


def label_shard_bytes(nlp: Language, payload: bytes, batch_size: int = 32) -> Dict[str, Any]:
    """The pseudo_label task of a worker: label a shard given as DocBin bytes.

    nlp (Language): the teacher.
    payload (bytes): the shard's target sentences (shard_bytes of the unlabelled docs).
    batch_size (int): sentences per teacher batch.
    RETURNS (Dict[str, Any]): "shard" (the labelled shard's bytes, as written to disk),
        "sentences", "entities" (per label) and "diagnostic_gold" (counts).
    """
    docs = list(DocBin().from_bytes(payload).get_docs(nlp.vocab))
    label_shard(nlp, find_maral_ner(nlp), docs, batch_size)
    stats = PseudoLabelStats()
    for doc in docs:
        _count(doc, stats)
    return {"shard": shard_bytes(docs), "sentences": len(docs), "entities": dict(stats.entities), "diagnostic_gold": stats.diagnostic_gold}


def pseudo_label(
    nlp: Language,
    input_path: Path,
    output_dir: Path,
    batch_size: int = 32,
    shard_size: int = 1000,
    limit: int = 0,
    progress: bool = True,
    gold_tokens: bool = False,
    engine: Optional[Any] = None,
    overwrite: bool = False,
) -> PseudoLabelStats:
    """Label a target corpus with a teacher pipeline, shard by shard.

    nlp (Language): the teacher pipeline (transformer + maral_ner); it reads the corpus
        (its vocab and tokenizer) and, without `engine`, labels it.
    input_path (Path): target corpus: .spacy file or directory, or a text file.
    output_dir (Path): directory for the shards and summary.json.
    batch_size (int): sentences per teacher batch.
    shard_size (int): sentences per output shard.
    limit (int): stop after this many sentences (0 = all).
    progress (bool): show a tqdm progress bar.
    gold_tokens (bool): keep the tokens of a .spacy or CoNLL corpus (iter_target_docs).
    engine (Optional[Any]): an entered engine whose workers load the same teacher
        (spacy_maral.engines.make_engine, e.g. Ray actors); None: this process, with `nlp`.
    overwrite (bool): when output_dir holds the shards of another run (other input,
        teacher or settings: its _manifest.json), delete them (and its summary.json)
        instead of raising. The shards of this same run are kept either way.
    RETURNS (PseudoLabelStats): counts of what was read and written.
    """
    from .engines import InProcessEngine, WorkerSpec

    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1 (got {shard_size})")
    limit = max(limit, 0)
    ner = find_maral_ner(nlp)
    input_path, output_dir = Path(input_path), Path(output_dir)
    check_target_path(input_path)  # before any old shard may be replaced
    manifest = {
        "inputs": input_fingerprint(input_path),
        # the head's weights identify the teacher (trained with its encoder); the score
        # temperature, which `calibrate` changes, does not enter the soft labels
        "teacher_head_sha256": head_fingerprint(ner),
        "classes": list(ner.classes), "inference_tau": float(ner.inference_tau),
        "tokenizer": dict(nlp.config["nlp"]["tokenizer"]), "gold_tokens": gold_tokens,
        "shard_size": shard_size, "limit": limit,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    remedy = "use a new output directory, delete it, or pass --overwrite (overwrite=True) to replace them"
    try:
        check_manifest(output_dir, manifest, run="pseudo-label", outputs=SHARDS, remedy=remedy)
    except ValueError:
        if not overwrite:
            raise
        for old in [*output_dir.glob(SHARDS), output_dir / "summary.json", output_dir / MANIFEST]:
            if old.is_file():
                old.unlink()
        check_manifest(output_dir, manifest, run="pseudo-label", outputs=SHARDS)
    remove_stale_temporaries(output_dir, SHARDS)  # left by a run killed mid-write
    stats = PseudoLabelStats()
    docs: Iterable[Doc] = iter_target_docs(input_path, nlp, gold_tokens=gold_tokens)
    if limit > 0:
        docs = islice(docs, limit)
    bar = tqdm(desc="pseudo-labelling", unit="sent", disable=not progress)
    docs = iter(docs)

    def pending() -> Iterator[tuple]:
        shard_no = 0
        while True:
            chunk = list(islice(docs, shard_size))
            if not chunk:
                return
            path = output_dir / f"shard-{shard_no:05d}.spacy"
            kept = _complete_shard(path, len(chunk))
            if kept is not None:
                stats.shards_kept += 1
                stats.skipped_sentences += len(chunk)
                for doc in kept.get_docs(nlp.vocab):
                    _count(doc, stats)
                stats.sentences += len(chunk)
                bar.update(len(chunk))
            else:
                yield path, shard_bytes(chunk)
            shard_no += 1

    local = engine is None
    if local:
        engine = InProcessEngine(WorkerSpec(model=str(nlp.meta.get("name", "teacher"))), nlp=nlp).__enter__()
    try:
        for path, result in engine.map("pseudo_label", pending(), batch_size=batch_size):
            with atomic_open(path, "wb") as f:
                f.write(result["shard"])
            stats.shards_written += 1
            stats.sentences += result["sentences"]
            stats.entities.update(result["entities"])
            stats.diagnostic_gold += result["diagnostic_gold"]
            bar.update(result["sentences"])
    finally:
        if local:
            engine.__exit__(None, None, None)
        bar.close()
    if stats.sentences == 0:
        raise ValueError(f"the target corpus {input_path} has no sentences")
    atomic_write_text(output_dir / "summary.json", json.dumps({"classes": list(ner.classes), **stats.to_dict()}, indent=2))
    return stats


def input_fingerprint(path: Path) -> List[Dict[str, object]]:
    """Name, size and modification time of the input file, or of each .spacy file of an
    input directory (as `annotate` records its inputs): what a resumed run must find
    unchanged."""
    files = docbin_paths(path) if path.is_dir() else [path]
    return [{"name": f.name, "bytes": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns} for f in files]


def head_fingerprint(ner: MaralNER) -> str:
    """SHA-256 of the values of maral_ner's own torch parameters (by name, on the CPU:
    the same on every device), leaving out an encoder the component may own."""
    digest = hashlib.sha256()
    for node in ner.model.walk():
        for shim in node.shims:
            module = getattr(shim, "_model", None)
            if module is None or type(module).__module__.split(".")[0] in ("transformers", "spacy_transformers"):
                continue
            for name, tensor in sorted(module.state_dict().items()):
                digest.update(name.encode("utf8"))
                digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _complete_shard(path: Path, expected: int) -> Optional[DocBin]:
    """The finished shard at `path` (read once), or None when it is missing, damaged or
    not `expected` sentences long (then it is labelled again)."""
    if not path.exists():
        return None
    try:
        shard = DocBin().from_disk(path)
    except Exception:  # a damaged shard is relabelled
        return None
    return shard if len(shard) == expected else None


def _count(doc: Doc, stats: PseudoLabelStats) -> None:
    if PSEUDO_KEY in doc.spans:
        stats.entities.update(span.label_ for span in doc.spans[PSEUDO_KEY])
    if DIAGNOSTIC_GOLD_KEY in doc.spans:
        stats.diagnostic_gold += len(doc.spans[DIAGNOSTIC_GOLD_KEY])
