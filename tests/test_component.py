"""Tests of the maral_ner pipeline component on the tiny random encoder of conftest.py.

One pipeline is trained once per module (`trained`, about 100 updates, a few seconds) and
shared; tests that change a pipeline work on a copy loaded from its directory.
"""
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import numpy
import pytest
import spacy
import srsly
import torch
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry
from thinc.api import Adam, fix_random_seed

from helpers import (
    TRAIN_SENTENCES,
    assert_same_predictions,
    build_nlp,
    encoder_parameters,
    make_examples,
    predictions,
)
from spacy_maral.ml.span_ner import SpanScores, get_span_head
from spacy_maral.ml.spans import count_spans, enumerate_spans
from spacy_maral.pipeline.maral_ner import MaralNER, collapsed_class_pairs

NEW_FILTER = "spacy.prioritize_new_ents_filter.v1"
EXISTING_FILTER = "spacy.prioritize_existing_ents_filter.v1"

TEXTS = [text for text, _ in TRAIN_SENTENCES]
GOLD = [
    [(" ".join(text.split()[s:e]), label) for s, e, label in ents] for text, ents in TRAIN_SENTENCES
]


def ents_of(doc: Doc) -> List[Tuple[str, str]]:
    return [(ent.text, ent.label_) for ent in doc.ents]


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def initialized(tiny_encoder) -> Language:
    """An initialized, untrained pipeline (for label and cfg checks)."""
    nlp = build_nlp(tiny_encoder)
    fix_random_seed(0)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp


# -------------------------------------------------------------- labels, init


def test_initialize_without_labels_raises(tiny_nlp) -> None:
    examples = [Example(tiny_nlp.make_doc(t), tiny_nlp.make_doc(t)) for t in ["It rained .", "No names here ."]]
    for eg in examples:
        eg.reference.ents = []
    with pytest.raises(ValueError, match="has no labels"):
        tiny_nlp.initialize(lambda: examples)


def test_labels_and_class_counts_from_examples(initialized) -> None:
    ner = initialized.get_pipe("maral_ner")
    assert isinstance(ner, MaralNER)
    assert ner.labels == ("PER", "LOC", "ORG", "MISC")  # in order of appearance
    assert ner.classes == ("O", "PER", "LOC", "ORG", "MISC")
    assert ner.label_data == ["PER", "LOC", "ORG", "MISC"]
    cfg = ner.cfg
    total_spans = sum(count_spans(len(t.split()), ner.max_width) for t in TEXTS)
    assert sum(cfg["class_counts"]) == total_spans
    assert cfg["class_counts"][1:] == [3.0, 4.0, 3.0, 1.0]
    assert cfg["entities_total"] == 11 and cfg["entities_too_wide"] == 0
    assert cfg["nI"] == 32
    assert len(cfg["loss_state"]["weights"]) == 5
    head = get_span_head(ner.model)
    assert head.prev_mean.shape == (5, 16)


def test_add_label_after_initialize_raises(initialized) -> None:
    ner = initialized.get_pipe("maral_ner")
    assert ner.add_label("PER") == 0  # known label: a no-op, even after initialize
    with pytest.raises(ValueError, match="already initialized"):
        ner.add_label("DATE")
    assert ner.labels == ("PER", "LOC", "ORG", "MISC")


def test_add_label_validation(tiny_nlp) -> None:
    ner = tiny_nlp.get_pipe("maral_ner")
    assert ner.add_label("PER") == 1
    assert ner.add_label("PER") == 0
    with pytest.raises(ValueError, match="non-entity"):
        ner.add_label("O")
    with pytest.raises(ValueError, match="strings"):
        ner.add_label(3)  # type: ignore[arg-type]
    assert ner.labels == ("PER",)


def test_labels_from_initialize_config(tiny_encoder) -> None:
    nlp = build_nlp(tiny_encoder, {"initialize.components": {"maral_ner": {"labels": ["LOC", "PER"]}}})
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    assert nlp.get_pipe("maral_ner").labels == ("LOC", "PER")


def test_unknown_label_in_training_data_gives_clear_error(tiny_encoder) -> None:
    nlp = build_nlp(tiny_encoder, {"initialize.components": {"maral_ner": {"labels": ["PER", "LOC"]}}})
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    with pytest.raises(ValueError, match=r"'ORG'.*not among the component's labels"):
        nlp.update(examples, sgd=Adam(0.001))


def test_entities_wider_than_max_width_are_counted(tiny_encoder, caplog) -> None:
    tiny_nlp = build_nlp(tiny_encoder, {"components.maral_ner.model.max_width": 4})
    sentences = [
        ("the bank of the united states opened .", [(1, 6, "ORG")]),  # 5 tokens
        ("paris is in europe .", [(0, 1, "LOC"), (3, 4, "LOC")]),
        ("a b c d e f g", [(0, 7, "MISC"), ]),  # 7 tokens
        ("john smith works .", [(0, 2, "PER")]),
    ]
    examples = []
    for text, ents in sentences:
        words = text.split()
        ref = Doc(tiny_nlp.vocab, words=words)
        ref.ents = [Span(ref, s, e, label=label) for s, e, label in ents]
        examples.append(Example(Doc(tiny_nlp.vocab, words=words), ref))
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        tiny_nlp.initialize(lambda: examples)
    ner = tiny_nlp.get_pipe("maral_ner")
    assert ner.max_width == 4
    assert ner.cfg["entities_total"] == 5
    assert ner.cfg["entities_too_wide"] == 2
    assert any("wider than max_width=4" in r.getMessage() and "2 of 5" in r.getMessage() for r in caplog.records)
    # the wide ones are not in the class counts, nor are the spans inside them (training
    # masks those); every other enumerated span is counted once
    counts = dict(zip(ner.classes, ner.cfg["class_counts"]))
    assert counts["ORG"] == 0 and counts["MISC"] == 0 and counts["LOC"] == 2 and counts["PER"] == 1
    inside_wide = count_spans(5, 4) + count_spans(7, 4)
    assert sum(counts.values()) == sum(count_spans(len(t.split()), 4) for t, _ in sentences) - inside_wide
    # ... and the labels still include them (they stay in evaluation as misses)
    assert set(ner.labels) == {"ORG", "LOC", "MISC", "PER"}


