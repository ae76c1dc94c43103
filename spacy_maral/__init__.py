"""spacy-maral: large-margin cross-lingual NER (MARAL) as a spaCy pipeline component.

Importing the package registers the `maral_ner` and `maral_mlm` factories and the registered functions;
spaCy also finds them through the package's entry points, without an import.
"""
from . import callbacks, loss, mlm, model, readers, student, tokenizer  # noqa: F401  (registrations)
from .about import __version__
from .component import MaralNER, make_maral_ner

__all__ = ["MaralNER", "make_maral_ner", "__version__"]
