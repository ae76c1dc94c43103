"""Numerical tests of progressive adaptation (docs/method.md section 6).

spacy_maral.adaptation.refinement (anchors, guidance, EMA, neighbour index), the soft-label store
(spacy_maral.adaptation.soft_labels) and the stage-2 ProgressiveAdaptation (spacy_maral.adaptation.progressive), on small
hand-computed cases. No model, no encoder: every test runs in milliseconds.
"""
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy
import pytest
from spacy.tokens import Doc
from spacy.vocab import Vocab

from spacy_maral.adaptation import refinement
from spacy_maral.adaptation.progressive import AdaptationSettings, ProgressiveAdaptation
from spacy_maral.adaptation.soft_labels import PSEUDO_KEY, SoftLabelStore, attach_soft_labels, read_soft_labels
from spacy_maral.ml.spans import count_spans, enumerate_spans

INF = numpy.inf


# --------------------------------------------------------------------- helpers
def two_clusters(rng: numpy.random.Generator, n_low: int, n_high: int, low: float, high: float, noise: float) -> numpy.ndarray:
    return numpy.concatenate([rng.normal(low, noise, n_low), rng.normal(high, noise, n_high)])


def row_of(n_tokens: int, max_width: int, start: int, end: int) -> int:
    """The row of span (start, end) in a doc's enumeration order (by width, then start)."""
    width = end - start
    return sum(n_tokens - w + 1 for w in range(1, width)) + start


def make_doc(words: Sequence[str], vocab: Vocab = None) -> Doc:
    return Doc(vocab or Vocab(), words=list(words))


# ------------------------------------------------------------ select_anchors
def test_select_anchors_two_clusters_high_one_reliable() -> None:
    rng = numpy.random.default_rng(1)
    # class 1: 30 low scores around -2, 20 high around 6; class 2: 25 low around 1, 25 high around 3
    s1 = two_clusters(rng, 30, 20, -2.0, 6.0, 0.3)
    s2 = two_clusters(rng, 25, 25, 1.0, 3.0, 0.1)
    scores = numpy.concatenate([s1, s2])
    labels = numpy.concatenate([numpy.full(50, 1), numpy.full(50, 2)])
    perm = rng.permutation(100)  # the classes' spans interleaved
    scores, labels = scores[perm], labels[perm]
    expected = numpy.concatenate([numpy.arange(50) >= 30, numpy.arange(50) >= 25])[perm]
    reliable = refinement.select_anchors(scores, labels, n_classes=3, seed=0)
    assert reliable.dtype == bool and reliable.shape == (100,)
    numpy.testing.assert_array_equal(reliable, expected)


def test_select_anchors_is_scale_free() -> None:
    """Min-max normalisation: an affine change of the scores selects the same spans."""
    rng = numpy.random.default_rng(2)
    scores = two_clusters(rng, 15, 15, 0.0, 1.0, 0.08)
    labels = numpy.full(30, 1)
    a = refinement.select_anchors(scores, labels, 2, seed=0)
    b = refinement.select_anchors(1000.0 * scores - 37.0, labels, 2, seed=0)
    numpy.testing.assert_array_equal(a, b)
    assert a[15:].all() and not a[:15].any()


def test_select_anchors_degenerate_classes_are_all_reliable() -> None:
    # class 0: no span; class 1: one span; class 2: constant scores; class 3: two equal + inf-free
    scores = numpy.array([0.3, 5.0, 5.0, 5.0, -1.0, -1.0], dtype=numpy.float32)
    labels = numpy.array([1, 2, 2, 2, 3, 3])
    reliable = refinement.select_anchors(scores, labels, n_classes=5, seed=0)
    assert reliable.all()


def test_select_anchors_empty_input() -> None:
    out = refinement.select_anchors(numpy.zeros(0, dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64), 3)
    assert out.shape == (0,) and out.dtype == bool


def test_select_anchors_two_spans_differing() -> None:
    """Two distinct scores: each becomes its own component; only the higher is an anchor."""
    reliable = refinement.select_anchors(numpy.array([0.1, 0.9]), numpy.array([1, 1]), 2, seed=0)
    assert reliable.tolist() == [False, True]


def test_select_anchors_seeded_is_deterministic() -> None:
    rng = numpy.random.default_rng(3)
    scores = rng.random(200)  # no clear structure: the fit depends on the seed
    labels = rng.integers(0, 4, 200)
    first = refinement.select_anchors(scores, labels, 4, seed=7)
    for _ in range(3):
        numpy.testing.assert_array_equal(refinement.select_anchors(scores, labels, 4, seed=7), first)


def test_select_anchors_threshold() -> None:
    rng = numpy.random.default_rng(4)
    # overlapping clusters, so posteriors spread over (0, 1)
    scores = two_clusters(rng, 60, 60, 0.0, 1.0, 0.4)
    labels = numpy.concatenate([numpy.full(119, 1), [2]])  # class 2: a single span
    by_t = {t: refinement.select_anchors(scores, labels, 3, seed=0, threshold=t) for t in (0.1, 0.5, 0.9, 1.0)}
    # a higher threshold keeps a subset
    assert (by_t[0.9] <= by_t[0.5]).all() and (by_t[0.5] <= by_t[0.1]).all()
    assert by_t[0.1].sum() > by_t[0.5].sum() > by_t[0.9].sum()
    # no posterior exceeds 1: only the single-span class stays reliable
    assert by_t[1.0].tolist() == [False] * 119 + [True]