def test_spans_inside_a_too_wide_entity_are_masked_not_trained_as_o(initialized) -> None:
    ner = initialized.get_pipe("maral_ner")
    assert ner.max_width == 5
    words = "yesterday the bank of the united states of america opened".split()
    ref = Doc(initialized.vocab, words=words)
    ref.ents = [Span(ref, 1, 9, "ORG")]  # 8 tokens: wider than max_width
    spans = enumerate_spans([len(words)], ner.max_width)
    scores = SpanScores(
        spans=spans, logits=numpy.zeros((len(spans), 5), "f"), vectors=numpy.zeros((len(spans), 16), "f"), lengths=[len(words)]
    )
    labels, mask = ner.gold_span_labels([Example(Doc(initialized.vocab, words=words), ref)], scores)
    for (_, s, e), label, m in zip(spans.tolist(), labels.tolist(), mask.tolist()):
        assert label == 0  # the entity itself is not enumerable, nothing else is an entity
        inside = 1 <= s and e <= 9
        assert m == (0.0 if inside else 1.0), (s, e)
    # spans crossing the entity's boundary stay O with full weight
    by_span = {(s, e): m for (_, s, e), m in zip(spans.tolist(), mask.tolist())}
    assert by_span[(0, 2)] == 1.0 and by_span[(8, 10)] == 1.0 and by_span[(0, 1)] == 1.0


def test_gold_span_labels_and_missing_annotation_mask(initialized) -> None:
    ner = initialized.get_pipe("maral_ner")
    words = "John Smith works for Google in London .".split()
    full = Doc(initialized.vocab, words=words)
    full.ents = [Span(full, 0, 2, "PER"), Span(full, 4, 5, "ORG")]
    partial = Doc(initialized.vocab, words=words)
    # only "John Smith" is annotated; all other tokens are missing (unknown), not O
    partial.set_ents([Span(partial, 0, 2, "PER")], default="missing")
    examples = [Example(Doc(initialized.vocab, words=words), full), Example(Doc(initialized.vocab, words=words), partial)]
    spans = enumerate_spans([len(words), len(words)], ner.max_width)
    scores = SpanScores(spans=spans, logits=numpy.zeros((len(spans), 5), "f"), vectors=numpy.zeros((len(spans), 16), "f"), lengths=[8, 8])
    labels, mask = ner.gold_span_labels(examples, scores)
    by_span = {(int(d), int(s), int(e)): (int(y), float(m)) for (d, s, e), y, m in zip(spans, labels, mask)}
    assert by_span[(0, 0, 2)] == (1, 1.0)  # PER
    assert by_span[(0, 4, 5)] == (3, 1.0)  # ORG
    assert by_span[(0, 6, 7)] == (0, 1.0)  # London is O in the full example
    assert sum(y != 0 for (d, _, _), (y, _) in by_span.items() if d == 0) == 2
    assert all(m == 1.0 for (d, _, _), (_, m) in by_span.items() if d == 0)
    assert by_span[(1, 0, 2)] == (1, 1.0)
    assert by_span[(1, 0, 1)] == (0, 1.0)
    # every span touching an unannotated token is masked out
    for (d, s, e), (_, m) in by_span.items():
        if d == 1:
            assert m == (1.0 if e <= 2 else 0.0), (s, e)


# -------------------------------------------------------------- training


def test_overfit_loss_falls(trained) -> None:
    losses = trained.losses
    assert all(numpy.isfinite(losses))
    first = losses[0]
    assert first > 0.0
    assert numpy.mean(losses[-5:]) < 0.5 * first
    assert numpy.mean(losses[-5:]) < 0.05


def test_overfit_predicts_training_sentences(trained) -> None:
    scores = trained.nlp.evaluate(trained.examples)
    assert scores["ents_f"] >= 0.9
    docs = list(trained.nlp.pipe(TEXTS))
    assert [ents_of(doc) for doc in docs] == GOLD


def test_predicted_spans_and_scores(trained) -> None:
    texts = TEXTS + ["Angela Merkel met John Smith in Berlin and Paris .", "paris BERLIN 2024 ..."]
    for doc in trained.nlp.pipe(texts):
        group = doc.spans["maral"]
        scores = group.attrs["scores"]
        assert len(scores) == len(group)
        assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in scores)
        # the doc had no entities before, so doc.ents are exactly the maral spans
        assert [(s.start, s.end, s.label_) for s in group] == [(e.start, e.end, e.label_) for e in doc.ents]
        covered = numpy.zeros(len(doc), dtype=int)
        for ent in doc.ents:
            assert 1 <= len(ent) <= 4
            assert ent.label_ in ("PER", "LOC", "ORG", "MISC")
            covered[ent.start : ent.end] += 1
        assert (covered <= 1).all()
        # entities win their argmax over O: probability at least 1 / n_classes
        assert all(p >= 1.0 / 5 for p in scores)
        # tokens outside entities are annotated O, not missing
        assert all(t.ent_iob_ in ("B", "I", "O") for t in doc)
    # each score is, at temperature 1, softmax(logits + inference_tau * log prior) of its
    # span's row at its label, computed here from the raw logits
    ner = trained.nlp.get_pipe("maral_ner")
    assert ner.score_map.temperature == 1.0
    checked = 0
    for text in texts:
        doc = trained.nlp(text)
        bare = list(trained.nlp.pipe([text], disable=["maral_ner"]))[0]
        raw = ner.predict([bare])
        logits = ner.model.ops.to_numpy(raw.logits).astype(numpy.float64)
        rows = {(int(st), int(en)): i for i, (_, st, en) in enumerate(ner.model.ops.to_numpy(raw.spans).tolist())}
        group = doc.spans["maral"]
        for span, score in zip(group, group.attrs["scores"]):
            z = logits[rows[(span.start, span.end)]] + ner.inference_tau * ner.loss.log_prior.astype(numpy.float64)
            expected = numpy.exp(z - z.max()) / numpy.exp(z - z.max()).sum()
            assert score == pytest.approx(expected[list(ner.classes).index(span.label_)], rel=1e-4)
            checked += 1
    assert checked > 0


