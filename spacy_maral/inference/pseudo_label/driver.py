"""`pseudo_label()`: a target corpus labelled by a teacher, shard by shard, on an engine.

In this process memory stays constant in the corpus size (the Ray engine's driver holds
the shards still to label), and a run that is killed keeps its finished shards: started
again, it skips them (shards). The folder's _manifest.json (manifest) records what the
shards are made from; every engine (this process, or Ray actors:
spacy_maral.inference.engines.ray) runs the same task (task.label_shard_bytes) on the
same shard bytes, so their shards are bit-identical.
"""
import json
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import ContextManager, Dict, Iterable, Optional, Sequence

from spacy.language import Language
from spacy.tokens import Doc
from tqdm import tqdm

from spacy_maral.corpora.target_text import check_target_path, iter_target_docs
from spacy_maral.fileio import atomic_write_text, check_output_dir
from spacy_maral.inference.engines.base import Done, Engine, WorkerSpec
from spacy_maral.inference.engines.local import InProcessEngine
from spacy_maral.inference.ensemble import check_ensemble
from spacy_maral.inference.lock import folder_lock
from spacy_maral.inference.pseudo_label.manifest import run_manifest
from spacy_maral.inference.pseudo_label.shards import SHARDS, SIDECARS, SUMMARY, Shard, cut_shards, finished_shard, write_shard
from spacy_maral.inference.pseudo_label.task import LabelledShard, ShardCounts, label_shard_bytes
from spacy_maral.inference.runner import manifest_digest, open_output, run_partitions
from spacy_maral.ml.decoding import check_inference_tau
from spacy_maral.pipeline.maral_ner import find_maral_ner


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

    def reuse(self, shard: Shard) -> bool:
        kept = finished_shard(shard, self.run_digest)
        if kept is None:
            return False
        self._count(ShardCounts.of(kept.get_docs(self.nlp.vocab)), kept=True)
        return True

    def payload(self, shard: Shard) -> bytes:
        return shard.payload

    def finish(self, shard: Shard, done: Done[LabelledShard]) -> None:
        labelled = done.result
        write_shard(shard, labelled.shard, self.run_digest)
        self._count(labelled.counts, kept=False)
        self.stats.shards_per_worker[done.worker.pid] += 1

    def _count(self, counts: ShardCounts, kept: bool) -> None:
        self.stats.add(counts, kept)
        self.bar.update(counts.sentences)


def check_output_apart(input_path: Path, output_dir: Path) -> None:
    """Refuse an output folder that can't be written (fileio.check_output_dir), or that is
    the input folder or holds a .spacy input: stage 2 and a rerun read every .spacy file
    of the folder (the input would mix with its own shards), and --overwrite would delete
    an input named like a shard as an earlier run's. A text input there is left alone.

    input_path (Path): the target corpus (a file or a folder of .spacy files).
    output_dir (Path): the folder of the shards.
    RAISES (ValueError): naming both.
    """
    check_output_dir(output_dir, "the output folder")
    source, out = Path(input_path).resolve(), Path(output_dir).resolve()
    if source == out or (source.parent == out and source.suffix == ".spacy"):
        where = "is the input folder" if source == out else f"holds the input {input_path}"
        raise ValueError(f"the output folder {output_dir} {where}: its shards would mix with the input (and "
                         "--overwrite would delete it); choose a folder apart from the input")


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
    check_output_apart(input_path, output_dir)
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
            run_partitions(running, label_shard_bytes, labelling, cut_shards(docs, output_dir, shard_size), batch_size=batch_size)
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
