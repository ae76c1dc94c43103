"""How the transformer runs: its precision and length-sorted sub-batches, chosen when a
pipeline is created or loaded, never saved with its weights.

`spacy_maral.encoder_runtime.v1` is an `[nlp] after_pipeline_creation` callback:

- `precision = "auto"` runs the encoder's forward (and, in training, its backward)
  under `torch.autocast("cpu", dtype=torch.bfloat16)` where the CPU multiplies
  bfloat16 natively (AVX512-BF16 or AMX, as torch reports), in fp32 elsewhere; on a GPU
  it changes nothing (spacy-transformers' own `mixed_precision` applies there).
  `"bf16"` asks for bfloat16 on the CPU anyway, `"fp32"` never uses it. The weights
  stay fp32 (autocast casts per operation), so what `to_disk` writes is unchanged, and
  the encoder's outputs are cast back to fp32 before anything else reads them: the span
  head and its float64 vMF numerics never run under autocast.
- `sort_by_length = true`: at prediction time the transformer's batch (its windows of
  every document of an `nlp.pipe` batch) is sorted by length and run in sub-batches of
  `bucket_rows` windows, each padded only to its own longest window, and put back in
  order: plain `nlp.pipe` in arrival order pays little for padding.

The settings wrap the forward of every spacy-transformers `TransformerModel` of the
pipeline (a thinc function, not torch state), so they hold however often the weights are
loaded, and a pipeline loaded with other settings (`spacy.load(path, config=...)`, or
`load_pipeline`) runs with those.
"""
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy
import torch
from spacy.language import Language

from spacy_maral.pipeline.folder import load_naming_the_damaged_file, naming_the_damaged_file
from spacy_maral.util import logger, registry

PRECISIONS = ("auto", "fp32", "bf16")


def native_bf16() -> bool:
    """Whether this machine's CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), as
    torch reports it."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve_precision(precision: str, on_gpu: bool = False) -> str:
    """The precision that runs: "fp32" or "bf16".

    precision (str): "auto", "fp32" or "bf16".
    on_gpu (bool): the encoder runs on a GPU (then only "fp32": spacy-transformers'
        mixed_precision setting governs the GPU).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if on_gpu:
        return "fp32"
    if precision == "auto":
        return "bf16" if native_bf16() else "fp32"
    if precision == "bf16" and not native_bf16():
        logger.warning("precision bf16 on a CPU without native bfloat16 (AVX512-BF16 or AMX): it runs, but slowly")
    return precision


@registry.callbacks("spacy_maral.encoder_runtime.v1")
def create_encoder_runtime(
    precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16
) -> Callable[[Language], Language]:
    """An `[nlp] after_pipeline_creation` callback: how the pipeline's transformers run.

    precision (str): "auto" (bfloat16 autocast where the CPU has native bfloat16, else
        fp32), "fp32" or "bf16".
    sort_by_length (bool): at prediction time, run each transformer batch in sub-batches
        of similar length (less padding).
    bucket_rows (int): transformer windows per sub-batch.
    """
    resolve_precision(precision)  # a bad value fails when the config is resolved
    if bucket_rows < 1:
        raise ValueError(f"bucket_rows must be at least 1, not {bucket_rows}")

    def apply(nlp: Language) -> Language:
        set_encoder_runtime(nlp, precision=precision, sort_by_length=sort_by_length, bucket_rows=bucket_rows)
        return nlp

    return apply


def runtime_config(precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16) -> Dict[str, Any]:
    """The config override that loads a pipeline with these settings:
    `spacy.load(path, config=runtime_config("fp32"))`."""
    return {"nlp": {"after_pipeline_creation": {
        "@callbacks": "spacy_maral.encoder_runtime.v1", "precision": precision,
        "sort_by_length": sort_by_length, "bucket_rows": bucket_rows,
    }}}


