"""The span NER model: token vectors -> span vectors z on the unit sphere -> vMF logits.

Architecture `spacy_maral.SpanNER.v1` (docs/method.md, sections 1-2):

    docs -> tok2vec (a TransformerListener, first-subword pooling)
         -> every span of width 1..max_width
         -> [x_first_token ; x_last_token ; width embedding ; summed casing embedding]
         -> dropout -> Linear, GELU, dropout, Linear -> L2-normalise -> z (d = 64)
         -> s_c(z) = log C_d(kappa_c) - log C_d(|kappa_c mu_c + z/T|)

The class distributions (running means, hence mu and kappa) are torch buffers of the
head, so they are saved and loaded with the weights.
"""
import math
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import (
    ArgsKwargs,
    Config,
    Model,
    PyTorchGradScaler,
    PyTorchShim,
    PyTorchWrapper_v2,
    torch2xp,
    xp2torch,
)
from thinc.types import Floats2d

from spacy_maral.ml.spans import N_CASING, casing_lookup, casing_table, enumerate_spans, global_token_indices
from spacy_maral.ml.vmf import kappa_from_resultant, vmf_contrastive_logits
from spacy_maral.util import registry

# Spans scored at a time at prediction: the head's activations (span features, hidden
# layer, logits) are then O(PREDICT_CHUNK) whatever the length of a document; only the
# logits and vectors of every span, (n_spans, C + d), are kept. Training batches are
# sentences and run whole.
PREDICT_CHUNK = 16384

# the default [components.maral_ner.model] block
DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_maral.SpanNER.v1"
max_width = 5
hidden_width = 256
projection_dim = 64
width_embed_dim = 32
casing_embed_dim = 16
dropout = 0.2
temperature = 0.07
max_kappa = 100000.0

[model.tok2vec]
@architectures = "spacy-transformers.TransformerListener.v1"
grad_factor = 1.0
upstream = "*"