# ------------------------------------------------------------- class_margins
def test_class_margins_by_hand() -> None:
    scores = numpy.array([1.0, 3.0, 2.0, 5.0, 8.0, -4.0])
    labels = numpy.array([0, 0, 1, 1, 1, 3])
    margins = refinement.class_margins(scores, labels, 5)
    assert margins.dtype == numpy.float32
    numpy.testing.assert_allclose(margins, [2.0, 5.0, INF, -4.0, INF])


def test_class_margins_empty() -> None:
    margins = refinement.class_margins(numpy.zeros(0), numpy.zeros(0, dtype=numpy.int64), 3)
    assert numpy.isposinf(margins).all()


# -------------------------------------------------------------- guidance
def test_global_guidance_by_hand() -> None:
    logits = numpy.array(
        [
            [2.0, 1.0, 0.0],  # O > 1.5 and PER > 0.8; argmax O
            [0.0, 3.0, 1.0],  # PER only (LOC 1.0 is not > 1.0)
            [1.0, 0.5, 2.0],  # LOC only
            [0.5, 0.1, 0.2],  # nothing above its margin, but argmax is O -> O
            [0.2, 0.5, 0.9],  # nothing above its margin, argmax LOC -> no evidence
        ],
        dtype=numpy.float32,
    )
    margins = numpy.array([1.5, 0.8, 1.0], dtype=numpy.float32)
    expected = [[1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 0, 0]]
    out = refinement.global_guidance(logits, margins)
    assert out.dtype == numpy.float32
    numpy.testing.assert_array_equal(out, expected)


def test_global_guidance_unseen_class_never_on() -> None:
    logits = numpy.array([[0.0, 1e6, 0.0]], dtype=numpy.float32)
    out = refinement.global_guidance(logits, numpy.array([0.0, INF, 0.0], dtype=numpy.float32))
    numpy.testing.assert_array_equal(out, [[0, 0, 0]])


def test_neighbour_counts_by_hand() -> None:
    labels = numpy.array([[0, 1, 1, -1], [2, 2, 2, 0], [-1, -1, -1, -1]])
    out = refinement.neighbour_counts(labels, 3)
    assert out.dtype == numpy.float32
    numpy.testing.assert_array_equal(out, [[1, 2, 0], [1, 0, 3], [0, 0, 0]])


def test_neighbour_counts_no_rows() -> None:
    assert refinement.neighbour_counts(numpy.zeros((0, 5), dtype=numpy.int64), 3).shape == (0, 3)


def test_local_guidance_by_hand() -> None:
    counts = numpy.array([[1, 2, 0], [1, 0, 3], [2, 1, 2]], dtype=numpy.float32)
    margins = numpy.array([1.5, 1.0, 2.0], dtype=numpy.float32)
    # strict ">": a count equal to its margin is not evidence
    numpy.testing.assert_array_equal(refinement.local_guidance(counts, margins), [[0, 1, 0], [0, 0, 1], [1, 0, 0]])


def test_combine_guidance_by_hand() -> None:
    a_p = numpy.array([[1, 1, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1], [0, 0, 0]], dtype=numpy.float32)
    a_k = numpy.array([[0, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]], dtype=numpy.float32)
    expected = [
        [0.25, 0.75, 0.0],  # ([.5, .5, 0] + [0, 1, 0]) / 2
        [0.0, 0.5, 0.5],
        [1.0, 0.0, 0.0],  # ([1, 0, 0] + 0) / 2 = [.5, 0, 0], normalised again
        [0.0, 0.0, 0.0],  # no evidence at all
        [1 / 6, 1 / 6, 2 / 3],  # ([1/3, 1/3, 1/3] + [0, 0, 1]) / 2
        [0.0, 0.5, 0.5],  # local only
    ]
    numpy.testing.assert_allclose(refinement.combine_guidance(a_p, a_k), expected, rtol=1e-6)