def load_pipeline(model: Union[str, Any], precision: str = "auto", **kwargs: Any) -> Language:
    """spacy.load with the encoder runtime of `precision` (any pipeline; one saved before
    the setting existed too).

    model (Union[str, Path]): a pipeline directory or an installed package name.
    precision (str): "auto", "fp32" or "bf16".
    kwargs: passed on to spacy.load.
    RAISES (DamagedPipelineError): a file of the pipeline folder can't be read; the
        message names it (spacy_maral.pipeline.folder).
    """
    config = kwargs.pop("config", {}) or {}
    merged = {**config, "nlp": {**config.get("nlp", {}), **runtime_config(precision)["nlp"]}}
    return load_naming_the_damaged_file(model, config=merged, **kwargs)


def set_encoder_runtime(nlp: Language, precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16) -> List[str]:
    """Give every spacy-transformers TransformerModel of the pipeline these settings.

    nlp (Language): the pipeline.
    precision (str): "auto", "fp32" or "bf16".
    sort_by_length (bool): length-sorted sub-batches at prediction time.
    bucket_rows (int): windows per sub-batch.
    RETURNS (List[str]): the pipes whose transformers got them.
    """
    from spacy_transformers.layers.transformer_model import TransformerModel

    resolve_precision(precision)
    settings = {"precision": precision, "sort_by_length": sort_by_length, "bucket_rows": bucket_rows}
    found = []
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is None:
            continue
        if type(pipe).__name__ == "Transformer":
            _name_damaged_weights(pipe, name)
        for node in model.walk():
            if isinstance(node, TransformerModel):
                _wrap_encoder_layer(node.layers[0], settings)
                found.append(name)
    return sorted(set(found))


def encoder_runtime_of(nlp: Language) -> Optional[Dict[str, Any]]:
    """The settings of the pipeline's first transformer, with the precision that runs
    ("fp32" or "bf16" under "running"), or None when it has none."""
    from spacy_transformers.layers.transformer_model import TransformerModel

    for _, pipe in nlp.pipeline:
        for node in getattr(getattr(pipe, "model", None), "walk", lambda: [])():
            if isinstance(node, TransformerModel):
                forward = node.layers[0]._func
                if not isinstance(forward, _EncoderForward):
                    return None
                settings = forward.settings
                return {**settings, "running": resolve_precision(settings["precision"], _on_gpu(node.layers[0]))}
    return None


class _FromDiskNamingTheFile:
    """A transformer pipe's from_disk that names the file it could not read (a truncated
    `transformer/model` otherwise says only "Unpack failed: incomplete input"), also under
    a plain spacy.load. A class, not a closure, so that the pipeline still pickles."""

    def __init__(self, pipe: Any, name: str) -> None:
        self.pipe = pipe
        self.name = name

    def __call__(self, path: Any, *, exclude: Any = tuple()) -> Any:
        with naming_the_damaged_file(Path(path).parent):  # the pipeline's folder
            return type(self.pipe).from_disk(self.pipe, path, exclude=exclude)


def _name_damaged_weights(pipe: Any, name: str) -> None:
    if not isinstance(pipe.__dict__.get("from_disk"), _FromDiskNamingTheFile):
        pipe.from_disk = _FromDiskNamingTheFile(pipe, name)


def _on_gpu(layer: Any) -> bool:
    try:
        return next(layer.shims[0]._model.parameters()).device.type != "cpu"
    except (StopIteration, AttributeError, IndexError):
        return False


class _EncoderForward:
    """The forward of spacy-transformers' inner HF layer under the runtime settings: the
    encoder's outputs as fp32, bfloat16 autocast when it runs, length-sorted sub-batches
    at prediction. A class, not a closure, so that the pipeline still pickles."""

    def __init__(self, inner: Callable, settings: Dict[str, Any]) -> None:
        self.inner = inner
        self.settings = dict(settings)

    def __call__(self, model: Any, wordpieces: Any, is_train: bool) -> Tuple[Any, Callable]:
        _ensure_fp32_outputs(model.shims[0]._model)
        state = self.settings
        bf16 = resolve_precision(state["precision"], _on_gpu(model)) == "bf16"
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            if not is_train and state["sort_by_length"] and len(wordpieces.strings) > state["bucket_rows"]:
                return _length_sorted_forward(self.inner, model, wordpieces, state["bucket_rows"])
            return self.inner(model, wordpieces, is_train)