def test_evaluate_returns_prf_and_per_type(trained) -> None:
    scores = trained.nlp.evaluate(trained.examples)
    for key in ("ents_p", "ents_r", "ents_f", "ents_per_type"):
        assert key in scores
    assert set(scores["ents_per_type"]) == {"PER", "LOC", "ORG", "MISC"}
    for value in scores["ents_per_type"].values():
        assert set(value) == {"p", "r", "f"}
    # the overfitted pipeline predicts exactly GOLD: all 1; one more gold entity on words
    # it leaves as O lowers the recall alone, to n / (n + 1)
    assert scores["ents_p"] == scores["ents_r"] == scores["ents_f"] == pytest.approx(1.0)
    n = sum(len(g) for g in GOLD)
    examples = [Example(eg.predicted, eg.reference.copy()) for eg in trained.examples]
    for eg in examples:
        reference = eg.reference
        outside = [i for i, t in enumerate(reference) if t.ent_iob_ == "O"]
        if outside:
            reference.ents = [*reference.ents, Span(reference, outside[-1], outside[-1] + 1, "MISC")]
            break
    more = trained.nlp.evaluate(examples)
    assert more["ents_p"] == pytest.approx(1.0) and more["ents_r"] == pytest.approx(n / (n + 1))
    assert more["ents_f"] == pytest.approx(2 * n / (2 * n + 1))


def test_evaluate_counts_unpredictable_wide_entities_as_misses(trained) -> None:
    nlp = trained.nlp
    words = "the bank of the united states of america opened .".split()  # the ORG has 7 tokens
    ref = Doc(nlp.vocab, words=words)
    ref.ents = [Span(ref, 1, 8, "ORG")]
    examples = [Example(Doc(nlp.vocab, words=words), ref)]
    scores = nlp.evaluate(examples)
    assert scores["ents_r"] == 0.0
    # the raw-text evaluation counts it as one unreachable gold entity: a miss
    from spacy_maral.evaluation.raw_text import evaluate_raw_text

    raw = evaluate_raw_text(nlp, [ref])  # max_width is the pipeline's own
    assert raw["fn"] == 1 and raw["tp"] == 0
    assert raw["unreachable"]["too_wide"] == 1 and raw["unreachable"]["recall_ceiling"] == 0.0


def test_training_reaches_the_encoder_through_the_listener(trained) -> None:
    after = encoder_parameters(trained.nlp)
    changed = [k for k, v in trained.encoder_before.items() if not torch.equal(v, after[k])]
    assert any("encoder.layer.0." in k for k in changed)
    assert any("encoder.layer.1." in k for k in changed)
    # the word embeddings are frozen by [initialize.after_init] (configure_encoder)
    assert "embeddings.word_embeddings.weight" not in changed
    assert not after["embeddings.word_embeddings.weight"].requires_grad


