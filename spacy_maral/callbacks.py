"""Registered callbacks for `spacy train`: encoder set-up and epoch boundaries."""
from typing import Any, Callable, Dict

from spacy.language import Language

from .util import logger, registry


def freeze_word_embeddings_of(nlp: Language) -> int:
    """Stop training the word-embedding matrix of every transformer in the pipeline.

    On a CPU most of an optimizer step goes to the dense gradient of the 250k-row
    embedding matrix; with requires_grad off, torch computes no gradient for it and
    thinc's optimizer skips it.

    nlp (Language): the pipeline, after initialize.
    RETURNS (int): number of embedding parameters frozen.
    """
    frozen = 0
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        transformer = getattr(model, "transformer", None) if model is not None else None
        if transformer is None or not hasattr(transformer, "get_input_embeddings"):
            continue
        weight = transformer.get_input_embeddings().weight
        weight.requires_grad_(False)
        frozen += weight.numel()
        logger.info("Froze the word embeddings of '%s' (%d parameters)", name, weight.numel())
    return frozen


@registry.callbacks("spacy_maral.configure_encoder.v1")
def configure_encoder(freeze_word_embeddings: bool = True) -> Callable[[Language], Language]:
    """An [initialize.after_init] callback that configures the transformer.

    freeze_word_embeddings (bool): freeze the word-embedding matrix (2-3x faster
        training steps on CPU; the paper trains it).
    """

    def after_init(nlp: Language) -> Language:
        if freeze_word_embeddings:
            n = freeze_word_embeddings_of(nlp)
            if n == 0:
                logger.warning("freeze_word_embeddings is on, but the pipeline has no transformer")
        return nlp

    return after_init





@registry.callbacks("spacy_maral.epoch_hook.v1")
def make_epoch_hook() -> Callable[[Language, Dict[str, Any]], None]:
    """A [training.before_update] callback that tells components when an epoch ends.

    Each pipe with an `end_epoch()` method (maral_ner) gets it called once when spaCy's
    training loop moves on to the next epoch; maral_ner rolls its class-mean estimators.
    """
    state = {"epoch": 0}

    def before_update(nlp: Language, info: Dict[str, Any]) -> None:
        epoch = int(info.get("epoch", 0))
        if epoch != state["epoch"]:
            state["epoch"] = epoch
            for _, pipe in nlp.pipeline:
                end_epoch = getattr(pipe, "end_epoch", None)
                if callable(end_epoch):
                    end_epoch()

    return before_update
