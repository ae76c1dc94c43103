"""How a stage-2 target example is marked: the sentence's index in the soft-label store
in `doc.user_data` of its reference (and the tags it happened to carry, for the
diagnostics only)."""
from typing import Iterator, List, Protocol, Tuple, runtime_checkable

from spacy.language import Language
from spacy.training import Example

from spacy_maral.adaptation.soft_labels import DIAGNOSTIC_GOLD_KEY, TARGET_INDEX_KEY


def diagnostic_gold(example: Example, classes: List[str]) -> List[Tuple[int, int, int]]:
    """(start, end, class index) of the tags a target sentence happened to carry.

    For the adaptation diagnostics only; labels outside `classes` are left out.
    """
    tags = example.reference.user_data.get(DIAGNOSTIC_GOLD_KEY, [])
    return [(int(s), int(e), classes.index(label)) for s, e, label in tags if label in classes]


def is_target(example: Example) -> bool:
    """True for a target-language example made by target_example()."""
    return TARGET_INDEX_KEY in example.reference.user_data


def target_index(example: Example) -> int:
    return int(example.reference.user_data[TARGET_INDEX_KEY])


@runtime_checkable
class Stage2Corpus(Protocol):
    """What maral_ner's stage-2 initialize reads (spacy_maral.AdaptationCorpus.v1 is one)."""

    def source_examples(self, nlp: Language) -> Iterator[Example]:
        """Every source sentence once, tokenized as in training."""
        ...

    def target_examples(self, nlp: Language) -> Iterator[Example]:
        """Every pseudo-labelled target sentence once, indexed 0..n-1."""
        ...