def test_ema_update_by_hand() -> None:
    q = numpy.array([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.0]], dtype=numpy.float32)
    u = numpy.array([[0.25, 0.75, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=numpy.float32)
    out = refinement.ema_update(q, u, 0.9)
    expected = [
        [0.205, 0.795, 0.0],  # 0.9 q + 0.1 u, already normalised
        [0.9, 0.05, 0.05],
        [0.5, 0.5, 0.0],  # u = 0: unchanged
        [0.45 / 0.55, 0.1 / 0.55, 0.0],  # [.45, .1, 0] renormalised
    ]
    assert out.dtype == numpy.float32
    numpy.testing.assert_allclose(out, expected, rtol=1e-6)
    # the input is not modified
    assert q[1].tolist() == [1.0, 0.0, 0.0]


def test_ema_update_row_without_evidence_keeps_unnormalised_q() -> None:
    q = numpy.array([[0.3, 0.3, 0.0]], dtype=numpy.float32)
    numpy.testing.assert_array_equal(refinement.ema_update(q, numpy.zeros_like(q), 0.8), q)


def test_l1_normalize() -> None:
    x = numpy.array([[1.0, 3.0], [0.0, 0.0]])
    numpy.testing.assert_allclose(refinement.l1_normalize(x), [[0.25, 0.75], [0.0, 0.0]])


# -------------------------------------------------------------- ema_momentum
def test_ema_momentum_schedule() -> None:
    values = [refinement.ema_momentum(e, 4) for e in range(4)]
    numpy.testing.assert_allclose(values, [0.95, 0.90, 0.85, 0.80])
    assert refinement.ema_momentum(0, 20) == pytest.approx(0.95)
    assert refinement.ema_momentum(19, 20) == pytest.approx(0.80)
    assert refinement.ema_momentum(10, 21) == pytest.approx(0.875)
    # outside the plan: clipped
    assert refinement.ema_momentum(50, 4) == pytest.approx(0.80)
    assert refinement.ema_momentum(-1, 4) == pytest.approx(0.95)
    # a single epoch: the start value
    assert refinement.ema_momentum(0, 1) == pytest.approx(0.95)
    assert refinement.ema_momentum(3, 1) == pytest.approx(0.95)
    assert refinement.ema_momentum(1, 3, start=0.5, end=0.1) == pytest.approx(0.3)


# -------------------------------------------------------------- neighbour index
def unit(rng: numpy.random.Generator, n: int, d: int) -> numpy.ndarray:
    v = rng.normal(size=(n, d)).astype(numpy.float32)
    return v / numpy.linalg.norm(v, axis=1, keepdims=True)


def test_neighbour_index_matches_brute_force_cosine() -> None:
    rng = numpy.random.default_rng(5)
    vectors = unit(rng, 60, 8)
    labels = rng.integers(0, 4, 60)
    queries = unit(rng, 9, 8)
    k = 7
    index = refinement.NeighbourIndex(vectors, labels)
    assert len(index) == 60
    out = index.neighbour_labels(queries, k)
    assert out.shape == (9, k) and out.dtype == numpy.int64
    sims = queries @ vectors.T
    order = numpy.argsort(-sims, axis=1, kind="stable")[:, :k]
    numpy.testing.assert_array_equal(out, labels[order])


def test_neighbour_index_fewer_points_than_k_pads_with_minus_one() -> None:
    vectors = numpy.eye(3, dtype=numpy.float32)
    index = refinement.NeighbourIndex(vectors, numpy.array([2, 0, 1]))
    out = index.neighbour_labels(numpy.array([[1.0, 0.1, 0.0]], dtype=numpy.float32), 5)
    assert out.tolist() == [[2, 0, 1, -1, -1]]


def test_empty_neighbour_index() -> None:
    index = refinement.NeighbourIndex(numpy.zeros((0, 4), dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64))
    assert len(index) == 0
    out = index.neighbour_labels(numpy.ones((2, 4), dtype=numpy.float32), 3)
    assert out.tolist() == [[-1, -1, -1]] * 2
    empty = refinement.build_neighbour_index([], [], 0.03, seed=0)
    assert len(empty) == 0
    assert empty.neighbour_labels(numpy.ones((1, 16), dtype=numpy.float32), 2).tolist() == [[-1, -1]]
    counts = refinement.neighbour_counts(out, 3)
    assert counts.sum() == 0


def test_neighbour_index_no_queries() -> None:
    index = refinement.NeighbourIndex(numpy.eye(2, dtype=numpy.float32), numpy.array([0, 1]))
    assert index.neighbour_labels(numpy.zeros((0, 2), dtype=numpy.float32), 4).shape == (0, 4)


def test_build_neighbour_index_downsamples_o_and_keeps_entities() -> None:
    rng = numpy.random.default_rng(6)
    n_o, n_ent = 10000, 57
    labels = [numpy.zeros(n_o // 2, dtype=numpy.int64), rng.integers(1, 4, n_ent), numpy.zeros(n_o // 2, dtype=numpy.int64)]
    vectors = [unit(rng, x.shape[0], 4) for x in labels]
    index = refinement.build_neighbour_index(vectors, labels, o_rate=0.03, seed=0)
    kept_o = int((index.labels == 0).sum())
    assert int((index.labels > 0).sum()) == n_ent  # every entity span kept
    assert 200 <= kept_o <= 400  # about 3% of 10000 (sd ~17)
    assert len(index) == n_ent + kept_o
    # the kept rows are rows of the input, vectors and labels still aligned
    all_v = numpy.concatenate(vectors)
    all_y = numpy.concatenate(labels)
    entity_rows = numpy.flatnonzero(all_y > 0)
    numpy.testing.assert_array_equal(index.vectors[index.labels > 0], all_v[entity_rows])
    # seeded: the same index again; another seed: another O sample
    again = refinement.build_neighbour_index(vectors, labels, o_rate=0.03, seed=0)
    numpy.testing.assert_array_equal(again.vectors, index.vectors)
    numpy.testing.assert_array_equal(again.labels, index.labels)
    other = refinement.build_neighbour_index(vectors, labels, o_rate=0.03, seed=1)
    assert other.vectors.shape != index.vectors.shape or not numpy.array_equal(other.vectors, index.vectors)


def test_build_neighbour_index_rate_one_and_cap() -> None:
    rng = numpy.random.default_rng(7)
    labels = [numpy.array([0, 0, 1, 2, 0])]
    vectors = [unit(rng, 5, 3)]
    full = refinement.build_neighbour_index(vectors, labels, o_rate=1.0, seed=0)
    numpy.testing.assert_array_equal(full.labels, labels[0])
    capped = refinement.build_neighbour_index(vectors, labels, o_rate=1.0, seed=0, max_size=3)
    assert len(capped) == 3
    # identifiable rows (one-hot vectors, row i labelled by i's label), over two blocks:
    # a capped index keeps distinct rows, each with its own label
    eye = numpy.eye(6, dtype=numpy.float32)
    blocks, block_labels = [eye[:4], eye[4:]], [numpy.array([0, 1, 2, 0]), numpy.array([3, 1])]
    everything = refinement.build_neighbour_index(blocks, block_labels, o_rate=1.0, seed=0)
    numpy.testing.assert_array_equal(everything.vectors, eye)
    numpy.testing.assert_array_equal(everything.labels, [0, 1, 2, 0, 3, 1])
    capped = refinement.build_neighbour_index(blocks, block_labels, o_rate=1.0, seed=3, max_size=4)
    rows = capped.vectors.argmax(axis=1)
    assert len(set(rows.tolist())) == 4
    numpy.testing.assert_array_equal(capped.labels, numpy.array([0, 1, 2, 0, 3, 1])[rows])


def test_downsample_non_entities() -> None:
    labels = numpy.array([0] * 1000 + [1, 2, 3])
    keep = refinement.downsample_non_entities(labels, 0.0, numpy.random.default_rng(0))
    assert keep.tolist() == [False] * 1000 + [True] * 3
    keep = refinement.downsample_non_entities(labels, 1.0, numpy.random.default_rng(0))
    assert keep.all()


# -------------------------------------------------------------- soft labels
CLASSES = ("O", "PER", "LOC", "ORG")


def pseudo_docs(vocab: Vocab) -> Tuple[List[Doc], List[Tuple[Tuple[int, int], List[float]]]]:
    """Two pseudo-labelled docs (the teacher's classes O, PER, LOC) and an unlabelled one."""
    d1 = make_doc("Angela Merkel visited Paris on Monday .".split(), vocab)
    kept1 = [((0, 2), [0.1, 0.7, 0.2]), ((3, 4), [0.2, 0.1, 0.7])]
    attach_soft_labels(d1, [s for s, _ in kept1], numpy.array([p for _, p in kept1]), ("O", "PER", "LOC"))
    d2 = make_doc("It rained .".split(), vocab)
    attach_soft_labels(d2, [], numpy.zeros((0, 3)), ("O", "PER", "LOC"))
    d3 = make_doc("Hello there".split(), vocab)  # no pseudo group at all
    return [d1, d2, d3], kept1


def test_attach_soft_labels_sets_span_group() -> None:
    docs, kept = pseudo_docs(Vocab())
    group = docs[0].spans[PSEUDO_KEY]
    assert [(s.start, s.end, s.label_) for s in group] == [(0, 2, "PER"), (3, 4, "LOC")]
    assert group.attrs["classes"] == ["O", "PER", "LOC"]
    numpy.testing.assert_allclose(group.attrs["probs"], [p for _, p in kept])


def test_store_from_docs_one_hot_o_except_kept_spans() -> None:
    docs, kept = pseudo_docs(Vocab())
    max_width = 3
    store = SoftLabelStore.from_docs(docs, CLASSES, max_width)
    counts = [count_spans(len(d), max_width) for d in docs]
    assert store.q.shape == (sum(counts), 4)  # memory proportional to the real spans
    assert store.offsets.tolist() == [0, counts[0], counts[0] + counts[1], sum(counts)]
    assert store.n_docs == 3 and store.n_classes == 4
    assert store.lengths.tolist() == [7, 3, 2]
    expected = numpy.zeros((sum(counts), 4), dtype=numpy.float32)
    expected[:, 0] = 1.0
    for (s, e), p in kept:
        expected[row_of(7, max_width, s, e)] = p + [0.0]  # teacher O, PER, LOC; student ORG = 0
    numpy.testing.assert_allclose(store.q, expected, rtol=1e-6)
    # the row arithmetic agrees with enumerate_spans
    spans = enumerate_spans([7], max_width)
    assert tuple(spans[row_of(7, max_width, 0, 2), 1:]) == (0, 2)
    assert tuple(spans[row_of(7, max_width, 3, 4), 1:]) == (3, 4)
    # fresh state
    assert not store.anchor.any() and numpy.isnan(store.scores).all() and store.epoch == 0
    assert store.rows([1]).tolist() == list(range(counts[0], counts[0] + counts[1]))
    assert store.rows([]).shape == (0,)
    assert store.rows([2, 0]).tolist() == list(range(counts[0] + counts[1], sum(counts))) + list(range(counts[0]))


def test_store_maps_teacher_classes_onto_student_order() -> None:
    docs, _ = pseudo_docs(Vocab())
    student = ("O", "LOC", "ORG", "PER")
    q = read_soft_labels(docs[0], student, 4)
    numpy.testing.assert_allclose(q[row_of(7, 4, 0, 2)], [0.1, 0.2, 0.0, 0.7])
    numpy.testing.assert_allclose(q[row_of(7, 4, 3, 4)], [0.2, 0.7, 0.0, 0.1])
    assert q.sum(axis=1) == pytest.approx(numpy.ones(q.shape[0]))


def test_pseudo_span_wider_than_max_width_stays_o() -> None:
    doc = make_doc("the very long named entity here".split())
    attach_soft_labels(doc, [(0, 5), (5, 6)], numpy.array([[0.1, 0.9], [0.3, 0.7]]), ("O", "MISC"))
    q = read_soft_labels(doc, ("O", "MISC"), max_width=4)
    expected = numpy.zeros((count_spans(6, 4), 2), dtype=numpy.float32)
    expected[:, 0] = 1.0
    expected[row_of(6, 4, 5, 6)] = [0.3, 0.7]
    numpy.testing.assert_allclose(q, expected)


def test_teacher_class_unknown_to_student_is_a_clear_error() -> None:
    docs, _ = pseudo_docs(Vocab())
    with pytest.raises(ValueError, match=r"\['LOC'\].*student does not have"):
        SoftLabelStore.from_docs(docs, ("O", "PER", "ORG"), 4)


def test_store_from_no_docs() -> None:
    store = SoftLabelStore.from_docs([], CLASSES, 4)
    assert store.q.shape == (0, 4) and store.n_docs == 0


def test_store_rejects_wrong_row_count() -> None:
    with pytest.raises(ValueError, match="rows"):
        SoftLabelStore(numpy.array([3]), numpy.zeros((4, 2), dtype=numpy.float32), 2)


def test_store_save_load_round_trip(tmp_path: Path) -> None:
    docs, _ = pseudo_docs(Vocab())
    store = SoftLabelStore.from_docs(docs, CLASSES, 3)
    rng = numpy.random.default_rng(0)
    store.q = rng.dirichlet(numpy.ones(4), size=store.q.shape[0]).astype(numpy.float32)
    store.anchor = rng.random(store.q.shape[0]) < 0.5
    store.scores[::2] = rng.normal(size=store.scores[::2].shape[0])
    store.epoch = 3
    path = tmp_path / "state" / "soft_labels.npz"
    path.parent.mkdir()
    store.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["soft_labels.npz"]  # no temp file left
    loaded = SoftLabelStore.load(path)
    numpy.testing.assert_array_equal(loaded.q, store.q)
    numpy.testing.assert_array_equal(loaded.anchor, store.anchor)
    numpy.testing.assert_array_equal(loaded.scores, store.scores)  # NaNs in the same places
    numpy.testing.assert_array_equal(loaded.lengths, store.lengths)
    numpy.testing.assert_array_equal(loaded.offsets, store.offsets)
    assert loaded.epoch == 3 and loaded.max_width == 3
    assert loaded.anchor.dtype == bool and loaded.q.dtype == numpy.float32


def test_store_load_missing_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="can't read the soft-label state"):
        SoftLabelStore.load(tmp_path / "nope.npz")


def test_store_load_missing_array_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "partial.npz"
    numpy.savez(path, q=numpy.zeros((1, 2)))
    with pytest.raises(ValueError, match="can't read the soft-label state"):
        SoftLabelStore.load(path)


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.98])
def test_store_load_truncated_file_is_a_value_error(tmp_path: Path, keep: float) -> None:
    docs, _ = pseudo_docs(Vocab())
    path = tmp_path / "soft_labels.npz"
    SoftLabelStore.from_docs(docs, CLASSES, 3).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="can't read the soft-label state"):
        SoftLabelStore.load(path)


