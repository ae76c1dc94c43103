"""Words the encoder gave no subword: a transformer window cut at its maximum length (a
window of many long or rare words), or characters its tokenizer drops. Such a word has a
zero vector and is never part of an entity; nothing else would say so."""
from typing import Sequence

import numpy
from spacy.tokens import Doc

NO_SUBWORD_WARNING = (
    "maral_ner '%s': %d word(s) in this batch got no subword from the encoder and cannot be "
    "entities: a window of [components.transformer.model.get_spans] passed the encoder's maximum "
    "length (lower its window and stride), or its tokenizer drops their characters. "
    "Said once per component."
)


def words_without_subwords(docs: Sequence[Doc]) -> int:
    """How many non-space words of `docs` got no subword (after the transformer ran).

    docs (Sequence[Doc]): docs with `doc._.trf_data` (spacy-transformers); others count 0.
    RETURNS (int): the number of such words.
    """
    if not Doc.has_extension("trf_data"):
        return 0
    lost = 0
    for doc in docs:
        trf = doc._.trf_data
        if trf is None or not len(doc) or len(trf.align.lengths) != len(doc):
            continue
        lengths = trf.align.lengths
        lengths = lengths.get() if hasattr(lengths, "get") else numpy.asarray(lengths)
        empty = numpy.flatnonzero(lengths == 0)
        lost += sum(1 for i in empty.tolist() if not doc[i].is_space)
    return lost
