"""int8 prediction (pipeline.int8 and precision "int8" of the encoder runtime): the int8
numerics, fp32 wherever a gradient is recorded, and saved weights that never change."""
import logging

import numpy
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

from helpers import assert_nothing_patched, predictions
from spacy_maral.pipeline.int8 import MIN_ROWS, Int8Linear, int8_matmul, int8_supported, quantize_rows, to_int8
from spacy_maral.pipeline.loading import encoder_runtime_of, load_pipeline

TEXTS = [
    "John Smith works for Google in London .",
    "Maria Garcia met the Red Cross team in Paris and then flew back to Madrid with John Smith .",
    "Paris",
    "",
] * 3

pytestmark = pytest.mark.skipif(not int8_supported(), reason="this torch can't multiply int8 matrices on this CPU")


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 9), seed=st.integers(0, 2**31 - 1), spread=st.floats(1e-3, 1e3))
def test_each_row_is_its_int8_values_times_its_scale_within_half_a_step(rows, cols, seed, spread) -> None:
    x = torch.randn((rows, cols), generator=torch.Generator().manual_seed(seed)) * spread
    q, scale = quantize_rows(x)
    assert q.dtype == torch.int8 and scale.shape == (rows, 1)
    assert int(q.abs().max()) == 127  # the row's largest |x| takes the whole range
    assert torch.all((q.float() * scale - x).abs() <= scale / 2 * (1 + 1e-5))
    numpy.testing.assert_allclose(scale.squeeze(1).numpy(), x.abs().amax(dim=1).numpy() / 127, rtol=1e-6)


def test_a_row_of_zeros_stays_zeros() -> None:
    q, scale = quantize_rows(torch.zeros((2, 4)))
    assert not q.any() and torch.isfinite(scale).all()


def test_few_rows_give_what_int_mm_gives() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(-127, 128, (MIN_ROWS, 24), dtype=torch.int8, generator=gen)
    w = torch.randint(-127, 128, (24, 8), dtype=torch.int8, generator=gen)
    expected = q.long() @ w.long()
    assert torch.equal(int8_matmul(q, w).long(), expected)  # torch._int_mm
    assert torch.equal(int8_matmul(q[:3], w).long(), expected[:3])  # the float path of a small batch


def _linear(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(48, 20)


def test_int8_prediction_is_near_fp32_and_not_fp32() -> None:
    linear = _linear()
    x = torch.randn((40, 48))
    with torch.no_grad():
        expected = F.linear(x, linear.weight, linear.bias)
        got = Int8Linear(linear)(x)
    assert not torch.equal(got, expected)  # it did run in int8
    # each output's error: a few steps of the inputs' and the weights' int8 grids
    assert float((got - expected).abs().max()) < 0.02 * float(expected.abs().max())


def test_a_recorded_gradient_runs_the_fp32_weights_exactly() -> None:
    linear = _linear()
    int8 = Int8Linear(linear)
    x = torch.randn((40, 48), requires_grad=True)
    got = int8(x)
    assert torch.equal(got, F.linear(x, linear.weight, linear.bias))
    got.sum().backward()
    assert linear.weight.grad is not None and int8.weight is linear.weight  # the same Parameter trains


def test_the_int8_copy_follows_the_weights_when_they_change() -> None:
    linear = _linear()
    int8 = Int8Linear(linear)
    x = torch.randn((40, 48))
    with torch.no_grad():
        before = int8(x)
        linear.weight.mul_(2.0)  # in place (an optimizer's step)
        doubled = int8(x)
        linear.weight.data = linear.weight.data / 2.0  # a new tensor (thinc's optimizer)
        halved = int8(x)
    bias = linear.bias.detach()
    torch.testing.assert_close(doubled - bias, 2 * (before - bias), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(halved, before, rtol=1e-5, atol=1e-5)


def test_the_state_dict_is_the_fp32_modules() -> None:
    module = torch.nn.Sequential(_linear(), torch.nn.ReLU(), torch.nn.Sequential(_linear(1)))
    before = {k: v.clone() for k, v in module.state_dict().items()}
    assert to_int8(module) == 2 and to_int8(module) == 0  # idempotent
    with torch.no_grad():
        module[0](torch.randn((20, 48)))
    after = module.state_dict()
    assert set(after) == set(before)
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert all(isinstance(m, Int8Linear) for m in (module[0], module[2][0]))


def test_int8_pipeline_predicts_in_int8_and_agrees_with_fp32(trained_dir) -> None:
    fp32 = load_pipeline(trained_dir, precision="fp32")
    int8 = load_pipeline(trained_dir, precision="int8")
    assert encoder_runtime_of(int8)["running"] == "int8"
    expected, got = predictions(fp32, TEXTS), predictions(int8, TEXTS)
    hf_model = int8.get_pipe("transformer").model.transformer
    assert all(type(m) is not torch.nn.Linear for m in hf_model.modules())  # every Linear predicts in int8
    assert [x[0] for x in got] == [x[0] for x in expected]  # the same entities on the overfitted pipeline
    scores = numpy.concatenate([numpy.asarray(x[2]) for x in got])
    assert not numpy.array_equal(scores, numpy.concatenate([numpy.asarray(x[2]) for x in expected]))  # not fp32
    for (_, _, a), (_, _, b) in zip(expected, got):
        numpy.testing.assert_allclose(a, b, atol=0.05)
    assert_nothing_patched(int8)


def test_the_int8_probe_runs_once_per_process(monkeypatch) -> None:
    """The runtime asks on every forward; the tiny torch._int_mm probe runs the first time only."""
    int8_supported.cache_clear()
    calls = []
    real = torch._int_mm
    monkeypatch.setattr(torch, "_int_mm", lambda a, b: calls.append(1) or real(a, b))
    assert all(int8_supported() for _ in range(3))
    assert len(calls) == 1
    int8_supported.cache_clear()


def test_the_int8_slowdown_probe_times_the_int8_product_against_fp32(monkeypatch) -> None:
    """The probe sees an int8 product that is slow (a fallback kernel, here one made to
    sleep) and measures it once per process."""
    import time

    from spacy_maral.pipeline.int8 import int8_slowdown

    int8_slowdown.cache_clear()
    real, calls = torch._int_mm, []

    def slow(a, b):
        calls.append(1)
        time.sleep(0.02)
        return real(a, b)

    monkeypatch.setattr(torch, "_int_mm", slow)
    try:
        assert int8_slowdown() > 2.0 and int8_slowdown() > 2.0
        assert len(calls) == 3  # the probe's three runs, the first time only
    finally:
        int8_slowdown.cache_clear()


@pytest.mark.parametrize("slowdown,warned", [(40.0, True), (0.5, False)])
def test_int8_chosen_where_the_int8_product_is_slow_is_a_warning(monkeypatch, caplog, slowdown, warned) -> None:
    from spacy_maral.pipeline import precision

    monkeypatch.setattr(precision, "int8_slowdown", lambda: slowdown)
    precision._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        precision.check_settings("int8", 16)  # a config's resolution: no probe, no warning
        assert not caplog.records
        assert precision.resolve_precision("int8", on_gpu=True) == "fp32"  # a GPU runs fp32: no int8 warning
        assert not [r for r in caplog.records if "int8 matrix product takes" in r.getMessage()]
        assert precision.resolve_precision("int8") == "int8"
    messages = [r.getMessage() for r in caplog.records if "int8 matrix product takes" in r.getMessage()]
    assert bool(messages) is warned and (not warned or "40x the time of fp32's" in messages[0])
    precision._warn_once.cache_clear()
