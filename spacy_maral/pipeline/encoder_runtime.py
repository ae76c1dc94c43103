"""How the transformer runs: its precision and length-sorted sub-batches, as a registered
architecture around spacy-transformers' TransformerModel, never saved with its weights.

`spacy_maral.EncoderRuntime.v1` is the `[components.transformer.model]` of the training
configs, with the TransformerModel as its sub-layer (`[components.transformer.model.encoder]`):

- `precision = "auto"` runs the encoder's forward (and so, in training, its backward) under
  `torch.autocast("cpu", dtype=torch.bfloat16)` where the CPU multiplies bfloat16 natively
  (AVX512-BF16 or AMX, as torch reports), in fp32 elsewhere; on a GPU it changes nothing
  (spacy-transformers' own `mixed_precision` applies there). `"bf16"` asks for bfloat16 on
  the CPU anyway, `"fp32"` never uses it. The weights stay fp32 (autocast casts per
  operation), and the encoder's outputs are cast back to fp32 before anything else reads
  them: the span head and its float64 vMF numerics never run under autocast.
  `"int8"` predicts with int8 matrix products on the CPU (pipeline.int8: per-channel weight
  scales, per-token activation scales, no calibration); what records a gradient (training)
  runs fp32. It is never chosen by "auto": it changes 3-4% of the entities.
- `sort_by_length = true`: at prediction time the documents of a transformer batch are run
  in length-sorted sub-batches of `bucket_rows` documents, each padded only to its own
  longest window, and merged back in order (pipeline.encoder_batches).
- `train_bucket_rows = N` (0: off): in training, the same in sub-batches of N documents,
  the gradient sent back to each (the same gradients, less work on padding).

The layer's forward calls the TransformerModel's own forward; it serializes as the
TransformerModel alone, so `transformer/model` is the file spacy-transformers writes, and
the settings live in the config only: `load_pipeline(path, precision=...)` or
`spacy.load(path, config=runtime_config(...))` chooses them at load time.
`spacy_maral.Tok2VecEncoderRuntime.v1` is the same around spacy-transformers'
Tok2VecTransformer (what `nlp.replace_listeners` gives maral_ner its own copy as).
"""
from contextlib import nullcontext
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from spacy.language import Language
from spacy.tokens import Doc
from spacy_transformers.data_classes import FullTransformerBatch
from spacy_transformers.layers import TransformerModel, split_trf_batch, trfs2arrays
from thinc.api import Model, chain

from spacy_maral.pipeline.encoder_batches import length_sorted
from spacy_maral.pipeline.int8 import to_int8
from spacy_maral.pipeline.precision import check_settings, resolve_precision
from spacy_maral.pipeline.subwords import EncoderWindows
from spacy_maral.util import logger, registry

ARCHITECTURE = "spacy_maral.EncoderRuntime.v1"
TOK2VEC_ARCHITECTURE = "spacy_maral.Tok2VecEncoderRuntime.v1"
LEGACY_CALLBACK = "spacy_maral.encoder_runtime.v1"
WINDOWS = "spacy_maral.encoder_windows.v1"


