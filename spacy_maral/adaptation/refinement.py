"""Progressive adaptation (docs/method.md, section 6): anchors, guidance, soft-label refinement.

Pure numpy / scikit-learn / faiss functions over arrays of span scores and vectors, so
each step can be checked by hand in the tests. The component (stage 2) calls them:

- `select_anchors`: per class, a two-component 1-D Gaussian mixture over the min-max
  normalised scores picks the reliable spans (anchors);
- `global_guidance`: a^p_c = 1[s_c(z) > delta^p_c] (O also when argmax is O);
- `local_guidance`: a^k_c = 1[n_c > delta^k_c], n_c the class counts among the k nearest
  neighbours in an index of the previous epoch's span vectors;
- `combine_guidance` and `ema_update`: u = norm((norm(a^p) + norm(a^k)) / 2),
  q <- norm(m q + (1 - m) u);
- `ema_momentum`: m_e going linearly from 0.95 to 0.80 over the epochs.
"""
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy
from sklearn.mixture import GaussianMixture

from spacy_maral.ml.decoding import NON_ENTITY


def l1_normalize(x: numpy.ndarray) -> numpy.ndarray:
    """Rows divided by their sum; all-zero rows stay zero."""
    total = x.sum(axis=1, keepdims=True)
    return numpy.divide(x, total, out=numpy.zeros_like(x, dtype=numpy.float32), where=total > 0)


def ema_momentum(epoch: int, n_epochs: int, start: float = 0.95, end: float = 0.80) -> float:
    """The EMA coefficient m_e of epoch `epoch` (0-based), linear from start to end.

    epoch (int): the current epoch, 0-based.
    n_epochs (int): the planned number of epochs (>= 1).
    start (float): m at the first epoch.
    end (float): m at the last epoch.
    """
    if n_epochs <= 1:
        return start
    frac = min(max(epoch, 0), n_epochs - 1) / (n_epochs - 1)
    return start + (end - start) * frac


def select_anchors(
    scores: numpy.ndarray,
    labels: numpy.ndarray,
    n_classes: int,
    seed: int = 0,
    threshold: float = 0.5,
) -> numpy.ndarray:
    """Per-class Gaussian-mixture selection of reliable spans.

    For each class c, the spans with hard pseudo-label c and their score x = s_c(z):
    min-max normalise x, fit a 2-component 1-D GMM, and call a span reliable when its
    posterior under the component with the higher mean exceeds `threshold`. A class
    with fewer than 2 spans, or constant scores, keeps all its spans (nothing to tell
    apart).

    scores (numpy.ndarray): (n,) each span's score for its own pseudo-label.
    labels (numpy.ndarray): (n,) hard pseudo-labels.
    n_classes (int): number of classes.
    seed (int): random seed of the mixture fit.
    threshold (float): posterior threshold.
    RETURNS (numpy.ndarray): (n,) bool, True for anchors.
    """
    reliable = numpy.zeros(labels.shape[0], dtype=bool)
    for c in range(n_classes):
        idx = numpy.flatnonzero(labels == c)
        if idx.shape[0] == 0:
            continue
        x = scores[idx].astype(numpy.float64)
        span = x.max() - x.min()
        if idx.shape[0] < 2 or not numpy.isfinite(span) or span <= 1e-12:
            reliable[idx] = True
            continue
        x = ((x - x.min()) / span)[:, None]
        gmm = GaussianMixture(n_components=2, random_state=seed, reg_covar=1e-6, max_iter=100)
        gmm.fit(x)
        high = int(numpy.argmax(gmm.means_[:, 0]))
        reliable[idx] = gmm.predict_proba(x)[:, high] > threshold
    return reliable


def class_margins(scores: numpy.ndarray, labels: numpy.ndarray, n_classes: int) -> numpy.ndarray:
    """delta_c: the mean of each span's score over the spans labelled c.

    scores (numpy.ndarray): (n,) per-span values (s_c(z) or neighbour counts n_c) for
        the span's own label c.
    labels (numpy.ndarray): (n,) hard labels.
    n_classes (int): number of classes.
    RETURNS (numpy.ndarray): (C,) float32 margins; +inf for classes with no span, so
        that class is never switched on by the guidance.
    """
    sums = numpy.bincount(labels, weights=scores, minlength=n_classes)
    counts = numpy.bincount(labels, minlength=n_classes)
    margins = numpy.full(n_classes, numpy.inf, dtype=numpy.float64)
    seen = counts > 0
    margins[seen] = sums[seen] / counts[seen]
    return margins.astype(numpy.float32)


def global_guidance(logits: numpy.ndarray, margins: numpy.ndarray) -> numpy.ndarray:
    """a^p_c = 1[s_c(z) > delta^p_c]; O is switched on also where argmax is O.

    logits (numpy.ndarray): (n, C) scores s(z).
    margins (numpy.ndarray): (C,) class margins delta^p.
    RETURNS (numpy.ndarray): (n, C) float32 indicators.
    """
    a = (logits > margins[None, :]).astype(numpy.float32)
    a[logits.argmax(axis=1) == NON_ENTITY, NON_ENTITY] = 1.0
    return a


