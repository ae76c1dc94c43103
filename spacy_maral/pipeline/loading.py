"""Loading a pipeline with its encoder at a precision: the config override that sets the
settings of each spacy_maral.EncoderRuntime.v1 (or Tok2VecEncoderRuntime.v1) block (or,
for a pipeline saved before that architecture, the legacy callback's), and what runs in
a loaded pipeline.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from spacy.language import Language

from spacy_maral.pipeline.encoder_runtime import ARCHITECTURE, LEGACY_CALLBACK, TOK2VEC_ARCHITECTURE, EncoderRuntime
from spacy_maral.pipeline.folder import load_naming_the_damaged_file, pipeline_config
from spacy_maral.pipeline.precision import check_settings
from spacy_maral.util import logger


def encoder_runtime_of(nlp: Language) -> Optional[Dict[str, Any]]:
    """The settings of the pipeline's first EncoderRuntime, with the precision that runs
    ("fp32", "bf16" or "int8") under "running", or None when it has none."""
    for _, pipe in nlp.pipeline:
        for node in getattr(getattr(pipe, "model", None), "walk", lambda: [])():
            if isinstance(node, EncoderRuntime):
                return {**node.settings, "running": node.running()}
    return None


def runtime_config(precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16,
                   component: str = "transformer") -> Dict[str, Any]:
    """The config override that loads a pipeline saved with spacy_maral.EncoderRuntime.v1
    with these settings: `spacy.load(path, config=runtime_config("fp32"))`."""
    return {"components": {component: {"model": {
        "precision": precision, "sort_by_length": sort_by_length, "bucket_rows": bucket_rows,
    }}}}


def load_pipeline(model: Union[str, Path], precision: Optional[str] = None, sort_by_length: Optional[bool] = None,
                  bucket_rows: Optional[int] = None, **kwargs: Any) -> Language:
    """spacy.load with the encoder at `precision`, set through the config: the settings of
    every spacy_maral.EncoderRuntime.v1 and Tok2VecEncoderRuntime.v1 block (a
    component's own copy after `nlp.replace_listeners` too), or for a pipeline saved
    before the architecture (a bare TransformerModel) the legacy callback's.

    model (Union[str, Path]): a pipeline directory or an installed package name.
    precision (Optional[str]): "auto", "fp32", "bf16" or "int8"; None keeps the saved setting.
    sort_by_length (Optional[bool]): length-sorted sub-batches; None keeps the saved setting.
    bucket_rows (Optional[int]): documents per sub-batch; None keeps the saved setting.
    kwargs: passed on to spacy.load.
    RAISES (DamagedPipelineError): a file of the pipeline folder can't be read; the
        message names it (spacy_maral.pipeline.folder).
    RAISES (ValueError): a setting that can't run. Settings asked of a pipeline saved
        without the runtime whose config has a callback of its own in the legacy one's
        place are not applied, with a warning.
    """
    settings = {"precision": precision, "sort_by_length": sort_by_length, "bucket_rows": bucket_rows}
    settings = {key: value for key, value in settings.items() if value is not None}
    check_settings(settings.get("precision", "auto"), settings.get("bucket_rows", 1))
    config = kwargs.pop("config", {}) or {}
    try:
        saved: Optional[Dict[str, Any]] = dict(pipeline_config(model))
    except OSError:  # no such pipeline: spacy.load's own error follows
        saved = None
    return load_naming_the_damaged_file(model, config=_merged(config, runtime_override(saved, settings, model)), **kwargs)


def runtime_blocks(node: Any, path: Tuple[str, ...] = ()) -> List[Tuple[str, ...]]:
    """Where a config (its dict) has an EncoderRuntime.v1 or Tok2VecEncoderRuntime.v1
    block: the key path of each, at any depth (components.transformer.model, or a
    component's own copy such as components.maral_ner.model.tok2vec)."""
    if not isinstance(node, dict):
        return []
    found = [path] if node.get("@architectures") in (ARCHITECTURE, TOK2VEC_ARCHITECTURE) else []
    for key, value in node.items():
        found += runtime_blocks(value, (*path, str(key)))
    return found


def runtime_override(saved: Optional[Dict[str, Any]], settings: Dict[str, Any], model: object = "the pipeline") -> Dict[str, Any]:
    """The config override that gives a saved config (its dict) these runtime settings.

    saved (Optional[Dict[str, Any]]): the pipeline's saved config.
    settings (Dict[str, Any]): the runtime settings to set (none: keep the saved ones).
    model (object): the pipeline, for the message.
    """
    blocks = runtime_blocks(saved or {})
    if blocks:
        override: Dict[str, Any] = {}
        if not settings:  # no override: an empty block would replace the saved one
            return override
        for path in blocks:
            node = override
            for key in path:
                node = node.setdefault(key, {})
            node.update(settings)
        return override
    callback = ((saved or {}).get("nlp", {}) or {}).get("after_pipeline_creation") or {}
    if callback.get("@callbacks") == LEGACY_CALLBACK:
        return {"nlp": {"after_pipeline_creation": dict(settings)}}
    if callback:  # a callback of the user's: never replaced
        if settings:
            logger.warning(
                "%s: its encoder has no %s block, and its config's [nlp.after_pipeline_creation] is %r, not %r, "
                "so %s can't be set: it runs as saved (save it again with the runtime in its config to choose them)",
                model, ARCHITECTURE, callback.get("@callbacks"), LEGACY_CALLBACK, settings,
            )
        return {}
    return {"nlp": {"after_pipeline_creation": {"@callbacks": LEGACY_CALLBACK, **settings}}}


def _merged(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