class EncoderRuntime(Model):
    """A thinc layer around a spacy-transformers TransformerModel (its one sub-layer): the
    inner forward under the precision chosen, length-sorted sub-batches at prediction. It
    answers `tokenizer` and `transformer` as the TransformerModel does, so the Transformer
    component and the package's code that reads them see no difference.

    encoder (TransformerModel): the wrapped model (its get_spans, if
        spacy_maral.encoder_windows.v1, reads its limit from it).
    precision (str): "auto", "fp32", "bf16" or "int8".
    sort_by_length (bool): length-sorted sub-batches at prediction.
    bucket_rows (int): documents per sub-batch at prediction.
    train_bucket_rows (int): documents per length-sorted sub-batch in training (0: the
        batch whole).
    """

    def __init__(
        self, encoder: Model, precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16,
        train_bucket_rows: int = 0,
    ) -> None:
        check_settings(precision, bucket_rows, train_bucket_rows)
        super().__init__(
            "encoder_runtime", _forward, init=_init, layers=[encoder], dims={"nO": None},
            attrs={"set_transformer": _set_transformer, "replace_listener": _replace_listener,
                   "replace_listener_cfg": _replace_listener_cfg},
        )
        # a plain attribute, not a thinc attr: attrs are saved with the weights, and the
        # settings come from the config only
        self.settings = {"precision": precision, "sort_by_length": bool(sort_by_length), "bucket_rows": int(bucket_rows),
                         "train_bucket_rows": int(train_bucket_rows)}
        get_spans = encoder.attrs.get("get_spans")
        if isinstance(get_spans, EncoderWindows):
            get_spans.bind(encoder)
        if encoder.has_dim("nO"):
            self.set_dim("nO", encoder.get_dim("nO"))

    @property
    def encoder(self) -> Model:
        """The wrapped TransformerModel."""
        return self.layers[0]

    @property
    def tokenizer(self) -> Any:
        return self.encoder.tokenizer

    @property
    def transformer(self) -> Any:
        return self.encoder.transformer

    @property
    def _init_tokenizer_config(self) -> Dict[str, Any]:  # read by the Transformer component (v1.0 conversion)
        return self.encoder._init_tokenizer_config

    @property
    def _init_transformer_config(self) -> Dict[str, Any]:
        return self.encoder._init_transformer_config

    def running(self) -> str:
        """The precision that runs now: "fp32", "bf16" or "int8"."""
        return resolve_precision(self.settings["precision"], _on_gpu(self.encoder))

    def copy(self) -> "EncoderRuntime":
        """A copy with its own encoder and its own window getter, bound to that encoder
        (spacy-transformers' copy shares the getter, which would keep the original
        encoder, and its weights, alive as long as the copy lives)."""
        encoder = self.encoder.copy()
        getter = encoder.attrs.get("get_spans")
        if isinstance(getter, EncoderWindows):
            encoder.attrs["get_spans"] = EncoderWindows(getter.window, getter.stride)
        return EncoderRuntime(encoder, **self.settings)

    # The layer adds nothing to what is saved: `transformer/model` is the TransformerModel's
    # own serialization (the same file with or without this layer, older pipelines too).
    def to_dict(self) -> Dict:
        return self.encoder.to_dict()

    def from_dict(self, msg: Dict) -> "EncoderRuntime":
        self.encoder.from_dict(msg)
        self._sync_width()
        return self

    def from_bytes(self, bytes_data: bytes) -> "EncoderRuntime":
        try:
            return super().from_bytes(bytes_data)
        except (ValueError, OSError, KeyError, EOFError) as err:
            raise ValueError(
                f"{err} (the encoder's weights: the pipeline's transformer/model is damaged or incomplete)"
            ) from err

    def _sync_width(self) -> None:
        if self.encoder.has_dim("nO") and self.encoder.get_dim("nO") is not None:
            self.set_dim("nO", self.encoder.get_dim("nO"), force=True)


@registry.architectures(ARCHITECTURE)
def build_encoder_runtime(
    encoder: Model[List[Doc], FullTransformerBatch], precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16,
    train_bucket_rows: int = 0,
) -> Model[List[Doc], FullTransformerBatch]:
    """spacy-transformers' TransformerModel (`encoder`) run at a chosen precision, with
    length-sorted sub-batches at prediction (EncoderRuntime).

    encoder (Model): spacy-transformers.TransformerModel.v3 (its get_spans, e.g.
        spacy_maral.encoder_windows.v1).
    precision (str): "auto" (bfloat16 autocast where the CPU has native bfloat16, else
        fp32), "fp32", "bf16" or "int8" (int8 matrix products at prediction, on the CPU;
        never chosen by "auto").
    sort_by_length (bool): at prediction time, run each batch in sub-batches of documents
        of similar length (less padding).
    bucket_rows (int): documents per sub-batch at prediction.
    train_bucket_rows (int): in training, run each batch in length-sorted sub-batches of
        this many documents, each padded to its own longest window (0: the batch whole).
        The gradients are the whole batch's; only the dropout masks are drawn per sub-batch.
    """
    return EncoderRuntime(encoder, precision=precision, sort_by_length=sort_by_length, bucket_rows=bucket_rows,
                          train_bucket_rows=train_bucket_rows)


