"""Stage 2: the student's progressive adaptation state and per-step logic.

`maral_ner` gets an `adaptation` block in its config for stage 2
(`spacy_maral.Adaptation.v1`). Each training batch then holds source examples (gold
entities) and target examples (pseudo-labelled by the teacher, marked by
`doc.user_data["maral_target_index"]` on the reference). The `ProgressiveAdaptation`:

- keeps the soft labels of every target span (`SoftLabelStore`);
- gives the target loss its targets and the mask of reliable spans (all spans before
  the anchor epoch; the anchors after it);
- refines the unreliable spans' soft labels every step from global (prototype) and
  local (k-NN) guidance, with the scheduled EMA; anchors stay frozen;
- at each epoch end recomputes the target prior, the margins and the neighbour index,
  selects the anchors for the next epoch and writes the diagnostics.

Target tags, when the corpus has them, are only read by `diagnostics()`, never by any
training decision.
"""
import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy
from spacy.training import Example

from spacy_maral.adaptation import refinement
from spacy_maral.adaptation.examples import diagnostic_gold, is_target, target_index
from spacy_maral.adaptation.soft_labels import DIAGNOSTIC_GOLD_KEY, SoftLabelStore
from spacy_maral.fileio import atomic_savez, atomic_write_text
from spacy_maral.ml.decoding import decode_doc
from spacy_maral.ml.loss import ReweightedVMFLoss, log_prior
from spacy_maral.ml.spans import doc_span_slices, enumerate_spans
from spacy_maral.prf import prf
from spacy_maral.util import logger, registry


@dataclass
class AdaptationSettings:
    """Settings of progressive adaptation (defaults: the paper's); registered as
    `spacy_maral.Adaptation.v1`.

    tau_u: strength of the target-prior adjustment of the target loss.
    knn_k: number of neighbours of the local guidance.
    ema_start, ema_end: the EMA coefficient m_e goes linearly from ema_start to ema_end.
    n_epochs: the planned number of epochs (for the EMA schedule).
    anchor_start: first epoch (1-based) with anchor selection and refinement.
    use_anchors: False = every target span is reliable (ablation "no anchors").
    refine: False = fixed pseudo-labels (ablation "no refinement", plain self-training).
    o_sample_rate: fraction of O spans kept in the neighbour index.
    max_index_size: cap on the neighbour index size.
    gmm_threshold: posterior threshold of the anchor mixture.
    seed: random seed (GMM fits, O downsampling).
    diagnostics_path: JSON Lines file of one record per epoch of this run, rewritten at
        each epoch end (or null).
    """

    tau_u: float = 0.1
    knn_k: int = 200
    ema_start: float = 0.95
    ema_end: float = 0.80
    n_epochs: int = 20
    anchor_start: int = 2
    use_anchors: bool = True
    refine: bool = True
    o_sample_rate: float = 0.03
    max_index_size: int = 200000
    gmm_threshold: float = 0.5
    seed: int = 0
    diagnostics_path: Optional[str] = None


# The settings class itself is the registered function: its fields are the config keys.
registry.misc.register("spacy_maral.Adaptation.v1", func=AdaptationSettings)


@dataclass
class EpochCollector:
    """Span vectors and labels seen during an epoch, O spans downsampled on arrival."""

    vectors: List[numpy.ndarray] = field(default_factory=list)
    labels: List[numpy.ndarray] = field(default_factory=list)
    target_vectors: List[numpy.ndarray] = field(default_factory=list)
    target_labels: List[numpy.ndarray] = field(default_factory=list)

    def add(self, vectors: numpy.ndarray, labels: numpy.ndarray, rate: float, rng: numpy.random.Generator, target: bool) -> None:
        keep = refinement.downsample_non_entities(labels, rate, rng)
        self.vectors.append(vectors[keep].astype(numpy.float32))
        self.labels.append(labels[keep].astype(numpy.int64))
        if target:
            self.target_vectors.append(vectors[keep].astype(numpy.float32))
            self.target_labels.append(labels[keep].astype(numpy.int64))