def test_class_state_after_training(trained, trained_dir, monkeypatch) -> None:
    ner = trained.nlp.get_pipe("maral_ner")
    head = get_span_head(ner.model)
    # end_epoch ran after the last update: running means restarted, previous means set
    assert float(head.cur_count.sum()) == 0.0
    mu, kappa = head.class_distributions()
    assert torch.allclose(mu.norm(dim=1), torch.ones(5, dtype=torch.float64))
    assert bool((kappa > 0).all())
    # every class mean has left its seeded random start (random directions of norm 0.9)
    generator = torch.Generator().manual_seed(int(ner.model.attrs["seed"]))
    start = torch.randn(5, head.prev_mean.shape[1], generator=generator, dtype=torch.float64)
    start = 0.9 * start / start.norm(dim=1, keepdim=True)
    assert bool(((head.prev_mean - start).norm(dim=1) > 0.1).all())

    # One more epoch of two updates on a copy: afterwards each class mean is the mean of
    # the span vectors z of that class's gold spans over the epoch, computed here from
    # the vectors of the forward passes.
    nlp = spacy.load(trained_dir)
    copy = nlp.get_pipe("maral_ner")
    examples = make_examples(nlp)
    assert all(t.ent_iob != 0 for eg in examples for t in eg.reference)  # every span is labelled
    vectors: List[numpy.ndarray] = []
    labels: List[numpy.ndarray] = []
    forward = copy.model._func

    def spy(model, docs, is_train):
        scores, backprop = forward(model, docs, is_train)
        if is_train:
            vectors.append(numpy.asarray(model.ops.to_numpy(scores.vectors), dtype=numpy.float64))
            gold = [{(e.start, e.end): copy.classes.index(e.label_) for e in eg.reference.ents} for eg in examples]
            labels.append(numpy.asarray([gold[int(d)].get((int(s), int(e)), 0) for d, s, e in scores.spans]))
        return scores, backprop

    monkeypatch.setattr(copy.model, "_func", spy)
    optimizer = Adam(0.003)
    for _ in range(2):
        nlp.update(examples, sgd=optimizer, drop=0.0)
    z, y = numpy.concatenate(vectors), numpy.concatenate(labels)
    assert len(vectors) == 2 and numpy.bincount(y, minlength=5)[1:].tolist() == [6, 8, 6, 2]
    copy.end_epoch()
    expected = numpy.stack([z[y == c].mean(axis=0) for c in range(5)])
    numpy.testing.assert_allclose(get_span_head(copy.model).prev_mean.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_update_with_empty_docs(initialized) -> None:
    nlp = initialized
    empty = Example(nlp.make_doc(""), nlp.make_doc(""))
    losses = nlp.update([empty], sgd=Adam(1e-6))
    assert losses.get("maral_ner", 0.0) == 0.0
    words = "Angela Merkel visited Paris".split()
    ref = Doc(nlp.vocab, words=words)
    ref.ents = [Span(ref, 0, 2, "PER")]
    losses = nlp.update([empty, Example(Doc(nlp.vocab, words=words), ref)], sgd=Adam(1e-6))
    assert numpy.isfinite(losses["maral_ner"]) and losses["maral_ner"] > 0


# ----------------------------------------------------------- serialisation


def test_to_disk_and_load_round_trip(trained, trained_dir) -> None:
    loaded = spacy.load(trained_dir)
    assert loaded.pipe_names == trained.nlp.pipe_names
    ner = loaded.get_pipe("maral_ner")
    assert ner.labels == trained.nlp.get_pipe("maral_ner").labels
    original_cfg = trained.nlp.get_pipe("maral_ner").cfg
    # srsly writes floats with 10 significant digits, so the float32 loss state is compared
    # after the float32 round trip (below), the rest exactly
    assert {k: v for k, v in ner.cfg.items() if k != "loss_state"} == {
        k: v for k, v in original_cfg.items() if k != "loss_state"
    }
    for key in ("log_prior", "weights"):
        numpy.testing.assert_allclose(ner.cfg["loss_state"][key], original_cfg["loss_state"][key], rtol=1e-9)
    texts = TEXTS + ["Maria Garcia visited Madrid and Berlin ."]
    assert_same_predictions(predictions(trained.nlp, texts), predictions(loaded, texts))
    # the class state (running means) is part of the saved model
    a = get_span_head(trained.nlp.get_pipe("maral_ner").model)
    b = get_span_head(ner.model)
    for name in ("prev_mean", "cur_sum", "cur_count"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # the loss state survives too
    numpy.testing.assert_array_equal(ner.loss.weights, trained.nlp.get_pipe("maral_ner").loss.weights)
    numpy.testing.assert_array_equal(ner.loss.log_prior, trained.nlp.get_pipe("maral_ner").loss.log_prior)


def test_to_bytes_from_bytes_round_trip(trained) -> None:
    data = trained.nlp.to_bytes()
    fresh = spacy.util.load_model_from_config(trained.nlp.config, auto_fill=False, validate=True)
    fresh.from_bytes(data)
    texts = TEXTS[:3]
    assert_same_predictions(predictions(trained.nlp, texts), predictions(fresh, texts))


def test_running_means_mid_epoch_are_saved(trained_dir, tmp_path) -> None:
    nlp = spacy.load(trained_dir)
    head = get_span_head(nlp.get_pipe("maral_ner").model)
    before = predictions(nlp, TEXTS[:2])
    rng = torch.Generator().manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(6, 16, generator=rng), dim=1)
    head.accumulate(vectors, torch.tensor([0, 1, 1, 2, 3, 4]))
    after = predictions(nlp, TEXTS[:2])
    assert before != after
    # component bytes
    again = spacy.load(trained_dir)
    again.get_pipe("maral_ner").from_bytes(nlp.get_pipe("maral_ner").to_bytes())
    assert_same_predictions(after, predictions(again, TEXTS[:2]))
    # and disk
    nlp.to_disk(tmp_path / "mid")
    assert_same_predictions(after, predictions(spacy.load(tmp_path / "mid"), TEXTS[:2]))
    assert float(get_span_head(spacy.load(tmp_path / "mid").get_pipe("maral_ner").model).cur_count.sum()) == 6.0


def _damaged_copy(trained_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "damaged"
    shutil.copytree(trained_dir, path)
    return path


def test_missing_model_file_gives_clear_error(trained_dir, tmp_path) -> None:
    path = _damaged_copy(trained_dir, tmp_path)
    (path / "maral_ner" / "model").unlink()
    with pytest.raises(ValueError, match="maral_ner/model is missing"):
        spacy.load(path)


def test_missing_cfg_file_gives_clear_error(trained_dir, tmp_path) -> None:
    path = _damaged_copy(trained_dir, tmp_path)
    (path / "maral_ner" / "cfg").unlink()
    with pytest.raises(ValueError, match="maral_ner/cfg is missing"):
        spacy.load(path)


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.99])
def test_truncated_model_file_gives_clear_error(trained_dir, tmp_path, keep: float) -> None:
    path = _damaged_copy(trained_dir, tmp_path)
    model_file = path / "maral_ner" / "model"
    data = model_file.read_bytes()
    model_file.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match=r"can't load .*maral_ner/model"):
        spacy.load(path)


def test_model_file_of_another_label_set_gives_clear_error(trained_dir, tmp_path) -> None:
    path = _damaged_copy(trained_dir, tmp_path)
    cfg = srsly.read_json(path / "maral_ner" / "cfg")
    cfg["labels"] = cfg["labels"][:-1]
    srsly.write_json(path / "maral_ner" / "cfg", cfg)
    with pytest.raises(ValueError, match=r"can't load .*maral_ner/model"):
        spacy.load(path)