@registry.architectures(TOK2VEC_ARCHITECTURE)
def build_tok2vec_encoder_runtime(
    encoder: Model, pooling: Model, grad_factor: float = 1.0, precision: str = "auto",
    sort_by_length: bool = True, bucket_rows: int = 16, train_bucket_rows: int = 0,
) -> Model:
    """A component's own transformer (as spacy-transformers.Tok2VecTransformer.v3) under
    the runtime: what `nlp.replace_listeners` puts in the place of a listener of a
    spacy_maral.EncoderRuntime.v1 transformer.

    encoder (Model): spacy-transformers.TransformerModel.v3.
    pooling (Model): wordpieces to one vector per token (e.g. spacy_maral.first_subword.v1).
    grad_factor (float): the gradient's weight into the encoder.
    precision, sort_by_length, bucket_rows, train_bucket_rows: as spacy_maral.EncoderRuntime.v1.
    """
    runtime = EncoderRuntime(encoder, precision=precision, sort_by_length=sort_by_length, bucket_rows=bucket_rows,
                             train_bucket_rows=train_bucket_rows)
    return chain(chain(runtime, split_trf_batch()), trfs2arrays(pooling, grad_factor))


def runtime_block(encoder: Dict[str, Any], precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16) -> Dict[str, Any]:
    """The config block of spacy_maral.EncoderRuntime.v1 around a TransformerModel block
    (an older pipeline's `[components.transformer.model]`); its strided windows become
    spacy_maral.encoder_windows.v1 with the same window and stride."""
    encoder = dict(encoder)
    spans = dict(encoder.get("get_spans") or {})
    if spans.get("@span_getters") == "spacy-transformers.strided_spans.v1":
        encoder["get_spans"] = {"@span_getters": WINDOWS, "window": spans["window"], "stride": spans["stride"]}
    return {"@architectures": ARCHITECTURE, "precision": precision, "sort_by_length": sort_by_length,
            "bucket_rows": bucket_rows, "encoder": encoder}


def _forward(model: EncoderRuntime, docs: List[Doc], is_train: bool) -> Tuple[FullTransformerBatch, Callable]:
    encoder = model.encoder
    settings = model.settings
    running = model.running()
    bf16 = running == "bf16"
    if running == "int8" and not is_train:
        to_int8(encoder.transformer)  # idempotent; the fp32 weights stay its parameters

    def run(batch: List[Doc]) -> Tuple[FullTransformerBatch, Callable]:
        output, backprop = encoder(batch, is_train)
        return (_fp32_outputs(output) if bf16 else output), backprop

    rows = settings["train_bucket_rows"] if is_train else (settings["bucket_rows"] if settings["sort_by_length"] else 0)
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
        if rows and len(docs) > rows:
            tokenizer = encoder.tokenizer
            pad = (getattr(tokenizer, "pad_token_id", None) or 0, getattr(tokenizer, "pad_token", None) or "")
            return length_sorted(run, docs, rows, tokenizer, *pad)
        return run(docs)


