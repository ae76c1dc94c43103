"""Tests of the von Mises-Fisher numerics (spacy_maral.ml.vmf) against scipy.

log I_v(x) is checked against log(ive(v, x)) + x, scipy's exponentially scaled Bessel
function, which stays finite where I_v itself overflows.
"""
import math

import numpy
import pytest
import scipy.special
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spacy_maral.ml.vmf import (
    SERIES_MAX_ARG,
    bessel_ratio,
    kappa_from_resultant,
    log_iv,
    log_iv_raw,
    log_vmf_normalizer,
    vmf_contrastive_logits,
)

DIMS = (16, 64, 128)
XS = numpy.logspace(-3, 5, 241)


def ref_log_iv(v: float, x: numpy.ndarray) -> numpy.ndarray:
    with numpy.errstate(divide="ignore"):
        return numpy.log(scipy.special.ive(v, x)) + x


def ref_ratio(v: float, x: numpy.ndarray) -> numpy.ndarray:
    return scipy.special.ive(v + 1.0, x) / scipy.special.ive(v, x)


def rel_err(got: numpy.ndarray, ref: numpy.ndarray) -> numpy.ndarray:
    return numpy.abs(got - ref) / numpy.maximum(1.0, numpy.abs(ref))


def ref_log_normalizer(dim: int, kappa: numpy.ndarray) -> numpy.ndarray:
    v = dim / 2.0 - 1.0
    return v * numpy.log(kappa) - (dim / 2.0) * math.log(2.0 * math.pi) - ref_log_iv(v, kappa)


# ------------------------------------------------------------------- log I_v


@pytest.mark.parametrize("dim", DIMS)
def test_log_iv_raw_matches_scipy(dim: int) -> None:
    v = dim / 2.0 - 1.0
    # Both sides of the series/asymptotic switch, densely.
    x = numpy.concatenate([XS, numpy.linspace(SERIES_MAX_ARG - 1, SERIES_MAX_ARG + 1, 21)])
    ref = ref_log_iv(v, x)
    assert numpy.isfinite(ref).all()
    got = log_iv_raw(v, torch.tensor(x))
    assert got.dtype == torch.float64
    assert got.shape == (x.shape[0],)
    err = rel_err(got.numpy(), ref)
    assert err.max() < 1e-9, f"d={dim}: worst x={x[err.argmax()]}, rel err {err.max():.3g}"


@pytest.mark.parametrize("dim", DIMS)
def test_log_iv_matches_scipy_and_keeps_shape(dim: int) -> None:
    v = dim / 2.0 - 1.0
    x = XS[:240].reshape(8, 30)
    got = log_iv(v, torch.tensor(x))
    assert got.shape == (8, 30)
    assert rel_err(got.numpy(), ref_log_iv(v, x)).max() < 1e-9


@pytest.mark.parametrize("dim", DIMS)
def test_log_iv_gradient_is_bessel_ratio_plus_v_over_x(dim: int) -> None:
    v = dim / 2.0 - 1.0
    x = torch.tensor(XS, requires_grad=True)
    log_iv(v, x).sum().backward()
    expected = ref_ratio(v, XS) + v / XS
    numpy.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-8)


@pytest.mark.parametrize("dim", DIMS)
def test_log_iv_gradcheck_on_both_sides_of_the_switch(dim: int) -> None:
    v = dim / 2.0 - 1.0
    points = [0.5, 3.0, 20.0, SERIES_MAX_ARG - 0.5, SERIES_MAX_ARG + 0.5, 120.0, 3000.0]
    x = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: log_iv(v, t), (x,), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_log_iv_is_continuous_at_the_switch() -> None:
    for dim in DIMS:
        v = dim / 2.0 - 1.0
        below = log_iv_raw(v, torch.tensor([SERIES_MAX_ARG], dtype=torch.float64))
        above = log_iv_raw(v, torch.tensor([math.nextafter(SERIES_MAX_ARG, math.inf)], dtype=torch.float64))
        assert abs(float(above - below)) < 1e-9


