"""The research tests use the product test suite's fixtures (tests/conftest.py): the tiny
offline encoder above all; and the scripts of benchmarks/scripts as modules."""
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks" / "scripts"))  # the scripts import each other, as run from there
_spec = importlib.util.spec_from_file_location("product_conftest", REPO / "tests" / "conftest.py")
_product = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_product)
tiny_encoder = _product.tiny_encoder
trained = _product.trained
trained_dir = _product.trained_dir


def _script(name: str):
    """benchmarks/scripts/NAME.py, loaded as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def seed_report():
    return _script("seed_report")


@pytest.fixture(scope="module")
def tables():
    return _script("tables")


@pytest.fixture(scope="module")
def seed_tables():
    return _script("seed_tables")


@pytest.fixture(scope="module")
def ensemble_dev():
    return _script("ensemble_dev")


@pytest.fixture(scope="module")
def plots():
    return _script("plots")


@pytest.fixture(scope="module")
def snapavg_screen():
    return _script("snapavg_screen")