[model.tok2vec.pooling]
@layers = "spacy_maral.first_subword.v1"
"""
DEFAULT_MODEL = Config().from_str(DEFAULT_MODEL_CONFIG)["model"]


@dataclass
class SpanScores:
    """What SpanNER computes for a batch of docs.

    spans: int64 (n_spans, 3) array of (doc index, start, end exclusive).
    logits: (n_spans, C) vMF logits s(z); column 0 is the non-entity class O.
    vectors: (n_spans, d) unit span vectors z.
    lengths: tokens per doc.
    """

    spans: numpy.ndarray
    logits: Floats2d
    vectors: Floats2d
    lengths: List[int]


# The SpanHead buffers indexed by class on their first axis (mapped by class name when
# weights are copied between pipelines whose labels were added in other orders).
CLASS_INDEXED_BUFFERS = ("prev_mean", "cur_sum", "cur_count")
# The model attribute (saved with the weights by thinc's to_bytes) that records the
# classes, O first, in the order of those buffers: what the weights were trained with.
CLASSES_ATTR = "maral_classes"


class SpanHead(torch.nn.Module):
    """Torch module: span features -> unit vectors z -> vMF contrastive logits.

    n_in (int): width of the token vectors.
    n_classes (int): number of classes, O included (index 0).
    max_width (int): largest span width.
    hidden_width (int): width of the projection MLP's hidden layer.
    projection_dim (int): d, the dimension of z.
    width_embed_dim (int): width of the span-width embedding.
    casing_embed_dim (int): width of the casing embedding.
    dropout (float): dropout rate on the features and inside the MLP.
    temperature (float): contrastive temperature T.
    max_kappa (float): upper clip of the concentrations.
    seed (int): seed of the random initial class directions.
    """

    def __init__(
        self,
        n_in: int,
        n_classes: int,
        max_width: int,
        hidden_width: int,
        projection_dim: int,
        width_embed_dim: int,
        casing_embed_dim: int,
        dropout: float,
        temperature: float,
        max_kappa: float,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.dims = (n_in, n_classes)  # what the head was built for (build_head), not saved
        self.temperature = temperature
        self.max_kappa = max_kappa
        self.width_embed = torch.nn.Embedding(max_width + 1, width_embed_dim)
        self.casing_embed = torch.nn.Linear(N_CASING, casing_embed_dim, bias=False)
        self.dropout = torch.nn.Dropout(dropout)
        n_features = 2 * n_in + width_embed_dim + casing_embed_dim
        self.projection = torch.nn.Sequential(
            torch.nn.Linear(n_features, hidden_width),
            torch.nn.GELU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden_width, projection_dim),
        )
        generator = torch.Generator().manual_seed(seed)
        init = torch.randn(n_classes, projection_dim, generator=generator, dtype=torch.float64)
        init = 0.9 * init / init.norm(dim=1, keepdim=True)
        # The logits use the average of the previous epoch's mean and the current
        # epoch's running mean; the second estimator restarts every epoch.
        # (CLASS_INDEXED_BUFFERS: the state whose first axis is the class)
        self.register_buffer("prev_mean", init)
        self.register_buffer("cur_sum", torch.zeros(n_classes, projection_dim, dtype=torch.float64))
        self.register_buffer("cur_count", torch.zeros(n_classes, dtype=torch.float64))

    def set_dropout(self, rate: float) -> None:
        """Set the rate of every dropout layer of the head."""
        for module in self.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = rate

    def class_means(self) -> torch.Tensor:
        """(C, d) float64 mean resultant vectors A_c used for the logits.

        The average of the previous epoch's mean and the current epoch's running mean
        (the previous one alone for a class not seen yet this epoch). In the first
        epoch the "previous" means are the random initial directions, which keeps the
        classes apart while the span vectors are still undifferentiated.
        """
        seen = (self.cur_count > 0)[:, None]
        current = self.cur_sum / self.cur_count.clamp_min(1.0)[:, None]
        return torch.where(seen, 0.5 * (self.prev_mean + current), self.prev_mean)

    def class_distributions(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Mean directions mu (C, d) and concentrations kappa (C,), float64."""
        means = self.class_means()
        resultant = means.norm(dim=1)
        mu = means / resultant.clamp_min(1e-12)[:, None]
        kappa = kappa_from_resultant(resultant, means.shape[1], self.max_kappa)
        return mu, kappa

    @torch.no_grad()
    def accumulate(self, vectors: torch.Tensor, labels: torch.Tensor, weights: Optional[torch.Tensor] = None) -> None:
        """Add labelled span vectors to the current epoch's running means.

        vectors (torch.Tensor): (n, d) unit vectors z (detached).
        labels (torch.Tensor): (n,) class indices.
        weights (Optional[torch.Tensor]): (n,) 0/1 weights; spans with 0 are skipped.
        """
        v = vectors.to(self.cur_sum.dtype)
        w = torch.ones(v.shape[0], dtype=v.dtype, device=v.device) if weights is None else weights.to(v.dtype)
        self.cur_sum.index_add_(0, labels, v * w[:, None])
        self.cur_count.index_add_(0, labels, w)

    @torch.no_grad()
    def set_class_means(self, means: torch.Tensor) -> None:
        """Make `means` (C, d) the class means the logits use, restarting the running means
        (as at an epoch's end): e.g. the mean of several checkpoints' class means."""
        if tuple(means.shape) != tuple(self.prev_mean.shape):
            raise ValueError(f"class means of shape {tuple(means.shape)} given, {tuple(self.prev_mean.shape)} expected")
        self.prev_mean.copy_(means.to(self.prev_mean.dtype))
        self.cur_sum.zero_()
        self.cur_count.zero_()

    @torch.no_grad()
    def end_epoch(self) -> None:
        """Make this epoch's means the previous epoch's and restart the running means."""
        seen = self.cur_count > 0
        self.prev_mean[seen] = self.cur_sum[seen] / self.cur_count[seen][:, None]
        self.cur_sum.zero_()
        self.cur_count.zero_()

    def forward(
        self,
        tokens: torch.Tensor,
        first: torch.Tensor,
        last: torch.Tensor,
        widths: torch.Tensor,
        casing: torch.Tensor,
    ) -> torch.Tensor:
        """(n_spans, C + d): the logits, then the unit vectors z."""
        features = torch.cat(
            [tokens[first], tokens[last], self.width_embed(widths), self.casing_embed(casing)],
            dim=1,
        )
        z = torch.nn.functional.normalize(self.projection(self.dropout(features)).float(), dim=1)
        mu, kappa = self.class_distributions()
        logits = vmf_contrastive_logits(z, mu, kappa, self.temperature).to(z.dtype)
        return torch.cat([logits, z], dim=1)


def check_settings(name: str, settings: Sequence[Tuple[str, float, bool, str]]) -> None:
    """Raise ValueError naming the first setting of a registered function that is out of
    its range.

    name (str): the registered name, e.g. spacy_maral.SpanNER.v1.
    settings (Sequence[Tuple[str, float, bool, str]]): (setting, value, whether it is in
        range, the range in words).
    """
    for setting, value, ok, allowed in settings:
        if not ok:
            raise ValueError(f"{name}: {setting} = {value!r} is out of range: it must be {allowed}")