def test_log_iv_accepts_float32_and_returns_float64() -> None:
    x32 = torch.tensor([0.01, 1.0, 30.0, 80.0, 5e4], dtype=torch.float32)
    out = log_iv_raw(31.0, x32)
    assert out.dtype == torch.float64
    ref = ref_log_iv(31.0, x32.numpy().astype(numpy.float64))
    assert rel_err(out.numpy(), ref).max() < 1e-9
    x = x32.clone().requires_grad_(True)
    y = log_iv(31.0, x)
    assert y.dtype == torch.float64
    y.sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32
    expected = ref_ratio(31.0, x32.numpy().astype(numpy.float64)) + 31.0 / x32.numpy().astype(numpy.float64)
    numpy.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def test_log_iv_handles_zero_and_huge_arguments() -> None:
    out = log_iv_raw(31.0, torch.tensor([0.0, 1e6], dtype=torch.float64))
    assert torch.isfinite(out).all()
    assert float(out[1]) == pytest.approx(float(ref_log_iv(31.0, numpy.array([1e6]))[0]), rel=1e-12)


@pytest.mark.parametrize("v", [0.0, 0.25, 0.49, -1.0])
def test_log_iv_rejects_orders_below_one_half(v: float) -> None:
    with pytest.raises(ValueError, match="v >= 0.5"):
        log_iv_raw(v, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="v >= 0.5"):
        log_iv(v, torch.tensor([1.0], dtype=torch.float64))


def test_order_one_half_is_accepted() -> None:
    # d = 3: I_{1/2}(x) = sqrt(2 / (pi x)) sinh(x)
    x = numpy.array([0.1, 1.0, 10.0, 60.0, 700.0])
    got = log_iv_raw(0.5, torch.tensor(x)).numpy()
    exact = 0.5 * numpy.log(2.0 / (numpy.pi * x)) + x + numpy.log1p(-numpy.exp(-2.0 * x)) - math.log(2.0)
    assert rel_err(got, exact).max() < 1e-9


def test_bessel_ratio_matches_scipy() -> None:
    for dim in DIMS:
        v = dim / 2.0 - 1.0
        got = bessel_ratio(v, torch.tensor(XS)).numpy()
        numpy.testing.assert_allclose(got, ref_ratio(v, XS), rtol=1e-9)
        assert ((got >= 0.0) & (got < 1.0)).all()


@settings(max_examples=150, deadline=None)
@given(
    dim=st.integers(min_value=3, max_value=512),
    log10_x=st.floats(min_value=-3.0, max_value=5.0, allow_nan=False),
)
def test_log_iv_property_scipy_and_recurrence(dim: int, log10_x: float) -> None:
    v = dim / 2.0 - 1.0
    x = 10.0**log10_x
    ref = float(ref_log_iv(v, numpy.array([x]))[0])
    assume(math.isfinite(ref))  # scipy underflows for very large v and tiny x
    xt = torch.tensor([x], dtype=torch.float64)
    got = float(log_iv_raw(v, xt)[0])
    assert abs(got - ref) / max(1.0, abs(ref)) < 1e-9
    # Recurrence I_{v-1}(x) = I_{v+1}(x) + (2v / x) I_v(x), in log space (v >= 1.5).
    if v >= 1.5:
        lo = float(log_iv_raw(v - 1.0, xt)[0])
        mid = float(log_iv_raw(v, xt)[0])
        hi = float(log_iv_raw(v + 1.0, xt)[0])
        rhs = numpy.logaddexp(hi, math.log(2.0 * v / x) + mid)
        assert abs(lo - rhs) / max(1.0, abs(lo)) < 1e-9
    # Bessel ratio lies in [0, 1) and within Amos' bounds.
    r = float(bessel_ratio(v, xt)[0])
    lower = x / (v + 1.0 + math.sqrt(x * x + (v + 1.0) ** 2))
    upper = x / (v + 0.5 + math.sqrt(x * x + (v + 0.5) ** 2))
    assert lower * (1 - 1e-9) <= r <= upper * (1 + 1e-9)
    assert r < 1.0


# ----------------------------------------------------------- vMF normaliser


@pytest.mark.parametrize("dim", DIMS)
def test_log_vmf_normalizer_matches_scipy(dim: int) -> None:
    kappa = numpy.logspace(-2, 5, 50)
    got = log_vmf_normalizer(dim, torch.tensor(kappa)).numpy()
    assert rel_err(got, ref_log_normalizer(dim, kappa)).max() < 1e-9


@pytest.mark.parametrize("dim", DIMS)
def test_log_vmf_normalizer_derivative_is_minus_bessel_ratio(dim: int) -> None:
    kappa_np = numpy.logspace(-2, 5, 60)
    kappa = torch.tensor(kappa_np, requires_grad=True)
    log_vmf_normalizer(dim, kappa).sum().backward()
    expected = -ref_ratio(dim / 2.0 - 1.0, kappa_np)
    numpy.testing.assert_allclose(kappa.grad.numpy(), expected, rtol=1e-8, atol=1e-12)


