"""Tests of the reweighted, logit-adjusted cross-entropy (spacy_maral.ml.loss, docs/method.md section 3)."""
import math
import re

import numpy
import pytest
import torch
import torch.nn.functional as F

from spacy_maral.ml.loss import (
    ReweightedVMFLoss,
    configure_reweighted_vmf_loss,
    inverse_log_weights,
    log_prior,
)
from spacy_maral.util import registry

CONLL_COUNTS = [1.0e6, 11128, 10059, 8297, 4593]


def torch_reference(loss: ReweightedVMFLoss, guesses, truths, mask=None, denominator=None):
    """The loss of docs/method.md section 3, in float64 torch, differentiated by autograd."""
    g = torch.tensor(guesses, dtype=torch.float64, requires_grad=True)
    n, n_classes = guesses.shape
    if truths.ndim == 1:
        target = F.one_hot(torch.tensor(truths, dtype=torch.int64), n_classes).double()
    else:
        target = torch.tensor(truths, dtype=torch.float64)
    hard = target.argmax(dim=1)
    w = torch.tensor(loss.weights, dtype=torch.float64)[hard]
    m = torch.ones(n, dtype=torch.float64) if mask is None else torch.tensor(mask, dtype=torch.float64)
    denom = denominator if denominator is not None else max(float(m.sum()), 1.0)
    adjusted = g + loss.tau * torch.tensor(loss.log_prior, dtype=torch.float64)[None, :]
    value = -(w * m * (target * torch.log_softmax(adjusted, dim=1)).sum(dim=1)).sum() / denom
    value.backward()
    return float(value.detach()), g.grad.numpy()


def _setup(tau=1.0, class_weights=True, counts=(500.0, 20.0, 12.0, 3.0)):
    loss = ReweightedVMFLoss(tau=tau, class_weights=class_weights)
    loss.set_counts(list(counts))
    return loss


def _data(seed=0, n=13, n_classes=4):
    rng = numpy.random.default_rng(seed)
    guesses = (3.0 * rng.standard_normal((n, n_classes))).astype(numpy.float32)
    hard = rng.integers(0, n_classes, size=n)
    soft = rng.dirichlet(numpy.ones(n_classes) * 0.5, size=n).astype(numpy.float32)
    mask = (rng.random(n) > 0.3).astype(numpy.float32)
    mask[0] = 1.0
    return guesses, hard, soft, mask


@pytest.mark.parametrize("tau", [0.0, 1.0, 0.1])
@pytest.mark.parametrize("class_weights", [True, False])
@pytest.mark.parametrize("targets", ["hard", "soft"])
@pytest.mark.parametrize("use_mask", [False, True])
def test_gradient_and_value_match_autograd(tau, class_weights, targets, use_mask) -> None:
    loss = _setup(tau, class_weights)
    guesses, hard, soft, mask = _data(seed=int(tau * 10) + 3 * class_weights)
    truths = hard if targets == "hard" else soft
    m = mask if use_mask else None
    grad, value = loss.get_grad_and_loss(guesses, truths, mask=m)
    ref_value, ref_grad = torch_reference(loss, guesses, truths, mask=m)
    assert grad.dtype == numpy.float32 and grad.shape == guesses.shape
    assert value == pytest.approx(ref_value, rel=1e-5, abs=1e-6)
    numpy.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-6)
    if use_mask:
        # masked spans get no gradient at all
        assert (grad[mask == 0] == 0).all()


@pytest.mark.parametrize("targets", ["hard", "soft"])
def test_gradient_matches_finite_differences(targets) -> None:
    loss = _setup(1.0, True)
    guesses, hard, soft, mask = _data(seed=7, n=6)
    guesses = guesses.astype(numpy.float64)
    truths = hard if targets == "hard" else soft
    grad, _ = loss.get_grad_and_loss(guesses.astype(numpy.float32), truths, mask=mask)
    eps = 1e-2
    numeric = numpy.zeros_like(guesses)
    for i in range(guesses.shape[0]):
        for c in range(guesses.shape[1]):
            plus, minus = guesses.copy(), guesses.copy()
            plus[i, c] += eps
            minus[i, c] -= eps
            lp = loss.get_grad_and_loss(plus.astype(numpy.float32), truths, mask=mask)[1]
            lm = loss.get_grad_and_loss(minus.astype(numpy.float32), truths, mask=mask)[1]
            numeric[i, c] = (lp - lm) / (2 * eps)
    numpy.testing.assert_allclose(grad, numeric, rtol=2e-3, atol=2e-4)


