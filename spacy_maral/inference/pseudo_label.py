"""Teacher pseudo-labelling of a target corpus (docs/method.md, section 5).

The teacher (a trained pipeline with maral_ner) scores every span of every target
sentence; the non-overlapping decoded entity spans keep their full probability vectors
as soft labels (doc.spans["maral_pseudo"], attrs "probs" and "classes"); every other span
is O. Tags the target corpus happens to carry are moved to
doc.spans["maral_diagnostic_gold"] (for diagnostics only) and doc.ents is cleared.

Output: a directory of DocBin shards `shard-00000.spacy`, ... of `shard_size` sentences,
each written atomically. In this process memory stays constant in the corpus size (the
Ray engine's driver holds the shards still to label), and a run that is killed keeps
its finished shards: started again, it skips them. `_manifest.json` records
what the shards are made from (input files, teacher, decision rule, tokenizer, shard
size, limit); a run with anything else refuses the folder instead of mixing its shards
with stale ones (the stage-2 reader reads every shard there).

A shard is labelled in batches of similar length (spacy_maral.inference.batching: less padding)
and written in the corpus order. The work on a shard depends on that shard alone, and
every engine (this process, or Ray actors: spacy_maral.inference.engines.ray) runs the same
`label_shard_bytes` on the same shard bytes, so their shards are bit-identical.
"""
import hashlib
import json
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import count, islice
from pathlib import Path
from typing import ContextManager, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, SpanGroup
from tqdm import tqdm

from spacy_maral.adaptation.soft_labels import AGREE_ATTR, DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, attach_soft_labels
from spacy_maral.corpora.docbin import docbin_paths
from spacy_maral.corpora.target_text import check_target_path, iter_target_docs
from spacy_maral.fileio import atomic_open, atomic_write_text
from spacy_maral.inference.batching import length_sorted_batches
from spacy_maral.inference.engines.base import Done, Engine, WorkerSpec
from spacy_maral.inference.engines.local import InProcessEngine
from spacy_maral.inference.ensemble import check_ensemble, mean_probabilities, teacher_probabilities, teachers_agree
from spacy_maral.inference.lock import folder_lock
from spacy_maral.inference.runner import Manifest, content_digest, manifest_digest, open_output, run_partitions
from spacy_maral.ml.decoding import check_inference_tau
from spacy_maral.ml.span_ner import get_span_head
from spacy_maral.pipeline.decoding import decode_docs
from spacy_maral.pipeline.loading import encoder_runtime_of
from spacy_maral.pipeline.maral_ner import MaralNER, find_maral_ner


@dataclass
class ShardCounts:
    """What one shard holds.

    sentences (int): its target sentences.
    entities (Dict[str, int]): its pseudo-labelled entity spans, per label.
    diagnostic_gold (int): the target tags kept aside for diagnostics.
    agreed (int): its sentences where an ensemble's teachers found the same entities.
    """

    sentences: int
    entities: Dict[str, int]
    diagnostic_gold: int
    agreed: int = 0

    @classmethod
    def of(cls, docs: Iterable[Doc]) -> "ShardCounts":
        """The counts of a shard's pseudo-labelled docs."""
        entities: Counter = Counter()
        sentences = diagnostic_gold = agreed = 0
        for doc in docs:
            sentences += 1
            if PSEUDO_KEY in doc.spans:
                entities.update(span.label_ for span in doc.spans[PSEUDO_KEY])
                agreed += doc.spans[PSEUDO_KEY].attrs.get(AGREE_ATTR) is True
            if DIAGNOSTIC_GOLD_KEY in doc.spans:
                diagnostic_gold += len(doc.spans[DIAGNOSTIC_GOLD_KEY])
        return cls(sentences, dict(entities), diagnostic_gold, agreed)


@dataclass
class LabelledShard:
    """The pseudo-label task's result (label_shard_bytes).

    shard (bytes): the labelled shard, as written to disk (DocBin bytes).
    counts (ShardCounts): what it holds.
    """

    shard: bytes
    counts: ShardCounts