def test_check_lengths() -> None:
    docs, _ = pseudo_docs(Vocab())
    store = SoftLabelStore.from_docs(docs, CLASSES, 3)
    store.check_lengths([0, 1, 2], [7, 3, 2])
    store.check_lengths([], [])
    with pytest.raises(ValueError, match="sentence 1 has 4 tokens.*corpus changed"):
        store.check_lengths([0, 1], [7, 4])
    with pytest.raises(ValueError, match="outside the soft-label store"):
        store.check_lengths([3], [2])
    with pytest.raises(ValueError, match="outside"):
        store.check_lengths([-1], [2])


def test_store_prior_mass_hard_labels_and_summary() -> None:
    docs, _ = pseudo_docs(Vocab())
    store = SoftLabelStore.from_docs(docs, CLASSES, 3)
    n = store.q.shape[0]
    mass = store.prior_mass()
    numpy.testing.assert_allclose(mass, [n - 2 + 0.1 + 0.2, 0.7 + 0.1, 0.2 + 0.7, 0.0], rtol=1e-6)
    hard = store.hard_labels()
    assert sorted(hard[hard > 0].tolist()) == [1, 2]
    store.anchor[numpy.flatnonzero(hard == 1)] = True
    summary = store.summary(CLASSES)
    assert summary["PER"] == {"spans": 1, "anchor_fraction": 1.0}
    assert summary["LOC"] == {"spans": 1, "anchor_fraction": 0.0}
    assert summary["ORG"] == {"spans": 0, "anchor_fraction": 0.0}
    assert summary["O"]["spans"] == n - 2