def _wrap_encoder_layer(layer: Any, settings: Dict[str, Any]) -> None:
    """Wrap the forward of spacy-transformers' inner HF layer (once; later calls only
    change the settings)."""
    if isinstance(layer._func, _EncoderForward):
        layer._func.settings.update(settings)
    else:
        layer._func = _EncoderForward(layer._func, settings)


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
        return value.float()
    if isinstance(value, tuple):
        return tuple(_to_fp32(v) for v in value)
    return value


def _fp32_output_hook(module: torch.nn.Module, args: Any, output: Any) -> Any:  # a module-level function: it pickles
    """A forward hook: the encoder's floating outputs as fp32 (autocast leaves bfloat16)."""
    if hasattr(output, "keys"):  # a transformers ModelOutput (an OrderedDict)
        for key in list(output.keys()):
            output[key] = _to_fp32(output[key])
        return output
    return _to_fp32(output)


def _ensure_fp32_outputs(hf_model: torch.nn.Module) -> None:
    """Register the fp32-output hook on the HF model (a reload replaces the model, so the
    forward checks each time)."""
    if not getattr(hf_model, "_maral_fp32_outputs", False):
        hf_model.register_forward_hook(_fp32_output_hook)
        hf_model._maral_fp32_outputs = True


def _length_sorted_forward(inner: Callable, model: Any, wps: Any, bucket_rows: int) -> Tuple[Any, Callable]:
    """Prediction in sub-batches of windows of similar length, each padded to its own
    longest window; the outputs are put back in the batch's order, padded to its length."""
    from spacy_transformers.data_classes import WordpieceBatch

    xp_lengths = wps.attention_mask.sum(axis=1)
    lengths = numpy.asarray(xp_lengths.get() if hasattr(xp_lengths, "get") else xp_lengths).astype(int)
    order = numpy.argsort(lengths, kind="stable")
    full_length = wps.input_ids.shape[1]
    pieces: List[Tuple[numpy.ndarray, Any]] = []
    for start in range(0, order.shape[0], bucket_rows):
        rows = order[start : start + bucket_rows]
        width = max(int(lengths[rows].max()), 1)
        index = model.ops.asarray1i(rows)
        sub = WordpieceBatch(
            strings=[wps.strings[i] for i in rows.tolist()],
            input_ids=wps.input_ids[index, :width],
            attention_mask=wps.attention_mask[index, :width],
            lengths=[wps.lengths[i] for i in rows.tolist()],
            token_type_ids=wps.token_type_ids[index, :width] if wps.token_type_ids is not None else None,
        )
        output, _ = inner(model, sub, False)
        pieces.append((rows, output))
    first = pieces[0][1]
    n_rows = order.shape[0]
    merged = {}
    for key in first.keys():
        merged[key] = _merge([(rows, out[key]) for rows, out in pieces], n_rows, full_length)
    return type(first)(**merged), lambda d_output: []


def _merge(parts: List[Tuple[numpy.ndarray, Any]], n_rows: int, full_length: int) -> Any:
    """One output field of the sub-batches, in batch order (a tensor with rows first; a
    tuple of such tensors, e.g. hidden states, field by field)."""
    sample = parts[0][1]
    if isinstance(sample, tuple):
        return tuple(_merge([(rows, value[i]) for rows, value in parts], n_rows, full_length) for i in range(len(sample)))
    if not isinstance(sample, torch.Tensor):
        return sample
    shape = list(sample.shape)
    shape[0] = n_rows
    if sample.dim() == 3:  # (rows, length, width)
        shape[1] = full_length
    elif sample.dim() == 4:  # attentions: (rows, heads, length, length)
        shape[2] = shape[3] = full_length
    out = sample.new_zeros(shape)
    for rows, value in parts:
        index = torch.as_tensor(rows, dtype=torch.long, device=value.device)
        if value.dim() == 3:
            out[index, : value.shape[1]] = value
        elif value.dim() == 4:
            out[index, :, : value.shape[2], : value.shape[3]] = value
        else:
            out[index] = value
    return out
