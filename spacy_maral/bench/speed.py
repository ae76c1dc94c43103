"""Inference speed: words per second of a pipeline, and of its transformer alone."""
import time
from contextlib import nullcontext
from typing import Dict, List, Optional, Sequence

from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.docbin import bare_copy


def words_per_second(
    nlp: Language, docs: Sequence[Doc], batch_size: int = 64, enable: Optional[List[str]] = None, warmup: int = 64
) -> Dict[str, float]:
    """Time nlp.pipe over copies of `docs` (their words; no annotation).

    nlp (Language): the pipeline.
    docs (Sequence[Doc]): the documents (e.g. the target test set).
    batch_size (int): nlp.pipe batch size.
    enable (Optional[List[str]]): run only these components (e.g. ["transformer"]).
    warmup (int): docs run once before timing (not counted).
    RETURNS (dict): words, seconds, words_per_second.
    """
    copies = [bare_copy(d, nlp.vocab) for d in docs]
    words = sum(len(d) for d in copies)
    with nlp.select_pipes(enable=enable) if enable else nullcontext():
        for _ in nlp.pipe([bare_copy(d, nlp.vocab) for d in docs[:warmup]], batch_size=batch_size):
            pass
        start = time.perf_counter()
        for _ in nlp.pipe(copies, batch_size=batch_size):
            pass
        seconds = time.perf_counter() - start
    return {"words": words, "seconds": round(seconds, 2), "words_per_second": round(words / seconds, 1)}