# -------------------------------------------------------------- the ProgressiveAdaptation
def small_adaptation(**settings) -> Tuple[ProgressiveAdaptation, SoftLabelStore]:
    docs, _ = pseudo_docs(Vocab())
    store = SoftLabelStore.from_docs(docs, CLASSES, 3)
    adaptation = ProgressiveAdaptation(AdaptationSettings(**{"knn_k": 3, "n_epochs": 4, **settings}))
    adaptation.set_store(store)
    return adaptation, store


def test_adaptation_needs_a_store() -> None:
    adaptation = ProgressiveAdaptation(AdaptationSettings())
    with pytest.raises(ValueError, match="no soft labels"):
        adaptation.target_batch([0])


def test_target_batch_reliability_before_and_after_anchor_start() -> None:
    adaptation, store = small_adaptation(anchor_start=2)
    store.anchor[::3] = True
    rows, q, reliable = adaptation.target_batch([1, 0])
    assert adaptation.epoch == 1 and not adaptation.adapting
    assert rows.tolist() == store.rows([1, 0]).tolist()
    numpy.testing.assert_array_equal(q, store.q[rows])
    assert reliable.dtype == numpy.float32 and reliable.tolist() == [1.0] * rows.shape[0]
    store.epoch = 1  # epoch 2 (1-based): anchors in force
    assert adaptation.adapting
    rows, _, reliable = adaptation.target_batch([1, 0])
    numpy.testing.assert_array_equal(reliable, store.anchor[rows].astype(numpy.float32))
    assert 0 < reliable.sum() < rows.shape[0]


def test_target_batch_without_anchors_all_reliable() -> None:
    adaptation, store = small_adaptation(anchor_start=1, use_anchors=False)
    store.anchor[:] = False
    assert adaptation.adapting
    _, _, reliable = adaptation.target_batch([0, 1, 2])
    assert reliable.tolist() == [1.0] * store.q.shape[0]


def _step_inputs(store: SoftLabelStore, seed: int = 0) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    rng = numpy.random.default_rng(seed)
    rows = store.rows([0])
    logits = rng.normal(size=(rows.shape[0], store.n_classes)).astype(numpy.float32) * 3
    vectors = unit(rng, rows.shape[0], 5)
    return rows, logits, vectors


