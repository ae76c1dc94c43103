"""The research tests use the product test suite's fixtures (tests/conftest.py): the tiny
offline encoder above all."""
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tests"))
_spec = importlib.util.spec_from_file_location("product_conftest", REPO / "tests" / "conftest.py")
_product = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_product)
tiny_encoder = _product.tiny_encoder