def neighbour_counts(
    neighbour_labels: numpy.ndarray, n_classes: int
) -> numpy.ndarray:
    """n_c: how many of each span's neighbours carry class c.

    neighbour_labels (numpy.ndarray): (n, k) labels of the k nearest neighbours (-1 for
        a missing neighbour).
    n_classes (int): number of classes.
    RETURNS (numpy.ndarray): (n, C) float32 counts.
    """
    n = neighbour_labels.shape[0]
    counts = numpy.zeros((n, n_classes), dtype=numpy.float32)
    valid = neighbour_labels >= 0
    rows = numpy.repeat(numpy.arange(n), neighbour_labels.shape[1]).reshape(neighbour_labels.shape)
    numpy.add.at(counts, (rows[valid], neighbour_labels[valid]), 1.0)
    return counts


def local_guidance(counts: numpy.ndarray, margins: numpy.ndarray) -> numpy.ndarray:
    """a^k_c = 1[n_c > delta^k_c].

    counts (numpy.ndarray): (n, C) neighbour counts.
    margins (numpy.ndarray): (C,) margins delta^k.
    RETURNS (numpy.ndarray): (n, C) float32 indicators.
    """
    return (counts > margins[None, :]).astype(numpy.float32)


def combine_guidance(a_global: numpy.ndarray, a_local: numpy.ndarray) -> numpy.ndarray:
    """u = normalise((normalise(a^p) + normalise(a^k)) / 2), L1 norms.

    A span with no evidence at all (both indicators empty) gets u = 0, and
    ema_update leaves its label unchanged.
    """
    return l1_normalize((l1_normalize(a_global) + l1_normalize(a_local)) / 2.0)


def ema_update(q: numpy.ndarray, u: numpy.ndarray, momentum: float) -> numpy.ndarray:
    """q <- normalise(m q + (1 - m) u); rows with u = 0 are left as they are.

    q (numpy.ndarray): (n, C) soft labels.
    u (numpy.ndarray): (n, C) combined guidance.
    momentum (float): m_e.
    RETURNS (numpy.ndarray): the new soft labels.
    """
    has_evidence = u.sum(axis=1) > 0
    updated = l1_normalize(momentum * q + (1.0 - momentum) * u)
    return numpy.where(has_evidence[:, None], updated, q).astype(numpy.float32)


@dataclass
class NeighbourIndex:
    """Cosine k-NN over unit span vectors (faiss inner-product index) with their labels.

    vectors (numpy.ndarray): (m, d) float32 unit vectors.
    labels (numpy.ndarray): (m,) int class labels.
    """

    vectors: numpy.ndarray
    labels: numpy.ndarray

    def __post_init__(self) -> None:
        import faiss

        self.vectors = numpy.ascontiguousarray(self.vectors, dtype=numpy.float32)
        self.labels = numpy.asarray(self.labels, dtype=numpy.int64)
        self._index = faiss.IndexFlatIP(self.vectors.shape[1])
        if self.vectors.shape[0]:
            self._index.add(self.vectors)

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def neighbour_labels(self, queries: numpy.ndarray, k: int) -> numpy.ndarray:
        """(n, k) labels of each query's k nearest neighbours (-1 where fewer exist)."""
        if len(self) == 0 or queries.shape[0] == 0:
            return numpy.full((queries.shape[0], k), -1, dtype=numpy.int64)
        _, ids = self._index.search(numpy.ascontiguousarray(queries, dtype=numpy.float32), min(k, len(self)))
        out = numpy.full((queries.shape[0], k), -1, dtype=numpy.int64)
        out[:, : ids.shape[1]] = numpy.where(ids >= 0, self.labels[numpy.clip(ids, 0, None)], -1)
        return out


def downsample_non_entities(
    labels: numpy.ndarray, rate: float, rng: numpy.random.Generator
) -> numpy.ndarray:
    """Boolean mask keeping every entity span and a `rate` fraction of O spans.

    labels (numpy.ndarray): (n,) class labels (0 = O).
    rate (float): fraction of O spans kept (0.03 in the paper).
    rng (numpy.random.Generator): random source.
    """
    keep = labels != NON_ENTITY
    keep |= rng.random(labels.shape[0]) < rate
    return keep


def build_neighbour_index(
    vectors: Sequence[numpy.ndarray],
    labels: Sequence[numpy.ndarray],
    o_rate: float,
    seed: int,
    max_size: Optional[int] = None,
) -> NeighbourIndex:
    """Index of span vectors (source gold + target pseudo), O spans downsampled.

    vectors (Sequence[numpy.ndarray]): blocks of (n_i, d) unit vectors.
    labels (Sequence[numpy.ndarray]): matching blocks of (n_i,) labels.
    o_rate (float): fraction of O spans kept.
    seed (int): random seed.
    max_size (Optional[int]): cap on the index size (uniform subsample above it).
    """
    rng = numpy.random.default_rng(seed)
    if not vectors:
        return NeighbourIndex(numpy.zeros((0, 1), dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64))
    v = numpy.concatenate(vectors).astype(numpy.float32)
    y = numpy.concatenate(labels).astype(numpy.int64)
    keep = downsample_non_entities(y, o_rate, rng)
    v, y = v[keep], y[keep]
    if max_size is not None and v.shape[0] > max_size:
        pick = rng.choice(v.shape[0], size=max_size, replace=False)
        v, y = v[pick], y[pick]
    return NeighbourIndex(v, y)