def _cfg_labels(path: Path, labels: List[str]) -> None:
    cfg = srsly.read_json(path / "maral_ner" / "cfg")
    cfg["labels"] = labels
    srsly.write_json(path / "maral_ner" / "cfg", cfg)


@pytest.mark.parametrize("edit", ["reversed", "rotated", "swapped", "renamed"])
def test_cfg_labels_other_than_the_weights_are_refused(trained_dir, tmp_path, edit: str) -> None:
    """The weights record the labels they were trained with: a cfg that lists them in
    another order (or other names) would score every class as another, and is refused
    with both lists, from disk and from bytes."""
    labels = srsly.read_json(trained_dir / "maral_ner" / "cfg")["labels"]
    edited = {"reversed": labels[::-1], "rotated": labels[1:] + labels[:1],
              "swapped": [labels[1], labels[0], *labels[2:]], "renamed": labels[:-1] + ["OTHER"]}[edit]
    path = _damaged_copy(trained_dir, tmp_path)
    _cfg_labels(path, edited)
    message = re.escape(f"maral_ner/model: its weights were trained with the labels {labels} (in this order), but ")
    with pytest.raises(ValueError, match=message + ".*" + re.escape(f"maral_ner/cfg lists {edited}")):
        spacy.load(path)
    ner = spacy.load(trained_dir).get_pipe("maral_ner")
    msg = srsly.msgpack_loads(ner.to_bytes())
    msg["cfg"] = srsly.json_dumps({**srsly.json_loads(msg["cfg"]), "labels": edited})
    with pytest.raises(ValueError, match="weights were trained with the labels"):
        ner.from_bytes(srsly.msgpack_dumps(msg))


@pytest.mark.parametrize("labels", [["PER", "PER", "LOC", "ORG"], ["LOC", "MISC", "ORG", "PER", "LOC"], ["O", "LOC", "MISC", "ORG"]])
def test_repeated_labels_in_cfg_are_refused(trained_dir, tmp_path, labels: List[str]) -> None:
    path = _damaged_copy(trained_dir, tmp_path)
    _cfg_labels(path, labels)
    with pytest.raises(ValueError, match=r"maral_ner/cfg: the labels .* (repeat|include 'O')"):
        spacy.load(path)


def test_weights_that_record_no_labels_load_with_a_warning(trained_dir, tmp_path, caplog) -> None:
    """A pipeline saved before the weights recorded their labels still loads (and predicts
    as before); a warning says that the order can't be checked, and saving it records them."""
    path = _damaged_copy(trained_dir, tmp_path)
    model_file = path / "maral_ner" / "model"
    msg = srsly.msgpack_loads(model_file.read_bytes())
    recorded = srsly.msgpack_loads(msg["attrs"][0].pop("maral_classes"))  # thinc packs each attribute
    assert recorded == ["O", *srsly.read_json(path / "maral_ner" / "cfg")["labels"]]
    model_file.write_bytes(srsly.msgpack_dumps(msg))
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        nlp = spacy.load(path)
    assert "does not record the labels its weights were trained with" in caplog.text
    assert_same_predictions(predictions(nlp, TEXTS[:3]), predictions(spacy.load(trained_dir), TEXTS[:3]))
    nlp.to_disk(tmp_path / "again")
    again = srsly.msgpack_loads((tmp_path / "again" / "maral_ner" / "model").read_bytes())["attrs"][0]["maral_classes"]
    assert srsly.msgpack_loads(again) == recorded


# ------------------------------------------------------- multiprocessing


def test_pipe_two_processes_equals_single_process(trained) -> None:
    texts = TEXTS + ["", "Angela Merkel met Maria Garcia in Madrid ."]
    single = predictions(trained.nlp, texts)
    multi = []
    for doc in trained.nlp.pipe(texts, n_process=2, batch_size=2):
        group = doc.spans["maral"]
        multi.append(
            (
                [(e.start, e.end, e.label_) for e in doc.ents],
                [(s.start, s.end, s.label_) for s in group],
                list(group.attrs["scores"]),
            )
        )
    assert_same_predictions(single, multi)


# ---------------------------------------------- existing entities, filters


def _ruler_pipeline(source: Language) -> Language:
    nlp = spacy.blank("xx")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(
        [
            {"label": "FIRST", "pattern": "Angela"},  # overlaps maral's "Angela Merkel" PER
            {"label": "CITY", "pattern": "Paris"},  # same span as maral's "Paris" LOC
            {"label": "DAY", "pattern": "Monday"},  # maral finds nothing here
        ]
    )
    nlp.add_pipe("transformer", source=source)
    nlp.add_pipe("maral_ner", source=source)
    return nlp


SENTENCE = "Angela Merkel visited Paris on Monday ."
MARAL_SPANS = [("Angela Merkel", "PER"), ("Paris", "LOC")]


def test_prioritize_new_ents_filter(trained_dir) -> None:
    nlp = _ruler_pipeline(spacy.load(trained_dir))
    assert nlp.pipe_names == ["entity_ruler", "transformer", "maral_ner"]
    nlp.get_pipe("maral_ner").ents_filter = registry.misc.get(NEW_FILTER)()
    doc = nlp(SENTENCE)
    assert ents_of(doc) == [("Angela Merkel", "PER"), ("Paris", "LOC"), ("Monday", "DAY")]
    assert [(s.text, s.label_) for s in doc.spans["maral"]] == MARAL_SPANS


