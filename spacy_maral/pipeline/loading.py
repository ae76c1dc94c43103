"""Loading a pipeline with its encoder at a precision: the config override that sets each
spacy_maral.EncoderRuntime.v1 component's runtime settings (or, for a pipeline saved
before that architecture, the legacy callback's), and what runs in a loaded pipeline.
"""
from pathlib import Path
from typing import Any, Dict, Optional, Union

from spacy.language import Language

from spacy_maral.pipeline.encoder_runtime import ARCHITECTURE, LEGACY_CALLBACK, EncoderRuntime
from spacy_maral.pipeline.folder import load_naming_the_damaged_file, pipeline_config
from spacy_maral.pipeline.precision import check_settings


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


def load_pipeline(model: Union[str, Path], precision: str = "auto", sort_by_length: Optional[bool] = None,
                  bucket_rows: Optional[int] = None, **kwargs: Any) -> Language:
    """spacy.load with the encoder at `precision`, set through the config: each
    spacy_maral.EncoderRuntime.v1 component's settings, or for a pipeline saved before the
    architecture (a bare TransformerModel) the legacy callback's.

    model (Union[str, Path]): a pipeline directory or an installed package name.
    precision (str): "auto", "fp32", "bf16" or "int8".
    sort_by_length (Optional[bool]): length-sorted sub-batches; None keeps the saved setting.
    bucket_rows (Optional[int]): documents per sub-batch; None keeps the saved setting.
    kwargs: passed on to spacy.load.
    RAISES (DamagedPipelineError): a file of the pipeline folder can't be read; the
        message names it (spacy_maral.pipeline.folder).
    """
    settings = {"precision": precision, "sort_by_length": sort_by_length, "bucket_rows": bucket_rows}
    settings = {key: value for key, value in settings.items() if value is not None}
    check_settings(precision, settings.get("bucket_rows", 1))
    config = kwargs.pop("config", {}) or {}
    try:
        saved: Optional[Dict[str, Any]] = dict(pipeline_config(model))
    except OSError:  # no such pipeline: spacy.load's own error follows
        saved = None
    return load_naming_the_damaged_file(model, config=_merged(config, runtime_override(saved, settings)), **kwargs)


def runtime_override(saved: Optional[Dict[str, Any]], settings: Dict[str, Any]) -> Dict[str, Any]:
    """The config override that gives a saved config (its dict) these runtime settings."""
    components = (saved or {}).get("components", {}) or {}
    names = [name for name, block in components.items()
             if isinstance(block, dict) and (block.get("model") or {}).get("@architectures") == ARCHITECTURE]
    if names:
        return {"components": {name: {"model": dict(settings)} for name in names}}
    callback = ((saved or {}).get("nlp", {}) or {}).get("after_pipeline_creation") or {}
    if callback.get("@callbacks") == LEGACY_CALLBACK:
        return {"nlp": {"after_pipeline_creation": dict(settings)}}
    return {"nlp": {"after_pipeline_creation": {"@callbacks": LEGACY_CALLBACK, **settings}}}


def _merged(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
