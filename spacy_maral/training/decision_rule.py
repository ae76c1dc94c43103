"""RATE: a pipeline's decision rule set for a target language without its tags.

maral_ner keeps a span as an entity by the rule s(z) + inference_tau * log pi_src
(docs/method.md): the larger inference_tau, the more the source language's skew towards
O holds, and the fewer entities are found. A student adapted to a language far from the
source can decide with a value at which it finds many more entities than its teacher's
pseudo-labels hold (on Finnish, 1.26x the teacher's; BENCHMARKS.md, "Finnish"), and
loses precision there.

RATE chooses inference_tau from a grid as the value at which the pipeline's entity count
on the pseudo-labelled target sentences is closest to the pseudo-labels' own count (the
smaller value on a tie). It reads the target text and the teachers' labels only: no
target tag.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc

# the values RATE chooses from: 0, 0.1, then 0.25 to 3 in steps of 0.25
GRID: Tuple[float, ...] = (0.0, 0.1) + tuple(0.25 * i for i in range(1, 13))


@dataclass
class DecisionRate:
    """What RATE counted and chose.

    sentences (int): the pseudo-labelled target sentences counted over.
    pseudo_label_entities (int): the entities of their pseudo-labels.
    entities (Dict[float, int]): the pipeline's entity count at each grid value.
    chosen (float): the grid value whose count is closest to pseudo_label_entities.
    """

    sentences: int
    pseudo_label_entities: int
    entities: Dict[float, int]
    chosen: float

    def to_dict(self) -> Dict[str, object]:
        return {"sentences": self.sentences, "pseudo_label_entities": self.pseudo_label_entities,
                "entities": {f"{tau:g}": n for tau, n in self.entities.items()}, "chosen_inference_tau": self.chosen}


def closest_count(entities: Dict[float, int], target: int) -> float:
    """The value whose entity count is closest to `target`; the smaller value on a tie.

    entities (Dict[float, int]): the entity count at each value of the grid.
    target (int): the count to match (the pseudo-labels' entities).
    """
    if not entities:
        raise ValueError("no grid values to choose from")
    return min(entities, key=lambda tau: (abs(entities[tau] - target), tau))


def entity_counts(
    nlp: Language,
    docs: Sequence[Doc],
    grid: Sequence[float] = GRID,
    batch_size: int = 64,
    progress: Optional[Callable[[int], None]] = None,
) -> Dict[float, int]:
    """The entities `nlp` keeps on `docs` at each inference_tau of `grid`: the encoder and
    span head run once a batch, the decision rule once a grid value. The pipeline's own
    inference_tau is left as it was.

    nlp (Language): a pipeline with a maral_ner component.
    docs (Sequence[Doc]): the target sentences, tokenized (their annotation is not read).
    grid (Sequence[float]): the inference_tau values.
    batch_size (int): sentences per batch.
    progress (Optional[Callable[[int], None]]): called with the number of sentences of
        each batch done.
    """
    from spacy_maral.corpora.docbin import bare_copy
    from spacy_maral.inference.batching import length_sorted_batches
    from spacy_maral.pipeline.decoding import decode_docs
    from spacy_maral.pipeline.maral_ner import find_maral_ner

    ner = find_maral_ner(nlp)
    stored = ner.inference_tau
    counts = {float(tau): 0 for tau in grid}
    try:
        for batch in length_sorted_batches(list(docs), batch_size):
            predicted = list(nlp.pipe([bare_copy(d, nlp.vocab) for d in batch], disable=[ner.name]))
            scores = ner.predict(predicted)
            for tau in counts:
                ner.inference_tau = tau
                counts[tau] += sum(len(kept) for kept in decode_docs(predicted, scores.spans, ner.probabilities(scores)))
            if progress is not None:
                progress(len(batch))
    finally:
        ner.inference_tau = stored
    return counts


def rate_inference_tau(
    nlp: Language,
    docs: Sequence[Doc],
    grid: Sequence[float] = GRID,
    batch_size: int = 64,
    progress: Optional[Callable[[int], None]] = None,
) -> DecisionRate:
    """RATE on pseudo-labelled target sentences (the shards of `pseudo-label`). The
    pipeline is not changed: set `find_maral_ner(nlp).inference_tau` to the choice.

    nlp (Language): a pipeline with a maral_ner component.
    docs (Sequence[Doc]): the pseudo-labelled sentences; a sentence without pseudo-labels
        counts as one with no entity.
    grid (Sequence[float]): the inference_tau values to choose from.
    batch_size (int): sentences per batch.
    progress (Optional[Callable[[int], None]]): as entity_counts.
    """
    from spacy_maral.adaptation.soft_labels import PSEUDO_KEY

    docs = [d for d in docs if len(d)]
    if not docs:
        raise ValueError("RATE needs pseudo-labelled target sentences; there are none")
    pseudo = sum(len(d.spans[PSEUDO_KEY]) for d in docs if PSEUDO_KEY in d.spans)
    counts = entity_counts(nlp, docs, grid=grid, batch_size=batch_size, progress=progress)
    return DecisionRate(len(docs), pseudo, counts, closest_count(counts, pseudo))