def test_prioritize_existing_ents_filter(trained_dir) -> None:
    nlp = _ruler_pipeline(spacy.load(trained_dir))
    nlp.get_pipe("maral_ner").ents_filter = registry.misc.get(EXISTING_FILTER)()
    doc = nlp(SENTENCE)
    assert ents_of(doc) == [("Angela", "FIRST"), ("Paris", "CITY"), ("Monday", "DAY")]
    # maral's own predictions stay available in doc.spans
    assert [(s.text, s.label_) for s in doc.spans["maral"]] == MARAL_SPANS
    assert len(doc.spans["maral"].attrs["scores"]) == 2


def test_ents_filter_from_config(trained_dir, tmp_path) -> None:
    combined = _ruler_pipeline(spacy.load(trained_dir))
    combined.to_disk(tmp_path / "combined")
    default = spacy.load(tmp_path / "combined")
    assert ents_of(default(SENTENCE)) == [("Angela Merkel", "PER"), ("Paris", "LOC"), ("Monday", "DAY")]
    existing = spacy.load(
        tmp_path / "combined", config={"components": {"maral_ner": {"ents_filter": {"@misc": EXISTING_FILTER}}}}
    )
    assert existing.config["components"]["maral_ner"]["ents_filter"] == {"@misc": EXISTING_FILTER}
    assert ents_of(existing(SENTENCE)) == [("Angela", "FIRST"), ("Paris", "CITY"), ("Monday", "DAY")]


def _german_pipeline() -> Language:
    nlp = spacy.blank("de")
    nlp.add_pipe("sentencizer")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "DAY", "pattern": "Monday"}, {"label": "CITY", "pattern": "Paris"}])
    return nlp


def _check_sourced(nlp: Language) -> None:
    assert nlp.pipe_names == ["sentencizer", "entity_ruler", "maral_ner"]
    # the listener was replaced by a transformer of its own: no upstream component needed
    assert "transformer" not in nlp.pipe_names
    doc = nlp(SENTENCE)
    assert [(s.text, s.label_) for s in doc.spans["maral"]] == MARAL_SPANS
    assert ents_of(doc) == [("Angela Merkel", "PER"), ("Paris", "LOC"), ("Monday", "DAY")]
    assert doc.has_annotation("SENT_START")