def _prepared(adaptation: ProgressiveAdaptation, store: SoftLabelStore, seed: int = 0) -> None:
    """Epoch 2, margins and an index as after the first epoch's end."""
    rng = numpy.random.default_rng(seed + 100)
    store.epoch = 1
    store.anchor[store.rows([0])[::2]] = True
    adaptation.margins_p = numpy.array([3.0, 0.5, 0.5, INF], dtype=numpy.float32)  # O above its margin only sometimes
    adaptation.margins_k = numpy.array([1.0, 0.5, 0.5, INF], dtype=numpy.float32)
    adaptation.index = refinement.NeighbourIndex(unit(rng, 12, 5), rng.integers(0, 3, 12))


def reference_refinement(
    q: numpy.ndarray, logits: numpy.ndarray, vectors: numpy.ndarray, index_vectors: numpy.ndarray,
    index_labels: numpy.ndarray, margins_p: numpy.ndarray, margins_k: numpy.ndarray, k: int, m: float,
) -> numpy.ndarray:
    """Section 5's refinement of each span written out with plain loops (brute-force
    cosine neighbours), independently of spacy_maral.adaptation.refinement."""
    n_classes = q.shape[1]

    def norm(v: List[float]) -> List[float]:
        total = sum(v)
        return [x / total for x in v] if total > 0 else [0.0] * len(v)

    out = q.astype(numpy.float64).copy()
    for i in range(q.shape[0]):
        a_p = [1.0 if logits[i, c] > margins_p[c] else 0.0 for c in range(n_classes)]
        if int(numpy.argmax(logits[i])) == 0:
            a_p[0] = 1.0
        similarity = [float(numpy.dot(v, vectors[i])) for v in index_vectors]
        nearest = sorted(range(len(similarity)), key=lambda j: -similarity[j])[:k]
        n_c = [sum(1 for j in nearest if index_labels[j] == c) for c in range(n_classes)]
        a_k = [1.0 if n_c[c] > margins_k[c] else 0.0 for c in range(n_classes)]
        u = norm([(x + y) / 2 for x, y in zip(norm(a_p), norm(a_k))])
        if sum(u) == 0:
            continue  # no evidence: unchanged
        out[i] = norm([m * float(a) + (1 - m) * b for a, b in zip(q[i], u)])
    return out


def test_after_step_refines_only_non_anchors() -> None:
    adaptation, store = small_adaptation(anchor_start=2)
    _prepared(adaptation, store)
    rows, logits, vectors = _step_inputs(store)
    before = store.q.copy()
    adaptation.after_step(rows, logits, vectors, numpy.zeros((0, 5), dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64))
    anchors = store.anchor[rows]
    # anchors frozen, other docs' rows untouched
    numpy.testing.assert_array_equal(store.q[rows[anchors]], before[rows[anchors]])
    others = numpy.setdiff1d(numpy.arange(store.q.shape[0]), rows)
    numpy.testing.assert_array_equal(store.q[others], before[others])
    # the non-anchors follow the section-5 formulas with m_e of epoch 2 of 4 (0.95 -> 0.80: 0.90)
    todo = ~anchors
    expected = reference_refinement(
        before[rows[todo]], logits[todo], vectors[todo], adaptation.index.vectors, adaptation.index.labels,
        adaptation.margins_p, adaptation.margins_k, k=3, m=0.90,
    )
    numpy.testing.assert_allclose(store.q[rows[todo]], expected, rtol=1e-5, atol=1e-7)
    assert not numpy.allclose(store.q[rows[todo]], before[rows[todo]])
    # scores of the batch's spans recorded under their (pre-step) hard label
    hard = before[rows].argmax(axis=1)
    numpy.testing.assert_array_equal(store.scores[rows], logits[numpy.arange(rows.shape[0]), hard])
    assert numpy.isnan(store.scores[others]).all()


def test_after_step_refinement_by_hand() -> None:
    """One O span, global guidance only (no index yet): q = norm(0.9 q + 0.1 u)."""
    adaptation, store = small_adaptation(anchor_start=2)
    store.epoch = 1
    adaptation.margins_p = numpy.array([10.0, 1.0, 1.0, INF], dtype=numpy.float32)
    row = numpy.array([store.rows([1])[0]])
    logits = numpy.array([[0.0, 2.0, 3.0, 9.0]], dtype=numpy.float32)  # PER and LOC above margin
    adaptation.after_step(row, logits, unit(numpy.random.default_rng(0), 1, 5), numpy.zeros((0, 5)), numpy.zeros(0, dtype=numpy.int64))
    # u = norm((norm([0, 1, 1, 0]) + 0) / 2) = [0, .5, .5, 0]
    numpy.testing.assert_allclose(store.q[row[0]], [0.9, 0.05, 0.05, 0.0], rtol=1e-6)


def test_after_step_refine_false_leaves_q() -> None:
    adaptation, store = small_adaptation(anchor_start=2, refine=False)
    _prepared(adaptation, store)
    rows, logits, vectors = _step_inputs(store)
    before = store.q.copy()
    adaptation.after_step(rows, logits, vectors, numpy.zeros((0, 5), dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64))
    numpy.testing.assert_array_equal(store.q, before)
    assert numpy.isfinite(store.scores[rows]).all()  # still recorded for the diagnostics


def test_after_step_before_anchor_start_leaves_q() -> None:
    adaptation, store = small_adaptation(anchor_start=2)
    _prepared(adaptation, store)
    store.epoch = 0  # first epoch
    rows, logits, vectors = _step_inputs(store)
    before = store.q.copy()
    adaptation.after_step(rows, logits, vectors, numpy.zeros((0, 5), dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64))
    numpy.testing.assert_array_equal(store.q, before)