# ---------------------------------------------------- contrastive logits


def _random_unit(rng: numpy.random.Generator, n: int, d: int) -> numpy.ndarray:
    x = rng.standard_normal((n, d))
    return x / numpy.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("dim", [16, 64])
def test_vmf_contrastive_logits_match_direct_scipy_computation(dim: int) -> None:
    rng = numpy.random.default_rng(dim)
    n, n_classes, temperature = 7, 5, 0.07
    z = _random_unit(rng, n, dim)
    mu = _random_unit(rng, n_classes, dim)
    kappa = numpy.array([0.5, 3.0, 40.0, 900.0, 1e5])
    got = vmf_contrastive_logits(torch.tensor(z), torch.tensor(mu), torch.tensor(kappa), temperature)
    assert got.dtype == torch.float64 and got.shape == (n, n_classes)
    expected = numpy.empty((n, n_classes))
    for i in range(n):
        for c in range(n_classes):
            norm = numpy.linalg.norm(kappa[c] * mu[c] + z[i] / temperature)
            expected[i, c] = (
                ref_log_normalizer(dim, numpy.array([kappa[c]]))[0]
                - ref_log_normalizer(dim, numpy.array([norm]))[0]
            )
    numpy.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-8)


def test_vmf_contrastive_logits_float32_inputs_and_gradient() -> None:
    rng = numpy.random.default_rng(0)
    dim, temperature = 16, 0.07
    z = torch.tensor(_random_unit(rng, 4, dim), dtype=torch.float32, requires_grad=True)
    mu = torch.tensor(_random_unit(rng, 3, dim), dtype=torch.float32)
    kappa = torch.tensor([1.0, 50.0, 2000.0], dtype=torch.float32)
    logits = vmf_contrastive_logits(z, mu, kappa, temperature)
    assert logits.dtype == torch.float64
    logits.sum().backward()
    assert z.grad is not None and z.grad.dtype == torch.float32
    # d log C(k)/dk = -ratio(k), so d s_c / dz = +ratio(|k mu + z/T|) (k mu + z/T) / (|k mu + z/T| T)
    z64 = z.detach().double().numpy()
    centre = kappa.double().numpy()[:, None] * mu.double().numpy()
    v = dim / 2.0 - 1.0
    expected = numpy.zeros_like(z64)
    for c in range(3):
        vec = centre[c][None, :] + z64 / temperature
        norm = numpy.linalg.norm(vec, axis=1)
        expected += (ref_ratio(v, norm) / norm)[:, None] * vec / temperature
    numpy.testing.assert_allclose(z.grad.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_vmf_logit_prefers_the_class_the_span_points_at() -> None:
    rng = numpy.random.default_rng(1)
    dim = 64
    mu = _random_unit(rng, 4, dim)
    kappa = torch.full((4,), 100.0, dtype=torch.float64)
    logits = vmf_contrastive_logits(torch.tensor(mu), torch.tensor(mu), kappa, 0.07)
    assert (logits.argmax(dim=1).numpy() == numpy.arange(4)).all()


# --------------------------------------------------------------- kappa


def test_kappa_from_resultant_formula_and_clipping() -> None:
    dim = 64
    r = torch.tensor([0.0, 1e-9, 0.3, 0.5, 0.9, 0.999, 1.0, 1.5, -0.2], dtype=torch.float64)
    kappa = kappa_from_resultant(r, dim, max_kappa=1e5)
    assert kappa[0] == pytest.approx(1e-3)  # lower clip
    assert kappa[1] == pytest.approx(1e-3)
    for i, value in [(2, 0.3), (3, 0.5), (4, 0.9), (5, 0.999)]:
        assert float(kappa[i]) == pytest.approx(dim * value / (1 - value * value), rel=1e-9)
    assert float(kappa[6]) == 1e5  # R = 1 would divide by zero: clipped
    assert float(kappa[7]) == 1e5  # R > 1 is clamped to just below 1
    assert float(kappa[8]) == pytest.approx(1e-3)  # R < 0 is clamped to 0
    assert torch.isfinite(kappa).all()
    small = kappa_from_resultant(torch.tensor([0.999, 1.0]), dim, max_kappa=500.0)
    assert small.tolist() == [500.0, 500.0]
