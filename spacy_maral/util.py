"""Small shared helpers: the registry and logging."""
import logging

from spacy.util import registry  # noqa: F401  (re-exported for the package's modules)

logger = logging.getLogger("spacy_maral")