@dataclass
class TargetTerms:
    """The target part of one training step.

    rows: store rows of the batch's target spans.
    spans_idx: their positions among the batch's spans.
    q: their soft labels.
    reliable: their weights in the target loss (1 = reliable).
    loss: the target loss L_tgt of the batch.
    d_logits: its gradient w.r.t. all the batch's logits (n_spans, C).
    """

    rows: numpy.ndarray
    spans_idx: numpy.ndarray
    q: numpy.ndarray
    reliable: numpy.ndarray
    loss: float
    d_logits: numpy.ndarray

    def relabel(self, labels: numpy.ndarray, mask: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """The batch's span labels and mask with the target spans' hard soft labels and
        reliability in place of their (absent) gold: what the class statistics count."""
        labels, mask = labels.copy(), mask.copy()
        labels[self.spans_idx] = self.q.argmax(axis=1)
        mask[self.spans_idx] = self.reliable
        return labels, mask


class ProgressiveAdaptation:
    """Stage-2 state and per-step logic of a maral_ner component (the student).

    settings (AdaptationSettings): the configuration.
    """

    def __init__(self, settings: AdaptationSettings) -> None:
        self.settings = settings
        self.target_loss = ReweightedVMFLoss(tau=settings.tau_u, class_weights=False)
        self.store: Optional[SoftLabelStore] = None
        self.target_log_prior: Optional[numpy.ndarray] = None
        self.margins_p: Optional[numpy.ndarray] = None
        self.margins_k: Optional[numpy.ndarray] = None
        self.index: Optional[refinement.NeighbourIndex] = None
        self.collector = EpochCollector()
        self.rng = numpy.random.default_rng(settings.seed)
        self.gold: Dict[int, List[Tuple[int, int, int]]] = {}
        self.history: List[Dict[str, Any]] = []

    # -------------------------------------------------------------- set-up
    @property
    def epoch(self) -> int:
        """The current epoch, 1-based."""
        return (self.store.epoch if self.store is not None else 0) + 1

    @property
    def adapting(self) -> bool:
        """True once anchors and refinement are on (epoch >= anchor_start)."""
        return self.epoch >= self.settings.anchor_start

    def set_store(self, store: SoftLabelStore) -> None:
        self.store = store
        self.target_log_prior = log_prior(store.prior_mass())

    def require_store(self) -> SoftLabelStore:
        if self.store is None:
            raise ValueError(
                "maral_ner has an adaptation block but no soft labels: the training corpus must be "
                "spacy_maral.AdaptationCorpus.v1 with a pseudo-labelled target corpus"
            )
        return self.store

    def initialize(self, examples: Iterable[Example], classes: Sequence[str], max_width: int) -> None:
        """Build the soft-label store from every pseudo-labelled target sentence once.

        examples (Iterable[Example]): the target examples (AdaptationCorpus.target_examples),
            with indices 0..n-1.
        classes (Sequence[str]): the component's classes, O first.
        max_width (int): the widest span.
        """
        by_index: Dict[int, Example] = {}
        for eg in examples:
            if not is_target(eg):
                raise ValueError("the stage-2 target examples must be pseudo-labelled target sentences (AdaptationCorpus.target_examples)")
            by_index[target_index(eg)] = eg
        if not by_index:
            raise ValueError(
                "maral_ner has an adaptation block, but the stage-2 corpus has no target sentences: "
                "pseudo-label the target text (python -m spacy_maral pseudo-label) for spacy_maral.AdaptationCorpus.v1"
            )
        if sorted(by_index) != list(range(len(by_index))):
            raise ValueError("the target examples' indices are not 0..n-1: the target corpus reader is inconsistent")
        docs = [by_index[i].reference for i in range(len(by_index))]
        store = SoftLabelStore.from_docs(docs, classes, max_width)
        self.set_store(store)
        gold = {i: diagnostic_gold(by_index[i], list(classes)) for i in range(len(by_index))}
        self.gold = {i: g for i, g in gold.items() if g or DIAGNOSTIC_GOLD_KEY in by_index[i].reference.user_data}
        logger.info(
            "maral adaptation: %d target sentences, %d spans, soft-label mass per class %s",
            store.n_docs, store.q.shape[0], dict(zip(classes, store.prior_mass().round(1).tolist())),
        )

    # ---------------------------------------------------------- per step
    def target_terms(self, examples: Sequence[Example], spans: numpy.ndarray, logits: numpy.ndarray) -> TargetTerms:
        """The target loss of a batch: the soft cross-entropy, with the target prior, of the
        reliable target spans' logits against their soft labels.

        examples (Sequence[Example]): the batch (source and target examples).
        spans (numpy.ndarray): (n_spans, 3) the batch's spans (doc index, start, end).
        logits (numpy.ndarray): (n_spans, C) their logits s(z).
        """
        slices = doc_span_slices(len(examples), spans)
        targets = [(target_index(eg), sl, len(eg.predicted)) for eg, sl in zip(examples, slices) if is_target(eg)]
        store = self.require_store()
        store.check_lengths([t[0] for t in targets], [t[2] for t in targets])
        rows, q, reliable = self.target_batch([t[0] for t in targets])
        spans_idx = (
            numpy.concatenate([numpy.arange(sl.start, sl.stop) for _, sl, _ in targets])
            if targets else numpy.zeros(0, dtype=numpy.int64)
        )
        n_spans, n_classes = logits.shape
        d_logits = numpy.zeros((n_spans, n_classes), dtype=numpy.float32)
        loss = 0.0
        if spans_idx.shape[0] and reliable.sum() > 0:
            self.target_loss.log_prior = self.target_log_prior
            self.target_loss.weights = numpy.ones(n_classes, dtype=numpy.float32)
            d_target, loss = self.target_loss.get_grad_and_loss(logits[spans_idx], q, mask=reliable)
            d_logits[spans_idx] = d_target
        return TargetTerms(rows, spans_idx, q, reliable, loss, d_logits)

    def after_update(
        self, terms: TargetTerms, logits: numpy.ndarray, vectors: numpy.ndarray, labels: numpy.ndarray, mask: numpy.ndarray
    ) -> None:
        """After the optimizer step: refine the target spans and record the batch's vectors.

        terms (TargetTerms): the step's target part.
        logits (numpy.ndarray): (n_spans, C) the batch's logits.
        vectors (numpy.ndarray): (n_spans, d) its span vectors.
        labels (numpy.ndarray): the batch's span labels (TargetTerms.relabel).
        mask (numpy.ndarray): their mask.
        """
        source = numpy.ones(labels.shape[0], dtype=bool)
        source[terms.spans_idx] = False
        source &= mask > 0
        idx = terms.spans_idx
        self.after_step(terms.rows, logits[idx], vectors[idx], vectors[source], labels[source])

    def target_batch(self, doc_indices: Sequence[int]) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
        """Rows, soft labels and reliability mask of the given target sentences' spans."""
        store = self.require_store()
        rows = store.rows(doc_indices)
        q = store.q[rows]
        if self.adapting and self.settings.use_anchors:
            reliable = store.anchor[rows].astype(numpy.float32)
        else:
            reliable = numpy.ones(rows.shape[0], dtype=numpy.float32)
        return rows, q, reliable

    def after_step(
        self,
        rows: numpy.ndarray,
        logits: numpy.ndarray,
        vectors: numpy.ndarray,
        source_vectors: numpy.ndarray,
        source_labels: numpy.ndarray,
    ) -> None:
        """Record scores and vectors, and refine the unreliable target spans.

        rows (numpy.ndarray): store rows of the batch's target spans.
        logits (numpy.ndarray): (n, C) their logits s(z).
        vectors (numpy.ndarray): (n, d) their unit vectors z.
        source_vectors (numpy.ndarray): the batch's source span vectors.
        source_labels (numpy.ndarray): their gold labels.
        """
        store = self.require_store()
        s = self.settings
        self._refine(rows, logits, vectors)
        # Scores and vectors are recorded under the labels after this step's refinement.
        hard = store.q[rows].argmax(axis=1)
        store.scores[rows] = logits[numpy.arange(rows.shape[0]), hard]
        self.collector.add(source_vectors, source_labels, s.o_sample_rate, self.rng, target=False)
        self.collector.add(vectors, hard, s.o_sample_rate, self.rng, target=True)

    def _refine(self, rows: numpy.ndarray, logits: numpy.ndarray, vectors: numpy.ndarray) -> None:
        """EMA update of the unreliable spans' soft labels from global and local guidance."""
        store = self.require_store()
        s = self.settings
        if not (s.refine and self.adapting) or self.margins_p is None:
            return
        todo = ~store.anchor[rows] if s.use_anchors else numpy.ones(rows.shape[0], dtype=bool)
        if not todo.any():
            return
        a_global = refinement.global_guidance(logits[todo], self.margins_p)
        if self.index is not None and len(self.index) and self.margins_k is not None:
            counts = refinement.neighbour_counts(self.index.neighbour_labels(vectors[todo], s.knn_k), store.n_classes)
            a_local = refinement.local_guidance(counts, self.margins_k)
        else:
            a_local = numpy.zeros_like(a_global)
        u = refinement.combine_guidance(a_global, a_local)
        momentum = refinement.ema_momentum(self.epoch - 1, s.n_epochs, s.ema_start, s.ema_end)
        store.q[rows[todo]] = refinement.ema_update(store.q[rows[todo]], u, momentum)

    # --------------------------------------------------------- epoch end
    def end_epoch(self, class_cosines: Optional[numpy.ndarray] = None, classes: Sequence[str] = ()) -> Dict[str, Any]:
        """Recompute prior, margins, index; select the next epoch's anchors; log diagnostics."""
        store = self.require_store()
        s = self.settings
        n_classes = store.n_classes
        hard = store.hard_labels()
        seen = numpy.isfinite(store.scores)
        self.target_log_prior = log_prior(store.prior_mass())
        self.margins_p = refinement.class_margins(store.scores[seen], hard[seen], n_classes)
        self.index = refinement.build_neighbour_index(
            self.collector.vectors, self.collector.labels, 1.0, s.seed + store.epoch, s.max_index_size
        )
        if self.collector.target_vectors and len(self.index):
            tv = numpy.concatenate(self.collector.target_vectors)
            tl = numpy.concatenate(self.collector.target_labels)
            counts = refinement.neighbour_counts(self.index.neighbour_labels(tv, s.knn_k), n_classes)
            self.margins_k = refinement.class_margins(counts[numpy.arange(tl.shape[0]), tl], tl, n_classes)
        self.collector = EpochCollector()
        store.epoch += 1
        if s.use_anchors and self.adapting:
            anchors = numpy.zeros(hard.shape[0], dtype=bool)
            anchors[seen] = refinement.select_anchors(
                store.scores[seen], hard[seen], n_classes, seed=s.seed + store.epoch, threshold=s.gmm_threshold
            )
            store.anchor = anchors
        record = self.diagnostics(classes, class_cosines)
        self.history.append(record)
        self._write_diagnostics(record)
        return record

    def diagnostics(self, classes: Sequence[str], class_cosines: Optional[numpy.ndarray]) -> Dict[str, Any]:
        """Per-epoch numbers: anchors, margins, prior, class-mean cosines, pseudo-label F1."""
        store = self.require_store()
        names = list(classes) if classes else [str(i) for i in range(store.n_classes)]
        record: Dict[str, Any] = {
            "epoch_completed": store.epoch,
            "adapting_next": self.adapting,
            "classes": store.summary(names),
            "target_prior": (
                dict(zip(names, numpy.exp(self.target_log_prior).round(5).tolist())) if self.target_log_prior is not None else None
            ),
            "margins_global": _listify(self.margins_p, names),
            "margins_local": _listify(self.margins_k, names),
        }
        if class_cosines is not None:
            record["class_mean_cosines"] = numpy.asarray(class_cosines).round(4).tolist()
        if self.gold:
            record["pseudo_label_prf"] = self.pseudo_label_prf()
        return record

    def pseudo_label_prf(self) -> Dict[str, float]:
        """Entity P/R/F1 of the decoded soft labels against the target tags (diagnostics only)."""
        store = self.require_store()
        tp = n_pred = n_gold = 0
        for i, gold in self.gold.items():
            rows = numpy.arange(store.offsets[i], store.offsets[i + 1])
            n_tokens = int(store.lengths[i])
            spans = enumerate_spans([n_tokens], store.max_width)
            decoded = decode_doc(spans[:, 1], spans[:, 2], store.q[rows], n_tokens)
            pred = {(entity.start, entity.end, entity.class_id) for entity in decoded}
            g = set(gold)
            tp += len(pred & g)
            n_pred += len(pred)
            n_gold += len(g)
        p, r, f = prf(tp, n_pred - tp, n_gold - tp)
        return {"p": p, "r": r, "f": f}

    def _write_diagnostics(self, record: Dict[str, Any]) -> None:
        logger.info("maral adaptation, epoch %d: %s", record["epoch_completed"], json.dumps(record.get("pseudo_label_prf", {})))
        if self.settings.diagnostics_path:
            # the whole history, rewritten atomically: the file holds this run's epochs
            # only (an earlier run's in the same folder are replaced, and a run resumed
            # from a checkpoint has its epochs up to it once)
            lines = "".join(json.dumps(item) + "\n" for item in self.history)
            atomic_write_text(Path(self.settings.diagnostics_path), lines)

    # --------------------------------------------------------- persistence
    def save(self, directory: Path) -> None:
        """Write the state (soft labels, index, margins) into `directory`, atomically per file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.require_store().save(directory / "soft_labels.npz")
        arrays: Dict[str, numpy.ndarray] = {}
        for name in ("target_log_prior", "margins_p", "margins_k"):
            value = getattr(self, name)
            if value is not None:
                arrays[name] = value
        if self.index is not None:
            arrays["index_vectors"] = self.index.vectors
            arrays["index_labels"] = self.index.labels
        # adapter.npz and adapter.json: the file names of the saved format (pipelines saved earlier have them)
        atomic_savez(directory / "adapter.npz", arrays)
        meta = {"settings": asdict(self.settings), "history": self.history, "gold": {str(k): v for k, v in self.gold.items()},
                "rng": self.rng.bit_generator.state}
        atomic_write_text(directory / "adapter.json", json.dumps(meta))

    def load(self, directory: Path) -> None:
        """Read a state written by save(), in the place of the present one: what the saved
        state has not (margins and a neighbour index before the first epoch's end) is
        none, the epoch's collected vectors start empty, and the random generator that
        samples O spans goes on from where it was saved (older states: from its seed)."""
        directory = Path(directory)
        self.set_store(SoftLabelStore.load(directory / "soft_labels.npz"))
        try:
            with numpy.load(directory / "adapter.npz") as data:
                for name in ("target_log_prior", "margins_p", "margins_k"):
                    setattr(self, name, data[name] if name in data else None)
                self.index = refinement.NeighbourIndex(data["index_vectors"], data["index_labels"]) if "index_vectors" in data else None
            meta = json.loads((directory / "adapter.json").read_text(encoding="utf8"))
            self.rng = numpy.random.default_rng(self.settings.seed)
            if "rng" in meta:
                self.rng.bit_generator.state = meta["rng"]
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"can't read the adaptation state in {directory}: {err}") from err
        self.collector = EpochCollector()
        self.history = meta.get("history", [])
        self.gold = {int(k): [tuple(x) for x in v] for k, v in meta.get("gold", {}).items()}


def _listify(values: Optional[numpy.ndarray], names: Sequence[str]) -> Optional[Dict[str, Optional[float]]]:
    if values is None:
        return None
    return {n: (float(v) if numpy.isfinite(v) else None) for n, v in zip(names, values)}