@registry.architectures("spacy_maral.SpanNER.v1")
def build_span_ner(
    tok2vec: Model[List[Doc], List[Floats2d]],
    max_width: int = 5,
    hidden_width: int = 256,
    projection_dim: int = 64,
    width_embed_dim: int = 32,
    casing_embed_dim: int = 16,
    dropout: float = 0.2,
    temperature: float = 0.07,
    max_kappa: float = 1e5,
    mixed_precision: bool = False,
    grad_scaler: Optional[PyTorchGradScaler] = None,
    seed: int = 0,
    nO: Optional[int] = None,
) -> Model[List[Doc], SpanScores]:
    """Span-based NER with von Mises-Fisher class distributions.

    tok2vec (Model[List[Doc], List[Floats2d]]): token vectors, usually a
        TransformerListener with first-subword pooling (spacy_maral.first_subword.v1;
        thinc's reduce_first.v1 works too, but fails on tokens without subwords). The span
        features use the rows of the span's first and last token.
    max_width (int): the largest span width in tokens; wider entities can't be found.
    hidden_width (int): hidden width of the projection MLP.
    projection_dim (int): d, the dimension of the unit span vectors z.
    width_embed_dim (int): width of the span-width embedding.
    casing_embed_dim (int): width of the casing embedding.
    dropout (float): dropout on the span features and in the MLP (spaCy's
        [training] dropout overrides it during training).
    temperature (float): contrastive temperature T of the vMF logits.
    max_kappa (float): upper clip of the class concentrations.
    mixed_precision (bool): run the head's linear layers in half precision (GPU).
    grad_scaler (Optional[PyTorchGradScaler]): gradient scaler for mixed precision.
    seed (int): seed of the initial class directions.
    nO (Optional[int]): number of classes including O; set by the component.
    RETURNS (Model[List[Doc], SpanScores]): the model.
    RAISES (ValueError): a setting out of its range, named (a temperature of 0 trained
        on NaN losses without a word; a width of 0 never predicted).
    """
    check_settings("spacy_maral.SpanNER.v1", (
        ("max_width", max_width, max_width >= 1, ">= 1"), ("hidden_width", hidden_width, hidden_width >= 1, ">= 1"),
        ("projection_dim", projection_dim, projection_dim >= 3, ">= 3 (the vMF normalizer's order d/2 - 1 >= 0.5)"),
        ("width_embed_dim", width_embed_dim, width_embed_dim >= 0, ">= 0"),
        ("casing_embed_dim", casing_embed_dim, casing_embed_dim >= 0, ">= 0"),
        ("dropout", dropout, 0 <= dropout < 1, "in [0, 1)"),
        ("temperature", temperature, 0 < temperature < math.inf, "> 0 and finite"),
        ("max_kappa", max_kappa, 0 < max_kappa < math.inf, "> 0 and finite"),
    ))
    return Model(
        "span_ner",
        forward,
        init=init,
        layers=[tok2vec],
        refs={"tok2vec": tok2vec},
        dims={"nO": nO, "nI": None},
        attrs={
            "max_width": max_width,
            "hidden_width": hidden_width,
            "projection_dim": projection_dim,
            "width_embed_dim": width_embed_dim,
            "casing_embed_dim": casing_embed_dim,
            "dropout": dropout,
            "temperature": temperature,
            "max_kappa": max_kappa,
            "mixed_precision": mixed_precision,
            "grad_scaler": grad_scaler,
            "seed": seed,
        },
    )


def init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[Any] = None) -> Model:
    """Initialise the tok2vec, infer the token width and build the torch head."""
    tok2vec = model.get_ref("tok2vec")
    tok2vec.initialize(X=X)
    if not model.has_dim("nI"):
        if X is None:
            raise ValueError("SpanNER needs sample docs at initialize to infer the token vector width")
        sample = tok2vec.predict(X[:1])
        model.set_dim("nI", int(sample[0].shape[1]))
    if not model.has_dim("nO"):
        raise ValueError("SpanNER needs nO (the number of classes, O included) before initialize")
    build_head(model)
    return model


def build_head(model: Model) -> None:
    """Create the torch head once nI and nO are known: idempotent while they stay what
    the head was built for, a new head in the old one's place when they changed (a
    component loaded again with other labels or another encoder width).

    Also used before deserialising, so the weights have a place to go.
    """
    dims = (model.get_dim("nI"), model.get_dim("nO"))
    if model.has_ref("head"):
        if get_span_head(model).dims == dims:
            return
        drop_head(model)
    attrs = model.attrs
    head = SpanHead(
        n_in=model.get_dim("nI"),
        n_classes=model.get_dim("nO"),
        max_width=attrs["max_width"],
        hidden_width=attrs["hidden_width"],
        projection_dim=attrs["projection_dim"],
        width_embed_dim=attrs["width_embed_dim"],
        casing_embed_dim=attrs["casing_embed_dim"],
        dropout=attrs["dropout"],
        temperature=attrs["temperature"],
        max_kappa=attrs["max_kappa"],
        seed=attrs["seed"],
    )
    wrapper = PyTorchWrapper_v2(
        head,
        convert_inputs=_convert_head_inputs,
        mixed_precision=attrs["mixed_precision"],
        grad_scaler=attrs["grad_scaler"],
    )
    model.layers.append(wrapper)
    model.set_ref("head", wrapper)