@dataclass
class Shard:
    """A shard of the target corpus as the driver cuts it.

    path (Path): its file in the output folder.
    docs (List[Doc]): its unlabelled sentences, in corpus order.
    payload (bytes): their DocBin bytes (shard_bytes), what a worker labels.
    """

    path: Path
    docs: List[Doc]
    payload: bytes


@dataclass
class PseudoLabelStats:
    """What a pseudo-labelling run read and wrote."""

    sentences: int = 0
    skipped_sentences: int = 0
    shards_written: int = 0
    shards_kept: int = 0
    entities: Counter = field(default_factory=Counter)
    diagnostic_gold: int = 0
    agreed: int = 0
    shards_per_worker: Counter = field(default_factory=Counter)  # worker pid -> shards it labelled here

    def add(self, counts: ShardCounts, kept: bool) -> None:
        """Count a shard: kept from an earlier run, or written by this one."""
        if kept:
            self.shards_kept += 1
            self.skipped_sentences += counts.sentences
        else:
            self.shards_written += 1
        self.sentences += counts.sentences
        self.entities.update(counts.entities)
        self.diagnostic_gold += counts.diagnostic_gold
        self.agreed += counts.agreed

    def to_dict(self) -> Dict[str, object]:
        """What summary.json records: the same whichever engine and workers labelled the
        shards (shards_per_worker, process ids, stays out)."""
        return {
            "sentences": self.sentences, "skipped_sentences_from_finished_shards": self.skipped_sentences,
            "shards_written": self.shards_written, "shards_kept": self.shards_kept,
            "entities": dict(self.entities), "diagnostic_gold_entities": self.diagnostic_gold,
            "sentences_teachers_agree": self.agreed,
        }


SHARDS = "shard-*.spacy"
SIDECARS = "shard-*.spacy.json"  # beside each shard: what it was made from (shard_identity)
SUMMARY = "summary.json"


def label_batch(nlp: Language, ner: MaralNER, docs: List[Doc], ensemble: Sequence[Language] = ()) -> List[Doc]:
    """Attach soft labels to a batch of target docs (in place) and return them.

    nlp (Language): the teacher.
    ner (MaralNER): its maral_ner component.
    docs (List[Doc]): the target sentences.
    ensemble (Sequence[Language]): more teachers: the soft labels come from the mean of
        all teachers' span probabilities (spacy_maral.inference.ensemble), and each
        sentence records whether every teacher's own entities are the same
        (attrs "teachers_agree" of its soft labels).
    """
    for doc in docs:
        if doc.ents:
            doc.spans[DIAGNOSTIC_GOLD_KEY] = SpanGroup(doc, name=DIAGNOSTIC_GOLD_KEY, spans=list(doc.ents))
        doc.ents = []
    runnable = [doc for doc in docs if len(doc)]
    if not runnable:
        return docs
    teachers = [(nlp, ner)] + [(member, find_maral_ner(member)) for member in ensemble]
    predicted, spans, each = teacher_probabilities(teachers, runnable)
    probs = mean_probabilities(each)
    agree: List[Optional[bool]] = list(teachers_agree(predicted, spans, each)) if ensemble else [None] * len(runnable)
    for doc, kept, agreed in zip(runnable, decode_docs(predicted, spans, probs), agree):
        rows = [entity.row for entity in kept]
        kept_spans = [(entity.start, entity.end) for entity in kept]
        attach_soft_labels(doc, kept_spans, probs[rows] if rows else numpy.zeros((0, len(ner.classes))), ner.classes,
                           teachers_agree=agreed)
    return docs