def test_source_into_another_pipeline_with_replace_listeners(trained_dir, tmp_path) -> None:
    """maral_ner sourced, with its own copy of the transformer, into a German pipeline
    that already has a sentencizer and rule-based entities (the Python API)."""
    source = spacy.load(trained_dir)
    source.replace_listeners("transformer", "maral_ner", ["model.tok2vec"])
    nlp = _german_pipeline()
    nlp.add_pipe("maral_ner", source=source)
    _check_sourced(nlp)
    # its copy's windows read its own encoder, not the source's transformer (kept alive otherwise)
    copied = next(node for node in nlp.get_pipe("maral_ner").model.walk() if node.name == "encoder_runtime")
    assert copied.encoder.attrs["get_spans"].encoder is copied.encoder is not source.get_pipe("transformer").model.encoder
    nlp.get_pipe("maral_ner").ents_filter = registry.misc.get(EXISTING_FILTER)()
    assert ents_of(nlp(SENTENCE)) == [("Angela Merkel", "PER"), ("Paris", "CITY"), ("Monday", "DAY")]
    nlp.to_disk(tmp_path / "german")
    # in a new process, where no transformer component ever registered Doc._.trf_data
    # (every call failed there: "Can't retrieve unregistered extension attribute 'trf_data'")
    fresh = subprocess.run([sys.executable, "-c", "import spacy, sys; nlp = spacy.load(sys.argv[1]); "
                            "print([(e.text, e.label_) for e in nlp(sys.argv[2]).ents])", str(tmp_path / "german"), SENTENCE],
                           capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0 and "('Angela Merkel', 'PER')" in fresh.stdout, fresh.stderr[-2000:]
    reloaded = spacy.load(tmp_path / "german")  # the filter of the saved config: prefer new
    assert ents_of(reloaded(SENTENCE)) == [("Angela Merkel", "PER"), ("Paris", "LOC"), ("Monday", "DAY")]
    chosen = spacy.load(tmp_path / "german", config={"components": {"maral_ner": {"ents_filter": {"@misc": EXISTING_FILTER}}}})
    assert ents_of(chosen(SENTENCE)) == [("Angela Merkel", "PER"), ("Paris", "CITY"), ("Monday", "DAY")]  # as docs say
    # its own transformer under the runtime, windows fitted (spacy_maral.Tok2VecEncoderRuntime.v1)
    assert reloaded.get_pipe_config("maral_ner")["model"]["tok2vec"]["@architectures"] == "spacy_maral.Tok2VecEncoderRuntime.v1"
    runtime = next(node for node in reloaded.get_pipe("maral_ner").model.walk() if node.name == "encoder_runtime")
    assert runtime.encoder.attrs["get_spans"].encoder is runtime.encoder


def test_source_with_replace_listeners_from_config(trained_dir) -> None:
    """The same through a config block: source + replace_listeners, as in spacy train.
    (spaCy sources from config only between pipelines of the same language - E150 - so
    this pipeline is multilingual `xx`; across languages use the Python API above.)"""
    base = spacy.blank("xx")
    base.add_pipe("sentencizer")
    base.add_pipe("entity_ruler")
    config = base.config
    config["components"]["maral_ner"] = {"source": str(trained_dir), "replace_listeners": ["model.tok2vec"]}
    config["nlp"]["pipeline"] = ["sentencizer", "entity_ruler", "maral_ner"]
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    nlp.get_pipe("entity_ruler").add_patterns([{"label": "DAY", "pattern": "Monday"}, {"label": "CITY", "pattern": "Paris"}])
    _check_sourced(nlp)


# ---------------------------------------------------- empty, whitespace


@pytest.mark.parametrize("text", ["", " ", "   \n\t ", "\n"])
def test_empty_and_whitespace_docs(trained, text: str) -> None:
    doc = trained.nlp(text)
    assert len(doc.spans["maral"]) == len(doc.spans["maral"].attrs["scores"])
    docs = list(trained.nlp.pipe([text, SENTENCE, text, "", text]))
    assert ents_of(docs[1]) == [("Angela Merkel", "PER"), ("Paris", "LOC")]
    for doc in docs:
        assert "maral" in doc.spans
        assert len(doc.spans["maral"]) == len(doc.spans["maral"].attrs["scores"])
    all_empty = list(trained.nlp.pipe(["", ""]))
    assert [len(d.ents) for d in all_empty] == [0, 0]


def test_whitespace_tokens_are_never_entities(trained) -> None:
    ner = trained.nlp.get_pipe("maral_ner")
    doc = trained.nlp.make_doc("Paris  Berlin \n")
    assert [t.is_space for t in doc] == [False, True, False, True]
    spans = enumerate_spans([len(doc)], ner.max_width)
    # every span looks like a LOC to the model
    logits = numpy.tile(numpy.array([[0.0, 0.0, 5.0, 0.0, 0.0]], dtype="f"), (len(spans), 1))
    scores = SpanScores(spans=spans, logits=logits, vectors=numpy.zeros((len(spans), 16), "f"), lengths=[len(doc)])
    ner.set_annotations([doc], scores)
    assert ents_of(doc) == [("Paris", "LOC"), ("Berlin", "LOC")]


def test_inference_tau_moves_mass_to_frequent_classes(trained) -> None:
    """inference_tau adds tau * log pi_src to the logits: O (the frequent class) gains."""
    ner = trained.nlp.get_pipe("maral_ner")
    docs = [trained.nlp(eg.reference.text) for eg in trained.examples]
    scores = ner.predict(docs)
    configured = ner.inference_tau
    try:
        ner.inference_tau = 0.0
        plain = ner.probabilities(scores)
        ner.inference_tau = 1.0
        adjusted = ner.probabilities(scores)
    finally:
        ner.inference_tau = configured
    logits = ner.model.ops.to_numpy(scores.logits)
    expected = numpy.exp(logits - logits.max(1, keepdims=True))
    numpy.testing.assert_allclose(plain, expected / expected.sum(1, keepdims=True), rtol=1e-5)
    shifted = logits + ner.loss.log_prior[None, :]
    expected = numpy.exp(shifted - shifted.max(1, keepdims=True))
    numpy.testing.assert_allclose(adjusted, expected / expected.sum(1, keepdims=True), rtol=1e-5)
    assert (adjusted[:, 0] >= plain[:, 0] - 1e-6).all()
    assert adjusted[:, 0].mean() > plain[:, 0].mean()


def test_collapsed_class_pairs_lists_merged_means_worst_first() -> None:
    cos = numpy.eye(4)
    cos[1, 2] = cos[2, 1] = 0.995
    cos[0, 3] = cos[3, 0] = 0.999
    cos[1, 3] = cos[3, 1] = 0.98  # close, but not merged
    assert collapsed_class_pairs(cos, ["O", "PER", "ORG", "LOC"]) == [("O", "LOC", 0.999), ("PER", "ORG", 0.995)]
    assert collapsed_class_pairs(numpy.eye(4), ["O", "PER", "ORG", "LOC"]) == []


def test_end_epoch_warns_when_class_means_collapse(tiny_encoder, caplog) -> None:
    """The failure the no-reweight benchmark student showed: every span vector the same."""
    nlp = build_nlp(tiny_encoder)
    nlp.initialize(lambda: make_examples(nlp))
    ner = nlp.get_pipe("maral_ner")
    head = get_span_head(ner.model)
    n_classes, dim = head.prev_mean.shape
    same = torch.nn.functional.normalize(torch.ones(1, dim, dtype=torch.float64), dim=1).repeat(n_classes, 1)
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        head.accumulate(same, torch.arange(n_classes))
        ner.end_epoch()
    assert "nearly identical" in caplog.text
    caplog.clear()
    # separated means (orthogonal directions) give no warning
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        head.accumulate(torch.eye(n_classes, dim, dtype=torch.float64), torch.arange(n_classes))
        ner.end_epoch()
    assert "nearly identical" not in caplog.text


def test_span_class_geometry_counts_gold_spans_and_is_a_cosine_matrix(trained) -> None:
    from spacy_maral.corpora.docbin import bare_copy
    from spacy_maral.evaluation.margins import span_class_geometry

    nlp = trained.nlp
    docs = [eg.reference for eg in make_examples(nlp)]
    geo = span_class_geometry(nlp, docs)
    ner = nlp.get_pipe("maral_ner")
    n_gold = {c: sum(1 for d in docs for e in d.ents if e.label_ == c and len(e) <= ner.max_width) for c in ner.classes[1:]}
    assert geo["spans"][1:] == [n_gold[c] for c in ner.classes[1:]]
    assert geo["spans"][0] == sum(count_spans(len(d), ner.max_width) for d in docs) - sum(n_gold.values())
    cos = numpy.asarray(geo["cosines"])
    assert numpy.allclose(cos, cos.T) and numpy.allclose(numpy.diag(cos), 1.0, atol=1e-3)
    assert all(0.0 < r <= 1.0 + 1e-9 for r in geo["resultant"])
    # the trained model separates the classes: no two class means coincide
    assert geo["min_angle_deg"] > 10.0
    # the same geometry from the span vectors and the gold entities, by hand, one doc at a time
    vectors, labels = [], []
    for doc in docs:
        bare = list(nlp.pipe([bare_copy(doc, nlp.vocab)], disable=["maral_ner"]))[0]
        scores = ner.predict([bare])
        vectors.append(ner.model.ops.to_numpy(scores.vectors).astype(numpy.float64))
        gold = {(e.start, e.end): list(ner.classes).index(e.label_) for e in doc.ents}
        labels += [gold.get((int(st), int(en)), 0) for _, st, en in ner.model.ops.to_numpy(scores.spans).tolist()]
    z, labels = numpy.concatenate(vectors), numpy.array(labels)
    means = numpy.stack([z[labels == c].mean(axis=0) for c in range(len(ner.classes))])
    resultant = numpy.linalg.norm(means, axis=1)
    directions = means / resultant[:, None]
    numpy.testing.assert_allclose(geo["resultant"], resultant, atol=1e-4)
    numpy.testing.assert_allclose(geo["cosines"], directions @ directions.T, atol=1e-3)


# ------------------------------------------------ loading again, initializing again
def test_a_load_replaces_what_an_earlier_load_left(trained_dir) -> None:
    """from_bytes into a calibrated component takes the stored cfg whole: no score map
    (and no format version) of the earlier state stays."""
    from spacy_maral.pipeline.decoding import ScoreMap

    ner = spacy.load(trained_dir).get_pipe("maral_ner")
    plain = ner.to_bytes()
    ner.score_map = ScoreMap(3.0, 2.0, -1.0)
    assert ner.cfg["format_version"] == 2
    ner.from_bytes(plain)
    assert ner.score_map == ScoreMap(1.0, 1.0, 0.0) and ner.cfg["format_version"] == 1


def test_a_stored_score_map_that_is_not_one_is_refused_naming_the_file(trained_dir, tmp_path) -> None:
    """A cfg with score_temperature 0 (or a string, or a NaN offset) loaded, then every
    nlp() call failed without naming the file; ScoreMap took NaN and inf."""
    from spacy_maral.pipeline.decoding import ScoreMap

    for bad in ((1.0, 1.0, float("nan")), (float("inf"), 1.0, 0.0), ("2", 1.0, 0.0), (1.0, True, 0.0), (0.0, 1.0, 0.0)):
        with pytest.raises(ValueError, match="the score (temperature|slope|offset) must be"):
            ScoreMap(*bad)
    assert ScoreMap(numpy.float32(2.0)).temperature == 2.0
    for key, value in (("score_temperature", 0), ("score_temperature", "x"), ("score_offset", None)):
        shutil.copytree(trained_dir, tmp_path / key / str(value))
        cfg_path = tmp_path / key / str(value) / "maral_ner" / "cfg"
        srsly.write_json(cfg_path, {**srsly.read_json(cfg_path), key: value})
        with pytest.raises(ValueError, match=f"{cfg_path}: the score .* must be .*; the pipeline directory is damaged"):
            spacy.load(tmp_path / key / str(value))


def test_the_configs_spans_key_is_the_one_written(trained_dir) -> None:
    nlp = spacy.load(trained_dir, config={"components": {"maral_ner": {"spans_key": "ents_scored"}}})
    doc = nlp("Angela Merkel visited Paris on Monday.")
    assert list(doc.spans) == ["ents_scored"]


def test_initialized_again_with_a_new_label_and_loaded_into_the_old_one(trained, trained_dir) -> None:
    """nlp.initialize on a trained pipe gives it new weights for the labels it has now
    (one more allowed); those bytes load into a component with the old labels, whose
    head is built again for them."""
    nlp = spacy.load(trained_dir)
    ner = nlp.get_pipe("maral_ner")
    before = get_span_head(ner.model)
    ner.initialize(lambda: trained.examples, nlp=nlp, labels=["EXTRA"])
    assert ner.labels[-1] == "EXTRA" and len(ner.labels) == len(trained.nlp.get_pipe("maral_ner").labels) + 1
    assert get_span_head(ner.model) is not before and get_span_head(ner.model).prev_mean.shape[0] == len(ner.classes)
    assert nlp("Angela Merkel visited Paris.").ents is not None
    old = spacy.load(trained_dir)
    old.get_pipe("maral_ner").from_bytes(ner.to_bytes())
    assert old.get_pipe("maral_ner").labels == ner.labels
    docs = [old(text) for text in ("Angela Merkel visited Paris.", "Berlin is in Germany.")]
    assert [[(e.text, e.label_) for e in doc.ents] for doc in docs] == [[(e.text, e.label_) for e in nlp(d.text).ents] for d in docs]


def test_a_negative_inference_tau_is_refused_by_the_config(trained_dir) -> None:
    with pytest.raises(ValueError, match="inference_tau must be a finite number >= 0, not -5"):
        spacy.load(trained_dir, config={"components": {"maral_ner": {"inference_tau": -5.0}}})


def test_predicting_without_the_transformer_it_listens_to_is_an_error(trained_dir) -> None:
    nlp = spacy.load(trained_dir)
    with nlp.select_pipes(disable=["transformer"]):
        with pytest.raises(ValueError, match="the transformer component it listens to did not run"):
            nlp("Angela Merkel visited Paris.")
        assert not nlp("").ents  # an empty doc needs no encoder


def test_an_uninitialized_component_round_trips_without_a_warning(tiny_encoder, caplog) -> None:
    """Nothing was trained, so nothing was 'saved by an older spacy-maral'."""
    nlp = build_nlp(tiny_encoder)
    data = nlp.get_pipe("maral_ner").to_bytes()
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        build_nlp(tiny_encoder).get_pipe("maral_ner").from_bytes(data)
    assert "older spacy-maral" not in caplog.text