def test_explicit_denominator() -> None:
    loss = _setup()
    guesses, hard, _, mask = _data()
    grad, value = loss.get_grad_and_loss(guesses, hard, mask=mask, denominator=100.0)
    ref_value, ref_grad = torch_reference(loss, guesses, hard, mask=mask, denominator=100.0)
    assert value == pytest.approx(ref_value, rel=1e-5)
    numpy.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-7)


def test_all_masked_gives_zero_loss_and_gradient() -> None:
    loss = _setup()
    guesses, hard, _, _ = _data()
    grad, value = loss.get_grad_and_loss(guesses, hard, mask=numpy.zeros(len(hard), dtype=numpy.float32))
    assert value == 0.0
    assert (grad == 0).all()


@pytest.mark.parametrize("use_mask", [False, True])
def test_no_prior_no_weights_is_plain_mean_cross_entropy(use_mask) -> None:
    loss = _setup(tau=0.0, class_weights=False)
    guesses, hard, _, mask = _data(seed=11, n=20)
    _, value = loss.get_grad_and_loss(guesses, hard, mask=mask if use_mask else None)
    g = torch.tensor(guesses, dtype=torch.float64)
    y = torch.tensor(hard, dtype=torch.int64)
    if use_mask:
        keep = torch.tensor(mask > 0)
        expected = F.cross_entropy(g[keep], y[keep])
    else:
        expected = F.cross_entropy(g, y)
    assert value == pytest.approx(float(expected), rel=1e-5)
    assert (loss.weights == 1.0).all()


def test_call_get_grad_get_loss_agree() -> None:
    loss = _setup()
    guesses, hard, _, _ = _data()
    grad, value = loss(guesses, hard)
    numpy.testing.assert_array_equal(loss.get_grad(guesses, hard), grad)
    assert loss.get_loss(guesses, hard) == value


def test_prior_adjustment_penalises_frequent_class() -> None:
    # Equal logits: with the prior term the frequent class O already looks likely, so a
    # span labelled O costs less than a span labelled with the rare class.
    loss = _setup(tau=1.0, class_weights=False, counts=(1000.0, 10.0))
    guesses = numpy.zeros((1, 2), dtype=numpy.float32)
    _, loss_o = loss.get_grad_and_loss(guesses, numpy.array([0]))
    _, loss_rare = loss.get_grad_and_loss(guesses, numpy.array([1]))
    assert loss_o < 0.02 < 4.0 < loss_rare
    # in closed form, with add-one counts: -log(1001 / 1012) and -log(11 / 1012)
    assert loss_o == pytest.approx(math.log(1012 / 1001), rel=1e-5)
    assert loss_rare == pytest.approx(math.log(1012 / 11), rel=1e-5)


def test_set_counts_stores_the_prior_and_weights_by_hand() -> None:
    """Counts (500, 20, 12, 3): w_c = 1 / log(max(n_c, e)) over its mean, log pi_c =
    log((n_c + 1) / 539), in the order of the classes."""
    loss = _setup(counts=(500.0, 20.0, 12.0, 3.0))
    raw = [1 / math.log(500), 1 / math.log(20), 1 / math.log(12), 1 / math.log(3)]
    numpy.testing.assert_allclose(loss.weights, [r / (sum(raw) / 4) for r in raw], rtol=1e-5)
    numpy.testing.assert_allclose(loss.weights, [0.35612, 0.73876, 0.89063, 2.01449], rtol=1e-4)
    numpy.testing.assert_allclose(loss.log_prior, [math.log(n / 539) for n in (501, 21, 13, 4)], rtol=1e-5)
    unweighted = _setup(class_weights=False, counts=(500.0, 20.0, 12.0, 3.0))
    numpy.testing.assert_array_equal(unweighted.weights, numpy.ones(4))


def test_loss_value_of_one_span_by_hand() -> None:
    """Counts (3, 1), tau 1, class weights: logits (2, 0) for a span of class 1 cost
    w_1 * -log softmax((2 + log 4/6, 0 + log 2/6))[1], w = (1/log 3, 1/log e) over their mean."""
    loss = _setup(tau=1.0, class_weights=True, counts=(3.0, 1.0))
    a, b = 2.0 + math.log(4 / 6), math.log(2 / 6)
    w1 = 1.0 / ((1 / math.log(3) + 1.0) / 2)
    expected = w1 * -(b - math.log(math.exp(a) + math.exp(b)))
    grad, value = loss.get_grad_and_loss(numpy.array([[2.0, 0.0]], dtype=numpy.float32), numpy.array([1]))
    assert value == pytest.approx(expected, rel=1e-5)
    p1 = math.exp(b) / (math.exp(a) + math.exp(b))
    numpy.testing.assert_allclose(grad, [[w1 * (1 - p1), w1 * (p1 - 1)]], rtol=1e-5)