def label_shard(nlp: Language, ner: MaralNER, docs: List[Doc], batch_size: int, ensemble: Sequence[Language] = ()) -> List[Doc]:
    """Label one shard's docs (in place) in length-sorted batches; return them in order.

    nlp (Language): the teacher.
    ner (MaralNER): its maral_ner component.
    docs (List[Doc]): the shard's target sentences, in corpus order.
    batch_size (int): sentences per teacher batch.
    ensemble (Sequence[Language]): more teachers to average with (label_batch).
    """
    for batch in length_sorted_batches(docs, batch_size):
        label_batch(nlp, ner, batch, ensemble)
    return docs


def shard_bytes(docs: Iterable[Doc]) -> bytes:
    """The DocBin bytes of a shard (user data and span groups kept)."""
    out = DocBin(store_user_data=True)
    for doc in docs:
        out.add(doc)
    return out.to_bytes()


def label_shard_bytes(nlp: Language, payload: bytes, batch_size: int = 32, ensemble: Sequence[Language] = ()) -> LabelledShard:
    """The pseudo_label task of a worker: label a shard given as DocBin bytes.

    nlp (Language): the teacher.
    payload (bytes): the shard's target sentences (shard_bytes of the unlabelled docs).
    batch_size (int): sentences per teacher batch.
    ensemble (Sequence[Language]): more teachers to average with (the worker's
        WorkerSpec.ensemble, loaded once).
    RETURNS (LabelledShard): the labelled shard's bytes, as written to disk, and its counts.
    """
    docs = list(DocBin().from_bytes(payload).get_docs(nlp.vocab))
    label_shard(nlp, find_maral_ner(nlp), docs, batch_size, ensemble)
    return LabelledShard(shard_bytes(docs), ShardCounts.of(docs))


class ShardLabelling:
    """pseudo_label's run in an output folder it holds, its part in run_partitions
    (runner.PartitionRun): the corpus cut into shards, the shards an earlier run of the
    same input and settings finished kept, the others written here as the workers label
    them, and everything counted.

    nlp (Language): the teacher (its vocab reads a kept shard).
    run_digest (str): the digest of the run's manifest (recorded beside every shard).
    bar (tqdm): the progress bar, in sentences.
    """

    def __init__(self, nlp: Language, run_digest: str, bar: tqdm) -> None:
        self.nlp = nlp
        self.run_digest = run_digest
        self.bar = bar
        self.stats = PseudoLabelStats()

    @staticmethod
    def shards(docs: Iterable[Doc], output_dir: Path, shard_size: int) -> Iterator[Shard]:
        """The corpus's shards of `shard_size` sentences, in order, read lazily."""
        iterator = iter(docs)
        for shard_no in count():
            chunk = list(islice(iterator, shard_size))
            if not chunk:
                return
            yield Shard(output_dir / f"shard-{shard_no:05d}.spacy", chunk, shard_bytes(chunk))

    def reuse(self, shard: Shard) -> bool:
        kept = _complete_shard(shard.path, len(shard.docs), shard_identity(self.run_digest, shard.payload))
        if kept is None:
            return False
        self._count(ShardCounts.of(kept.get_docs(self.nlp.vocab)), kept=True)
        return True

    def payload(self, shard: Shard) -> bytes:
        return shard.payload

    def finish(self, shard: Shard, done: Done[LabelledShard]) -> None:
        labelled = done.result
        with atomic_open(shard.path, "wb") as f:
            f.write(labelled.shard)
        identity = {**shard_identity(self.run_digest, shard.payload), "shard_sha256": hashlib.sha256(labelled.shard).hexdigest()}
        atomic_write_text(sidecar_path(shard.path), json.dumps(identity, indent=2))  # after the shard: see _complete_shard
        self._count(labelled.counts, kept=False)
        self.stats.shards_per_worker[done.worker.pid] += 1

    def _count(self, counts: ShardCounts, kept: bool) -> None:
        self.stats.add(counts, kept)
        self.bar.update(counts.sentences)


