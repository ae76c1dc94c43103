"""Reading the entity scores a pipeline stores: maral_ner keeps each predicted entity's
probability in `doc.spans[spans_key].attrs["scores"]`, one per span of that group.
Every reader of scores (evaluate, calibrate's report, predict, the displaCy page,
annotate, the Ray Data predictor) goes through these functions; a key given by the
user is checked against the keys the pipeline's components write (check_scores_key).
"""
from typing import Any, Dict, List, Optional, Tuple

from spacy.language import Language
from spacy.tokens import Doc


def scores_key(nlp: Language) -> Optional[str]:
    """The doc.spans key where the pipeline stores entity scores: the `spans_key` of its
    first maral_ner ("maral" by default), else of its first component that has a string
    one, or None. maral_ner comes first because other components keep unscored spans
    under a spans_key too (spaCy's span_ruler: "ruler").

    nlp (Language): the pipeline.
    """
    from spacy_maral.pipeline.maral_ner import MaralNER  # the component and its torch only when asked

    keyed = [p for _, p in nlp.pipeline if isinstance(getattr(p, "spans_key", None), str)]
    maral = [p for p in keyed if isinstance(p, MaralNER)]
    return (maral or keyed)[0].spans_key if keyed else None


def entity_scores(doc: Doc, key: Optional[str]) -> List[Optional[float]]:
    """The score of each of `doc.ents`, in their order: the probability of the span of
    `doc.spans[key]` with the same character offsets and label, or None for an entity
    that group does not score (another component's entity, or no key).

    doc (Doc): a processed Doc.
    key (Optional[str]): the doc.spans key whose group has attrs["scores"].
    """
    scored: Dict[Tuple[int, int, str], float] = {}
    if key and key in doc.spans:
        group = doc.spans[key]
        for span, score in zip(group, group.attrs.get("scores", [])):
            scored[(span.start_char, span.end_char, span.label_)] = float(score)
    return [scored.get((ent.start_char, ent.end_char, ent.label_)) for ent in doc.ents]


class ScoresKeyError(ValueError):
    """A scores key that no component of the pipeline writes (a usage error)."""


def written_span_keys(config: Any) -> List[str]:
    """The doc.spans keys the components of a pipeline's config write (their `spans_key`
    settings: maral_ner's, spancat's, span_ruler's...), in pipeline order; a disabled
    component writes none.

    config (Config): the pipeline's config (nlp.config, or pipeline.folder.pipeline_config).
    """
    try:
        config = config.interpolate()
    except Exception:  # a variable that does not resolve: read the values as written
        pass
    nlp = config.get("nlp", {})
    components = config.get("components", {})
    keys: List[str] = []
    for name in nlp.get("pipeline", []):
        key = components.get(name, {}).get("spans_key")
        if name not in nlp.get("disabled", []) and isinstance(key, str) and key not in keys:
            keys.append(key)
    return keys


def check_scores_key(config: Any, key: Optional[str], model: object = "the pipeline") -> None:
    """Raise unless `key` (given by the user; None: the pipeline's own) is a doc.spans key
    a component of the pipeline writes: a key no component writes would give every
    entity a null score.

    config (Config): the pipeline's config.
    key (Optional[str]): the key asked for.
    model (object): the pipeline, for the message.
    RAISES (ScoresKeyError): naming the key and the keys the pipeline writes.
    """
    if key is None:
        return
    keys = written_span_keys(config)
    if key not in keys:
        writes = f"it writes {', '.join(repr(k) for k in keys)}" if keys else "it writes no doc.spans key"
        raise ScoresKeyError(f"no component of {model} writes doc.spans[{key!r}] ({writes}), so every score would be null")
