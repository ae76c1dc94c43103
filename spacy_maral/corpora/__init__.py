"""Corpora: CoNLL-style and WikiANN files read into spaCy Docs (`conll`, with the tag
schemes in `tags` and the conversion report in `report`), written to `.spacy` and back
(`writer`), `.spacy` files read (`docbin`), target text in its formats (`target_text`,
its paths checked in `target_path`), and the spacing of prose from tokens (`detokenize`).

The names below are imported on first use, as the package's own: importing a module of
this package that needs no spaCy (`target_path`, `lines`, `report`) imports no spaCy,
so that commands can refuse a bad path at once.
"""
from importlib import import_module
from typing import Any

# name -> the module of this package that defines it
_EXPORTS = {
    "FORMATS": "conll", "detect_format": "conll", "detect_scheme": "conll", "read_conll": "conll",
    "ConversionError": "report", "ConversionStats": "report", "CorpusCounts": "report",
    "SCHEMES": "tags", "convert_file": "writer", "docs_to_conll": "writer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module on first use."""
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