def test_after_step_without_anchors_refines_everything() -> None:
    adaptation, store = small_adaptation(anchor_start=2, use_anchors=False)
    _prepared(adaptation, store)
    rows, logits, vectors = _step_inputs(store)
    before = store.q.copy()
    adaptation.after_step(rows, logits, vectors, numpy.zeros((0, 5), dtype=numpy.float32), numpy.zeros(0, dtype=numpy.int64))
    expected = reference_refinement(
        before[rows], logits, vectors, adaptation.index.vectors, adaptation.index.labels,
        adaptation.margins_p, adaptation.margins_k, k=3, m=0.90,
    )
    numpy.testing.assert_allclose(store.q[rows], expected, rtol=1e-5, atol=1e-7)
    # the anchors of _prepared are refined too
    assert not numpy.allclose(store.q[rows[store.anchor[rows]]], before[rows[store.anchor[rows]]])


def test_recorded_score_belongs_to_the_current_hard_label() -> None:
    adaptation, store = small_adaptation(anchor_start=2, ema_start=0.8, ema_end=0.8)
    store.epoch = 1
    row = numpy.array([store.rows([0])[row_of(7, 3, 0, 2)]])  # the PER span, q = [.1, .7, .2, 0]
    store.q[row[0]] = [0.45, 0.55, 0.0, 0.0]
    adaptation.margins_p = numpy.array([0.0, 10.0, 10.0, INF], dtype=numpy.float32)
    logits = numpy.array([[5.0, 0.0, 0.0, 0.0]], dtype=numpy.float32)  # guidance: O only
    adaptation.after_step(row, logits, unit(numpy.random.default_rng(0), 1, 5), numpy.zeros((0, 5)), numpy.zeros(0, dtype=numpy.int64))
    # 0.8 [.45, .55, 0, 0] + 0.2 [1, 0, 0, 0] = [.56, .44, 0, 0]: the span is now O
    numpy.testing.assert_allclose(store.q[row[0]], [0.56, 0.44, 0.0, 0.0], rtol=1e-6)
    hard = int(store.q[row[0]].argmax())
    assert store.scores[row[0]] == pytest.approx(float(logits[0, hard]))


