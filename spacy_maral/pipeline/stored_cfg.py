"""maral_ner's stored cfg: its format version, the check that this version of
spacy-maral can read a cfg, and the check that the cfg's labels are the ones the stored
weights were trained with, with errors naming the files."""
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import srsly
from thinc.api import Model

from spacy_maral.ml.span_ner import CLASSES_ATTR
from spacy_maral.util import logger

# version of what to_disk/to_bytes write (cfg and model); bumped on incompatible changes.
# A cfg is written at the lowest version that holds it, so that older readers load what
# they can: 2 only where the score map has Platt's slope and offset, which a reader of
# version 1 would ignore without a word (format_version_for).
FORMAT_VERSION = 2
NON_ENTITY_LABEL = "O"


def initial_cfg(spans_key: str) -> Dict[str, Any]:
    """A new component's cfg, before initialize or a load: no labels, no weights."""
    return {"labels": [], "spans_key": spans_key, "loss_state": {}, "nI": None, "format_version": format_version_for(False)}


def checked_cfg(cfg: Dict[str, Any], where: object) -> Dict[str, Any]:
    """The stored cfg, if this version of spacy-maral can read it; a clear error if not.

    cfg (dict): the component's stored cfg.
    where (object): the file (or description) it came from, for the message.
    """
    if not isinstance(cfg, dict) or "labels" not in cfg:
        raise ValueError(f"{where}: not a maral_ner cfg (no 'labels'); the pipeline directory is damaged")
    version = cfg.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: saved in maral_ner format version {version!r}, but this spacy-maral reads "
            f"versions up to {FORMAT_VERSION}; upgrade spacy-maral to load this pipeline"
        )
    checked_labels(cfg["labels"], where)
    checked_score_map(cfg, where)
    return cfg


def checked_score_map(cfg: Dict[str, Any], where: object) -> None:
    """Raise ValueError naming `where` where the cfg's score map (score_temperature,
    score_slope, score_offset, set by `calibrate`) is not one: every prediction would
    fail on it, or report NaN scores.

    cfg (dict): the component's stored cfg.
    where (object): the file (or description) it came from, for the message.
    """
    from spacy_maral.pipeline.decoding import ScoreMap

    try:
        ScoreMap(*(cfg.get(key, default) for key, default in (("score_temperature", 1.0), ("score_slope", 1.0),
                                                               ("score_offset", 0.0))))
    except ValueError as err:
        raise ValueError(f"{where}: {err}; the pipeline directory is damaged (calibrate it again)") from err


def format_version_for(platt: bool) -> int:
    """The format version a cfg is written at: 2 with a Platt score map, else 1."""
    return 2 if platt else 1


def checked_labels(labels: Any, where: object) -> List[str]:
    """`labels` if they are distinct strings other than the non-entity class "O"; an
    error naming `where` and the labels if not (a repeated label would give two classes
    one name, and move every later class onto the weights of another)."""
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"{where}: 'labels' must be a list of strings, not {labels!r}")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"{where}: the labels {labels} repeat {repeated}; each label names one class of the weights")
    if NON_ENTITY_LABEL in labels:
        raise ValueError(f"{where}: the labels {labels} include {NON_ENTITY_LABEL!r}, the non-entity class, which is not a label")
    return labels


def read_cfg(path: Path, component: str) -> Dict[str, Any]:
    """The cfg stored at `path`, checked (checked_cfg); errors name the file.

    path (Path): the component's cfg file.
    component (str): the component's name, for messages.
    """
    try:
        cfg = srsly.read_json(path)
    except ValueError as err:
        raise ValueError(f"maral_ner '{component}': {path} is not valid JSON ({err}); the pipeline directory is damaged") from err
    return checked_cfg(cfg, path)


def stored_classes(model_bytes: bytes) -> Optional[List[str]]:
    """The classes (O first, then the labels, in the order of the class-indexed weights)
    recorded in a serialized SpanNER model (its root node's CLASSES_ATTR), or None when
    it records none (saved before the record existed) or the bytes are no thinc model."""
    try:
        value = srsly.msgpack_loads(model_bytes)["attrs"][0].get(CLASSES_ATTR)
        value = srsly.msgpack_loads(value) if isinstance(value, bytes) else value  # thinc packs each attr
    except Exception:  # damaged bytes (msgpack raises several kinds): thinc's own load names the file
        return None
    return list(value) if isinstance(value, (list, tuple)) else None


def readable_model(model_bytes: bytes) -> bool:
    """Whether the bytes decode as a thinc model's msgpack (else thinc's load names the file)."""
    try:
        return isinstance(srsly.msgpack_loads(model_bytes).get("attrs"), list)
    except Exception:  # msgpack raises several kinds on damaged bytes
        return False


def check_stored_classes(classes: Sequence[str], model_bytes: bytes, cfg_where: object, model_where: object, component: str) -> None:
    """Refuse a cfg whose labels are not the ones the stored weights were trained with,
    in the same order; warn when the weights record none (saved by an older spacy-maral:
    the order can't be checked).

    classes (Sequence[str]): the cfg's classes (O, then its labels).
    model_bytes (bytes): the serialized SpanNER model.
    cfg_where, model_where (object): the cfg and model files, for the messages.
    component (str): the component's name.
    """
    stored = stored_classes(model_bytes)
    if stored is None:
        if len(classes) <= 1:  # never initialized: no labels, no weights to check
            return
        if not readable_model(model_bytes):
            return  # damaged: the load of the weights fails and names the file
        logger.warning(
            "maral_ner '%s': %s does not record the labels its weights were trained with (saved by an "
            "older spacy-maral), so the order of the labels in %s can't be checked; saving the pipeline "
            "again (nlp.to_disk) records them.", component, model_where, cfg_where,
        )
        return
    if list(stored) != list(classes):
        raise ValueError(
            f"maral_ner '{component}': can't load {model_where}: its weights were trained with the labels "
            f"{list(stored[1:])} (in this order), but {cfg_where} lists {list(classes[1:])}; every label "
            "would score as another class. Restore the cfg's labels, or train a pipeline with these labels."
        )


def load_weights(model: Model, data: bytes, model_where: object, component: str) -> None:
    """Load a serialized SpanNER model into `model` (its labels checked before:
    check_stored_classes); errors name the file.

    model (Model): the component's SpanNER model (its head built: _restore_model).
    data (bytes): the model's bytes.
    model_where (object): the model file, for the message.
    component (str): the component's name.
    """
    try:
        model.from_bytes(data)
    except (ValueError, KeyError, RuntimeError) as err:  # torch: a tensor of another shape
        raise ValueError(f"maral_ner '{component}': can't load {model_where}: {err}") from err


def read_weights(path: Path, component: str) -> bytes:
    """The bytes of a component's model file; an error naming it when it can't be read.

    path (Path): the file.
    component (str): the component's name, for the message.
    """
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"maral_ner '{component}': can't load {path}: {err}") from err
