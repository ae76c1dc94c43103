"""Memory and time of the stage-2 adaptation state at full corpus scale (issue 5).

A real stage-2 run on the full German CoNLL target corpus takes 1,519 steps (about
80 minutes on one CPU thread) before its first epoch end. This script exercises
everything that grows with the target corpus without the encoder: it builds the soft-label
store of a real pseudo-labelled corpus, plays one whole epoch of `Adapter.after_step`
calls with random unit span vectors and logits (the shapes of real batches: 8 target
sentences, and 8 source sentences whose span count and labels are drawn from the source
corpus), runs the epoch end (target prior, margins, neighbour index, the k-NN counts of
every collected target span, GMM anchor selection, diagnostics), plays `--steps2` steps
of epoch 2 with refinement on, and saves the state once (as a checkpoint does). It
reports the process's peak RSS and the time of each part as JSON.

    python scripts/adaptation_memory.py runs/pseudo-de-full corpus/en-train.spacy runs/adaptation-memory-de.json
"""
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy
import spacy
import typer
from tqdm import tqdm

from spacy_maral.readers import read_docs
from spacy_maral.soft_labels import SoftLabelStore
from spacy_maral.spans import count_spans
from spacy_maral.student import Adapter, AdaptationSettings

CLASSES = ["O", "PER", "ORG", "LOC", "MISC"]


def rss_mb() -> float:
    """Current resident memory (MB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    """Peak resident memory of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def unit_vectors(rng: numpy.random.Generator, n: int, d: int = 64) -> numpy.ndarray:
    v = rng.standard_normal((n, d)).astype(numpy.float32)
    return v / numpy.linalg.norm(v, axis=1, keepdims=True)


def main(
    target: Path = typer.Argument(..., help="pseudo-labelled target corpus (.spacy file or shard directory)"),
    source: Path = typer.Argument(..., help="source training corpus (.spacy), for span counts and label rates"),
    output: Path = typer.Argument(..., help="JSON file to write"),
    max_width: int = typer.Option(4, help="max span width"),
    per_batch: int = typer.Option(8, help="target (and source) sentences per step"),
    steps2: int = typer.Option(50, help="steps of epoch 2 (refinement and k-NN on)"),
    seed: int = typer.Option(0, help="random seed"),
) -> None:
    rng = numpy.random.default_rng(seed)
    nlp = spacy.blank("xx")
    report = {"rss_start_mb": rss_mb()}
    t = time.time()
    store = SoftLabelStore.from_docs(tqdm(read_docs(target, nlp), desc="target docs", unit="doc"), CLASSES, max_width)
    report.update(
        target_sentences=store.n_docs, target_spans=int(store.q.shape[0]),
        store_mb=round((store.q.nbytes + store.scores.nbytes + store.anchor.nbytes + store.offsets.nbytes) / 2**20, 1),
        load_s=round(time.time() - t, 1), rss_after_store_mb=rss_mb(),
    )
    src_counts = numpy.asarray([count_spans(len(d), max_width) for d in read_docs(source, nlp)])
    src_entity_rate = 0.032  # CoNLL-en: 96.8% of the enumerated spans are O (METHOD.md section 3)
    settings = AdaptationSettings(n_epochs=20, anchor_start=2, knn_k=200, seed=seed)
    adapter = Adapter(settings)
    adapter.set_store(store)
    order = rng.permutation(store.n_docs)
    batches = [order[i : i + per_batch] for i in range(0, len(order), per_batch)]

    def step(docs: numpy.ndarray) -> None:
        rows, q, _ = adapter.target_batch(docs)
        n_src = int(src_counts[rng.integers(0, len(src_counts), per_batch)].sum())
        src_labels = numpy.where(rng.random(n_src) < src_entity_rate, rng.integers(1, len(CLASSES), n_src), 0)
        logits = rng.standard_normal((rows.shape[0], len(CLASSES))).astype(numpy.float32) * 5
        adapter.after_step(rows, logits, unit_vectors(rng, rows.shape[0]), unit_vectors(rng, n_src), src_labels)

    t = time.time()
    for docs in tqdm(batches, desc="epoch 1 (steps)", unit="step"):
        step(docs)
    report.update(epoch1_steps=len(batches), epoch1_s=round(time.time() - t, 1), rss_after_epoch1_mb=rss_mb(),
                  collected_vectors=int(sum(v.shape[0] for v in adapter.collector.vectors)))
    t = time.time()
    adapter.end_epoch(classes=CLASSES)
    report.update(epoch_end_s=round(time.time() - t, 1), index_size=len(adapter.index or []), rss_after_epoch_end_mb=rss_mb())
    t = time.time()
    for docs in tqdm(batches[:steps2], desc="epoch 2 (steps, refinement on)", unit="step"):
        step(docs)
    report.update(epoch2_steps=min(steps2, len(batches)), epoch2_s_per_step=round((time.time() - t) / max(1, min(steps2, len(batches))), 3))
    t = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        adapter.save(Path(tmp))
        report["checkpoint_mb"] = round(sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20, 1)
    report.update(save_s=round(time.time() - t, 1), rss_end_mb=rss_mb(), peak_rss_mb=peak_mb())
    report["growth_over_start_mb"] = round(report["peak_rss_mb"] - report["rss_start_mb"], 1)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    typer.run(main)