def pseudo_label(
    nlp: Language,
    input_path: Path,
    output_dir: Path,
    batch_size: int = 32,
    shard_size: int = 1000,
    limit: int = 0,
    progress: bool = True,
    gold_tokens: bool = False,
    engine: Optional[Engine] = None,
    overwrite: bool = False,
    ensemble: Sequence[Language] = (),
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
    engine (Optional[Engine]): an entered engine whose workers load the same teacher
        (spacy_maral.inference.engines.make_engine, e.g. Ray actors); None: this process, with `nlp`.
    overwrite (bool): when output_dir holds the shards of another run (other input,
        teacher or settings: its _manifest.json), delete them (and its summary.json)
        instead of raising. The shards of this same run are kept either way.
    ensemble (Sequence[Language]): more teachers: the soft labels come from the mean of
        the span probabilities of `nlp` and these (spacy_maral.inference.ensemble); an
        `engine` must load the same ones (WorkerSpec.ensemble).
    RETURNS (PseudoLabelStats): counts of what was read and written.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1 (got {shard_size})")
    limit = max(limit, 0)
    ner = find_maral_ner(nlp)
    check_inference_tau(ner.inference_tau)
    check_ensemble(nlp, ensemble)
    for member in ensemble:
        check_inference_tau(find_maral_ner(member).inference_tau)
    if engine is not None and len(engine.spec.ensemble) != len(ensemble):
        raise ValueError(f"the engine's workers load {len(engine.spec.ensemble)} ensemble teachers, not the {len(ensemble)} given")
    input_path, output_dir = Path(input_path), Path(output_dir)
    check_target_path(input_path)  # before any old shard may be replaced
    manifest = run_manifest(nlp, input_path, ensemble, gold_tokens=gold_tokens, shard_size=shard_size, limit=limit)
    remedy = "use a new output directory, delete it, or pass --overwrite (overwrite=True) to replace them"
    with folder_lock(output_dir, run="pseudo-label"):  # one run at a time in a folder
        open_output(output_dir, manifest, run="pseudo-label", outputs=SHARDS, overwrite=overwrite,
                    also_remove=[SUMMARY, SIDECARS], remedy=remedy,
                    check_input=lambda: check_target_corpus(input_path, nlp, gold_tokens, limit))
        docs: Iterable[Doc] = iter_target_docs(input_path, nlp, gold_tokens=gold_tokens)
        if limit > 0:
            docs = islice(docs, limit)
        workers: ContextManager[Engine] = nullcontext(engine) if engine is not None else in_process_engine(nlp, ensemble)
        with workers as running, tqdm(desc="pseudo-labelling", unit="sent", disable=not progress) as bar:
            labelling = ShardLabelling(nlp, manifest_digest(manifest), bar)
            run_partitions(running, label_shard_bytes, labelling, labelling.shards(docs, output_dir, shard_size), batch_size=batch_size)
        stats = labelling.stats
        if stats.sentences == 0:
            raise ValueError(f"the target corpus {input_path} has no sentences")
        atomic_write_text(output_dir / SUMMARY, json.dumps({"classes": list(ner.classes), **stats.to_dict()}, indent=2))
        return stats


def in_process_engine(nlp: Language, ensemble: Sequence[Language] = ()) -> InProcessEngine:
    """The engine of a run without one: the teacher (and its ensemble) already loaded in
    this process, named in the spec by their meta names."""
    names = tuple(str(member.meta.get("name", "teacher")) for member in ensemble)
    spec = WorkerSpec(model=str(nlp.meta.get("name", "teacher")), ensemble=names)
    return InProcessEngine(spec, nlp=nlp, ensemble=list(ensemble))


def run_manifest(
    nlp: Language, input_path: Path, ensemble: Sequence[Language], *, gold_tokens: bool, shard_size: int, limit: int
) -> Manifest:
    """What a run's shards are made from (its _manifest.json): the input files, the
    teacher (and the ensemble's teachers), the decision rule, the tokenizer, the shard
    size, the limit and the encoder's precision."""
    ner = find_maral_ner(nlp)
    manifest: Manifest = {
        "inputs": input_fingerprint(input_path),
        # the head's weights identify the teacher (trained with its encoder); the score
        # temperature, which `calibrate` changes, does not enter the soft labels
        "teacher_head_sha256": head_fingerprint(ner),
        "classes": list(ner.classes), "inference_tau": float(ner.inference_tau),
        "tokenizer": dict(nlp.config["nlp"]["tokenizer"]), "gold_tokens": gold_tokens,
        "shard_size": shard_size, "limit": limit,
        # bfloat16 and fp32 soft labels differ slightly: shards of one run share one precision
        "encoder_precision": (encoder_runtime_of(nlp) or {}).get("running", "fp32"),
    }
    if ensemble:  # (absent for one teacher: the manifests of single-teacher runs stay as they were)
        manifest["ensemble_head_sha256"] = [head_fingerprint(find_maral_ner(member)) for member in ensemble]
        manifest["ensemble_inference_tau"] = [float(find_maral_ner(member).inference_tau) for member in ensemble]
    return manifest


def input_fingerprint(path: Path) -> List[Dict[str, object]]:
    """Name, size and modification time of the input file, or of each .spacy file of an
    input directory (as `annotate` records its inputs): what a resumed run must find
    unchanged."""
    files = docbin_paths(path) if path.is_dir() else [path]
    return [{"name": f.name, "bytes": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns} for f in files]


def head_fingerprint(ner: MaralNER) -> str:
    """SHA-256 of the state of maral_ner's span head (its parameters and class
    statistics, by name, on the CPU: the same on every device)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(get_span_head(ner.model).state_dict().items()):
        digest.update(name.encode("utf8"))
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_target_corpus(path: Path, nlp: Language, gold_tokens: bool = False, limit: int = 0) -> int:
    """Read a target corpus completely (up to `limit` sentences): what `--overwrite`
    does before it removes another run's shards.

    path (Path): the target corpus (iter_target_docs).
    nlp (Language): the teacher (its vocab and tokenizer).
    gold_tokens (bool): keep the corpus's tokens (iter_target_docs).
    limit (int): read only this many sentences (0 = all).
    RETURNS (int): its number of sentences.
    RAISES (ValueError): it is unreadable, undecodable or has no sentences.
    """
    n = 0
    for _ in iter_target_docs(path, nlp, gold_tokens=gold_tokens):
        n += 1
        if limit and n >= limit:
            break
    if n == 0:
        raise ValueError(f"the target corpus {path} has no sentences (nothing was removed)")
    return n


def sidecar_path(shard: Path) -> Path:
    """Where a shard's identity is kept: SHARD.json (shard-00000.spacy.json)."""
    return shard.with_name(shard.name + ".json")


def shard_identity(run_digest: str, payload: bytes) -> Dict[str, str]:
    """What a shard is made from: the run's manifest digest and the digest of its
    unlabelled sentences (their DocBin bytes)."""
    return {"manifest_sha256": run_digest, "input_sha256": content_digest([payload])}


def _complete_shard(path: Path, expected: int, identity: Dict[str, str]) -> Optional[DocBin]:
    """The finished shard at `path` (read once), or None when it is missing, damaged, not
    `expected` sentences long, or not made from this input with these settings (its
    sidecar, written after it, must hold `identity` and the digest of the shard's bytes):
    then it is labelled again."""
    if not path.exists():
        return None
    try:
        recorded = json.loads(sidecar_path(path).read_text(encoding="utf8"))
        data = path.read_bytes()
    except (OSError, ValueError):  # no sidecar (killed before it, or an older run): relabelled
        return None
    if not isinstance(recorded, dict) or any(recorded.get(k) != v for k, v in identity.items()):
        return None
    if recorded.get("shard_sha256") != hashlib.sha256(data).hexdigest():
        return None
    try:
        shard = DocBin().from_bytes(data)
    except Exception:  # a damaged shard is relabelled
        return None
    return shard if len(shard) == expected else None