def test_end_epoch_recomputes_state_and_selects_anchors(tmp_path: Path) -> None:
    diag = tmp_path / "diag" / "d.jsonl"
    adaptation, store = small_adaptation(anchor_start=2, diagnostics_path=str(diag))
    rng = numpy.random.default_rng(0)
    for doc in range(store.n_docs):
        rows = store.rows([doc])
        adaptation.after_step(
            rows, rng.normal(size=(rows.shape[0], 4)).astype(numpy.float32), unit(rng, rows.shape[0], 5),
            unit(rng, 3, 5), numpy.array([0, 1, 2]),
        )
    # The last pass's scores, chosen by hand: 27 spans, 25 of them O (15 low around -3,
    # 10 high around 5), the PER span (0, 2) and the LOC span (3, 4) of the first doc.
    hard = store.q.argmax(axis=1)
    per, loc = store.rows([0])[row_of(7, 3, 0, 2)], store.rows([0])[row_of(7, 3, 3, 4)]
    o_rows = numpy.flatnonzero(hard == 0)
    assert o_rows.shape[0] == 25 and hard[per] == 1 and hard[loc] == 2 and (hard == 3).sum() == 0
    low, high = o_rows[:15], o_rows[15:]
    store.scores[low] = -3.0 + 0.01 * numpy.arange(15)
    store.scores[high] = 5.0 + 0.01 * numpy.arange(10)
    store.scores[per], store.scores[loc] = 1.25, -0.5
    q_before = store.q.copy()
    collected = adaptation.collector
    index_vectors, index_labels = numpy.concatenate(collected.vectors), numpy.concatenate(collected.labels)
    target_vectors, target_labels = numpy.concatenate(collected.target_vectors), numpy.concatenate(collected.target_labels)
    record = adaptation.end_epoch(class_cosines=numpy.eye(4), classes=CLASSES)
    numpy.testing.assert_array_equal(store.q, q_before)  # epoch 1: no refinement
    # the index: every span vector of the epoch, in order, with its label (o_rate 1 at the
    # epoch end; under the size cap); the local margins: for each target span, how many
    # of its 3 nearest (by cosine, brute force here) share its label, averaged per label
    numpy.testing.assert_array_equal(adaptation.index.vectors, index_vectors.astype(numpy.float32))
    numpy.testing.assert_array_equal(adaptation.index.labels, index_labels)
    nearest = numpy.argsort(-(target_vectors @ index_vectors.T), axis=1, kind="stable")[:, :3]
    own = (index_labels[nearest] == target_labels[:, None]).sum(axis=1)
    expected_k = [own[target_labels == c].mean() if (target_labels == c).any() else INF for c in range(4)]
    numpy.testing.assert_allclose(adaptation.margins_k, expected_k, rtol=1e-6)
    assert store.epoch == 1 and adaptation.epoch == 2 and adaptation.adapting
    # prior: the soft-label mass per class (O: 25 one-hot spans + 0.1 + 0.2; PER 0.7 + 0.1;
    # LOC 0.2 + 0.7; ORG 0), add-one smoothed
    mass = numpy.array([25.3, 0.8, 0.9, 0.0]) + 1.0
    numpy.testing.assert_allclose(numpy.exp(adaptation.target_log_prior), mass / mass.sum(), rtol=1e-5)
    # margins: the mean score per hard label; O: (15 * -3 + 1.05 + 10 * 5 + 0.45) / 25
    numpy.testing.assert_allclose(adaptation.margins_p, [0.26, 1.25, -0.5, INF], rtol=1e-5)
    assert adaptation.index is not None and len(adaptation.index) > 0 and adaptation.margins_k is not None
    # anchors: the high O cluster, and the single PER and LOC spans (a class of one span
    # has nothing to tell apart)
    expected = numpy.zeros(store.q.shape[0], dtype=bool)
    expected[high] = True
    expected[[per, loc]] = True
    numpy.testing.assert_array_equal(store.anchor, expected)
    # the same as sklearn's two-component mixture on the min-max normalised O scores
    from sklearn.mixture import GaussianMixture

    x = store.scores[o_rows].astype(numpy.float64)
    x = ((x - x.min()) / (x.max() - x.min()))[:, None]
    gmm = GaussianMixture(n_components=2, random_state=1, reg_covar=1e-6).fit(x)
    posterior = gmm.predict_proba(x)[:, int(numpy.argmax(gmm.means_[:, 0]))]
    numpy.testing.assert_array_equal(store.anchor[o_rows], posterior > 0.5)
    assert record["epoch_completed"] == 1 and record["adapting_next"] is True
    assert set(record["classes"]) == set(CLASSES) and record["margins_global"]["ORG"] is None
    assert record["classes"]["O"] == {"spans": 25, "anchor_fraction": 0.4}
    assert record["class_mean_cosines"] == numpy.eye(4).tolist()
    import json

    lines = diag.read_text(encoding="utf8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["epoch_completed"] == 1


def _one_epoch(adaptation: ProgressiveAdaptation, store: SoftLabelStore, seed: int) -> Dict:
    """Feed every target doc once (random logits and vectors) and end the epoch."""
    rng = numpy.random.default_rng(seed)
    for doc in range(store.n_docs):
        rows = store.rows([doc])
        adaptation.after_step(
            rows, rng.normal(size=(rows.shape[0], 4)).astype(numpy.float32), unit(rng, rows.shape[0], 5),
            unit(rng, 3, 5), numpy.array([0, 1, 2]),
        )
    return adaptation.end_epoch(class_cosines=numpy.eye(4), classes=CLASSES)


def test_diagnostics_hold_this_runs_epochs_only(tmp_path: Path) -> None:
    """A new run in a folder replaces the old run's diagnostics; a run resumed from its
    saved state writes each epoch once."""
    import json

    diag = tmp_path / "diagnostics.jsonl"
    diag.write_text('{"epoch_completed": 1, "run": "old"}\n{"epoch_completed": 2, "run": "old"}\n', encoding="utf8")
    adaptation, store = small_adaptation(anchor_start=2, diagnostics_path=str(diag))
    _one_epoch(adaptation, store, 0)
    assert [json.loads(line)["epoch_completed"] for line in diag.read_text(encoding="utf8").splitlines()] == [1]
    adaptation.save(tmp_path / "state")
    _one_epoch(adaptation, store, 1)  # epoch 2, then the run is killed and resumed from epoch 1's state
    resumed = ProgressiveAdaptation(AdaptationSettings(knn_k=3, n_epochs=4, anchor_start=2, diagnostics_path=str(diag)))
    resumed.load(tmp_path / "state")
    _one_epoch(resumed, resumed.require_store(), 1)
    records = [json.loads(line) for line in diag.read_text(encoding="utf8").splitlines()]
    assert [r["epoch_completed"] for r in records] == [1, 2] and all("run" not in r for r in records)


def test_adaptation_save_load_round_trip(tmp_path: Path) -> None:
    adaptation, store = small_adaptation(anchor_start=2)
    _prepared(adaptation, store)
    adaptation.target_log_prior = numpy.log(numpy.array([0.7, 0.1, 0.1, 0.1], dtype=numpy.float32))
    adaptation.gold = {0: [(0, 2, 1)]}
    adaptation.history = [{"epoch_completed": 1}]
    adaptation.save(tmp_path / "adaptation")
    other = ProgressiveAdaptation(AdaptationSettings(knn_k=3, n_epochs=4))
    other.load(tmp_path / "adaptation")
    numpy.testing.assert_array_equal(other.store.q, store.q)
    numpy.testing.assert_array_equal(other.store.anchor, store.anchor)
    assert other.store.epoch == 1
    numpy.testing.assert_array_equal(other.margins_p, adaptation.margins_p)
    numpy.testing.assert_array_equal(other.margins_k, adaptation.margins_k)
    numpy.testing.assert_allclose(other.target_log_prior, adaptation.target_log_prior)
    numpy.testing.assert_array_equal(other.index.vectors, adaptation.index.vectors)
    numpy.testing.assert_array_equal(other.index.labels, adaptation.index.labels)
    assert other.gold == {0: [(0, 2, 1)]} and other.history == [{"epoch_completed": 1}]


def test_a_load_replaces_the_state_and_the_o_sampling_goes_on(tmp_path: Path) -> None:
    """A state saved before any epoch's end (no margins, no index) loaded into one that
    has them leaves none; the generator that samples O spans goes on where it was saved."""
    fresh, _ = small_adaptation(anchor_start=2)
    fresh.rng.random(7)  # some O spans sampled
    fresh.save(tmp_path / "early")
    trained, store = small_adaptation(anchor_start=2)
    _prepared(trained, store)
    assert trained.margins_p is not None and trained.index is not None
    trained.load(tmp_path / "early")
    assert trained.margins_p is None and trained.margins_k is None and trained.index is None
    assert trained.rng.random() == fresh.rng.random()