def test_inverse_log_weights_conll_like_counts() -> None:
    w = inverse_log_weights(CONLL_COUNTS)
    assert w.dtype == numpy.float32
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)
    assert int(w.argmin()) == 0
    assert float(w[0]) == pytest.approx(0.69, abs=0.015)
    assert ((w[1:] > 1.02) & (w[1:] < 1.16)).all()
    # rarer classes weigh more
    assert (numpy.diff(w[1:]) > 0).all()
    expected = 1.0 / numpy.log(CONLL_COUNTS)
    numpy.testing.assert_allclose(w, expected / expected.mean(), rtol=1e-6)


def test_inverse_log_weights_unseen_classes_stay_finite() -> None:
    w = inverse_log_weights([100.0, 1.0, 0.0, 2.0])
    assert numpy.isfinite(w).all()
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)
    assert w[1] == w[2] == w[3]  # n <= e all get the weight of n = e
    mean = (1 / math.log(100) + 3.0) / 4  # by hand: 1/log(100) and three times 1/log(e)
    numpy.testing.assert_allclose(w, [1 / math.log(100) / mean] + [1 / mean] * 3, rtol=1e-5)
    # a count between e and 3 is already above the floor
    w = inverse_log_weights([100.0, 2.8])
    mean = (1 / math.log(100) + 1 / math.log(2.8)) / 2
    numpy.testing.assert_allclose(w, [1 / math.log(100) / mean, 1 / math.log(2.8) / mean], rtol=1e-5)


def test_log_prior_is_normalised_and_smoothed() -> None:
    lp = log_prior([97.0, 2.0, 0.0])
    assert numpy.exp(lp).sum() == pytest.approx(1.0, rel=1e-6)
    assert numpy.isfinite(lp).all()
    numpy.testing.assert_allclose(numpy.exp(lp), numpy.array([98.0, 3.0, 1.0]) / 102.0, rtol=1e-6)


def test_error_before_set_counts() -> None:
    loss = ReweightedVMFLoss()
    guesses, hard, _, _ = _data()
    with pytest.raises(ValueError, match="set_counts"):
        loss.get_grad_and_loss(guesses, hard)
    with pytest.raises(ValueError, match="set_counts"):
        loss(guesses, hard)
    assert loss.to_cfg() == {}


def test_error_on_class_count_mismatch() -> None:
    loss = _setup(counts=(10.0, 1.0, 1.0))
    guesses, hard, _, _ = _data(n_classes=4)
    with pytest.raises(ValueError, match="3 classes"):
        loss.get_grad_and_loss(guesses, hard % 3)


def test_cfg_round_trip() -> None:
    loss = _setup(tau=0.5)
    other = ReweightedVMFLoss(tau=0.5)
    other.from_cfg(loss.to_cfg())
    guesses, hard, soft, mask = _data()
    a = loss.get_grad_and_loss(guesses, soft, mask=mask)
    b = other.get_grad_and_loss(guesses, soft, mask=mask)
    numpy.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]


def test_registered_factory() -> None:
    made = registry.misc.get("spacy_maral.ReweightedVMFLoss.v1")(tau=0.1, class_weights=False)
    assert isinstance(made, ReweightedVMFLoss)
    assert made.tau == 0.1 and made.class_weights is False
    assert configure_reweighted_vmf_loss().tau == 1.0


@pytest.mark.parametrize("setting,value,said", [
    ("temperature", 0.0, "temperature = 0.0 is out of range: it must be > 0 and finite"),
    ("temperature", -0.07, "temperature = -0.07 is out of range"),
    ("hidden_width", 0, "hidden_width = 0 is out of range: it must be >= 1"),
    ("max_width", -3, "max_width = -3 is out of range"),
    ("projection_dim", 0, "projection_dim = 0 is out of range: it must be >= 3"),
    ("dropout", 1.0, "dropout = 1.0 is out of range"),
])
def test_a_span_ner_setting_out_of_range_is_named(setting, value, said) -> None:
    """A temperature of 0 trained on NaN losses without a word; a width of 0 never
    predicted; a projection of 0 failed deep in scipy."""
    from spacy_maral.ml.span_ner import build_span_ner

    with pytest.raises(ValueError, match=re.escape(f"spacy_maral.SpanNER.v1: {said}")):
        build_span_ner(None, **{setting: value})


def test_a_negative_logit_adjustment_is_refused() -> None:
    from spacy_maral.ml.loss import configure_reweighted_vmf_loss

    configure_reweighted_vmf_loss(tau=0.0)
    for tau in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ReweightedVMFLoss.v1: tau = .* is out of range"):
            configure_reweighted_vmf_loss(tau=tau)