def _init(model: EncoderRuntime, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    model.encoder.initialize(X=X, Y=Y)
    model._sync_width()


def _set_transformer(model: EncoderRuntime, hf_model: Any) -> None:
    """attrs["set_transformer"], as on a TransformerModel (the Transformer component's
    conversion of a spacy-transformers v1.0 pipeline calls it)."""
    model.encoder.attrs["set_transformer"](model.encoder, hf_model)
    model._sync_width()


def _replace_listener(model: Model) -> Model:
    """attrs["replace_listener"]: the copy that takes a listener's place (as
    spacy-transformers does for a TransformerModel)."""
    return chain(model, split_trf_batch())


def _replace_listener_cfg(tok2vec_model_cfg: Dict[str, Any], listener_model_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """attrs["replace_listener_cfg"]: the config of the copy, spacy_maral.Tok2VecEncoderRuntime.v1."""
    block = dict(tok2vec_model_cfg)
    if block.get("@architectures") != ARCHITECTURE:  # an older pipeline's TransformerModel (legacy callback)
        block = runtime_block(block)
    if "TransformerListener" in str(listener_model_cfg.get("@architectures", "")):
        block["@architectures"] = TOK2VEC_ARCHITECTURE
        for key in ("pooling", "grad_factor"):
            if key in listener_model_cfg and key not in block:
                block[key] = listener_model_cfg[key]
    return block


def _on_gpu(encoder: Model) -> bool:
    transformer = getattr(encoder, "transformer", None)
    try:
        return next(transformer.parameters()).device.type != "cpu"  # type: ignore[union-attr]
    except (StopIteration, AttributeError):
        return False


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
        return value.float()
    if isinstance(value, tuple):
        return tuple(_to_fp32(v) for v in value)
    return value


def _fp32_outputs(output: FullTransformerBatch) -> FullTransformerBatch:
    """The encoder's floating outputs as fp32 (autocast leaves some bfloat16). In place: the
    TransformerModel's backprop reads the same ModelOutput, and `.float()` passes gradients."""
    model_output = output.model_output
    for key in list(model_output.keys()):
        model_output[key] = _to_fp32(model_output[key])
    return output


# ------------------------------------------------------------------------------------
# The compatibility path for pipelines saved before spacy_maral.EncoderRuntime.v1: their
# config gives [nlp.after_pipeline_creation] the callback spacy_maral.encoder_runtime.v1
# (precision, sort_by_length, bucket_rows) and the transformer component a bare
# TransformerModel with strided windows. The callback builds, through the registry, the
# block a current config has (runtime_block) from that component's own config, and gives it
# to the component as its `model` before the weights load: they load unchanged (the layer
# saves as the TransformerModel alone), and nothing private is touched. A transformer inside
# another component (maral_ner sourced with replace_listeners by an older version) keeps its
# model, whose saved weights have that structure: fp32 and strided windows, as configured.


@registry.callbacks(LEGACY_CALLBACK)
def create_encoder_runtime(
    precision: str = "auto", sort_by_length: bool = True, bucket_rows: int = 16
) -> Callable[[Language], Language]:
    """An `[nlp] after_pipeline_creation` callback, kept for pipelines saved before
    spacy_maral.EncoderRuntime.v1: their transformer gets that architecture with these
    settings, built from its own config.

    precision (str): "auto", "fp32", "bf16" or "int8".
    sort_by_length (bool): length-sorted sub-batches at prediction.
    bucket_rows (int): documents per sub-batch.
    """
    check_settings(precision, bucket_rows)  # a bad value fails when the config is resolved

    def apply(nlp: Language) -> Language:
        for name, pipe in nlp.pipeline:
            model = getattr(pipe, "model", None)
            if isinstance(model, EncoderRuntime):
                raise ValueError(
                    f"'{name}' already runs {ARCHITECTURE} (its config's [components.{name}.model]): set "
                    f"components.{name}.model.precision (load_pipeline(path, precision=...)) instead of the "
                    "after_pipeline_creation callback spacy_maral.encoder_runtime.v1"
                )
            if type(model) is not TransformerModel:
                continue
            block = runtime_block(dict(nlp.get_pipe_config(name)["model"]), precision, sort_by_length, bucket_rows)
            pipe.model = registry.resolve({"model": block}, validate=True)["model"]
            logger.info("'%s': an older pipeline's transformer runs under %s (precision %s)", name, ARCHITECTURE, precision)
        return nlp

    return apply
