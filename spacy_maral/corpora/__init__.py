"""Corpora: CoNLL-style and WikiANN files read into spaCy Docs (`conll`, with the tag
schemes in `tags` and the conversion report in `report`), written to `.spacy` and back
(`writer`), `.spacy` files read (`docbin`), target text in its formats (`target_text`),
and the spacing of prose from tokens (`detokenize`)."""
from spacy_maral.corpora.conll import FORMATS, detect_format, detect_scheme, read_conll
from spacy_maral.corpora.report import ConversionError, ConversionStats, CorpusCounts
from spacy_maral.corpora.tags import SCHEMES
from spacy_maral.corpora.writer import convert_file, docs_to_conll

__all__ = [
    "FORMATS", "SCHEMES", "ConversionError", "ConversionStats", "CorpusCounts", "convert_file",
    "detect_format", "detect_scheme", "docs_to_conll", "read_conll",
]