def drop_head(model: Model) -> None:
    """Remove the torch head, if any: the next build_head (initialize) makes a new one."""
    if model.has_ref("head"):
        model.layers.remove(model.get_ref("head"))
        model.set_ref("head", None)


def get_span_head(model: Model) -> SpanHead:
    """The torch SpanHead inside a SpanNER model (after initialize or load)."""
    if not model.has_ref("head"):
        raise ValueError("the SpanNER model has no head yet: initialize the component or load it first")
    return cast(PyTorchShim, model.get_ref("head").shims[0])._model


def _convert_head_inputs(model: Model, inputs: Tuple, is_train: bool) -> Tuple[ArgsKwargs, Callable]:
    shim = cast(PyTorchShim, model.shims[0])
    tokens, first, last, widths, casing = inputs
    args = (
        xp2torch(tokens, requires_grad=is_train, device=shim.device),
        xp2torch(first, device=shim.device),
        xp2torch(last, device=shim.device),
        xp2torch(widths, device=shim.device),
        xp2torch(casing, device=shim.device),
    )

    def reverse(d_args: ArgsKwargs) -> Floats2d:
        return cast(Floats2d, torch2xp(d_args.args[0]))

    return ArgsKwargs(args=args, kwargs={}), reverse


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[SpanScores, Callable]:
    tok2vec = model.get_ref("tok2vec")
    head = model.get_ref("head")
    n_classes = model.get_dim("nO")
    ops = model.ops
    lengths = [len(doc) for doc in docs]
    spans = enumerate_spans(lengths, model.attrs["max_width"])
    tokvecs, backprop_tok2vec = tok2vec(docs, is_train)
    n_spans = spans.shape[0]
    if n_spans == 0:
        empty = SpanScores(
            spans=spans,
            logits=ops.alloc2f(0, n_classes),
            vectors=ops.alloc2f(0, model.attrs["projection_dim"]),
            lengths=lengths,
        )
        return empty, lambda d_logits: []
    tokens = ops.flatten(tokvecs)
    table = casing_table([[t.text for t in doc] for doc in docs])

    def head_inputs(rows: numpy.ndarray) -> Tuple:
        first, last = global_token_indices(lengths, rows)
        return (tokens, ops.asarray1i(first).astype("int64"), ops.asarray1i(last).astype("int64"),
                ops.asarray1i(rows[:, 2] - rows[:, 1]).astype("int64"), ops.asarray2f(casing_lookup(table, rows)))

    if not is_train:  # in chunks of spans: memory O(chunk), not O(document)
        output = ops.alloc2f(n_spans, n_classes + model.attrs["projection_dim"])
        for a in range(0, n_spans, PREDICT_CHUNK):
            output[a:a + PREDICT_CHUNK] = head.predict(head_inputs(spans[a:a + PREDICT_CHUNK]))
        return SpanScores(spans=spans, logits=output[:, :n_classes], vectors=output[:, n_classes:], lengths=lengths), _no_backprop
    output, backprop_head = head(head_inputs(spans), is_train)
    scores = SpanScores(
        spans=spans,
        logits=output[:, :n_classes],
        vectors=output[:, n_classes:],
        lengths=lengths,
    )

    def backprop(d_logits: Floats2d) -> List[Doc]:
        d_output = ops.alloc2f(n_spans, output.shape[1])
        d_output[:, :n_classes] = d_logits
        d_tokens = backprop_head(d_output)
        backprop_tok2vec(ops.unflatten(d_tokens, ops.asarray1i(lengths)))
        return []

    return scores, backprop


def _no_backprop(d_logits: Floats2d) -> List[Doc]:
    raise ValueError("SpanNER: a prediction (is_train=False) has no gradient; use begin_update to train")


def copy_span_ner_weights(model: Model, classes: Sequence[str], other: Model, other_classes: Sequence[str]) -> None:
    """Copy the weights and class statistics of another SpanNER model into `model`.

    The two may have added their labels in different orders: the class-indexed buffers
    (the class means) are mapped by class name.

    model (Model): the SpanNER model to overwrite.
    classes (Sequence[str]): its classes, O first.
    other (Model): a trained SpanNER model of the same architecture.
    other_classes (Sequence[str]): its classes (the same set).
    """
    model.from_bytes(other.to_bytes())
    order = [list(other_classes).index(c) for c in classes]
    if order != list(range(len(order))):
        head = get_span_head(model)
        index = torch.tensor(order, dtype=torch.long)
        with torch.no_grad():
            for name in CLASS_INDEXED_BUFFERS:
                buffer = getattr(head, name)
                buffer.copy_(buffer.index_select(0, index))
    model.attrs[CLASSES_ATTR] = list(classes)
