"""The optional masked-language-model auxiliary loss (docs/method.md, section 7).

The authors add ``lambda * L_mlm`` (lambda = 1e-3 in stage 1, 0.01 in stage 2) on the
target-language training text. In a spaCy pipeline that is its own trainable component,
``maral_mlm``, placed anywhere after the transformer it trains:

- at each ``update`` it masks the batch's target sentences (all sentences with
  ``target_only = false``) the BERT way (15% of the word pieces; of those 80% [MASK], 10% a
  random piece, 10% unchanged), runs the shared transformer once more on them, predicts
  the masked pieces with an LM head, and back-propagates ``weight * cross-entropy`` into
  the transformer's gradients, which the transformer's own ``finish_update`` applies with
  those of the NER loss;
- the LM head (dense, activation, layer norm, output bias; the output matrix is tied to
  the transformer's input embeddings, as in BERT and XLM-R) is read from the encoder's
  masked-LM checkpoint when it has one (xlm-roberta-large does); multilingual-e5-small
  ships without one, so its head starts untrained, which ``require_pretrained_head``
  turns into an error;
- at prediction time it does nothing.

It is off by default: it is not in the pipeline of ``configs/adapt.cfg``. Switch it on
by adding it to the pipeline (see that config). Its cost, one more forward and backward
pass of the encoder over the target sentences of every step, is measured in
BENCHMARKS.md.
"""
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import srsly
import torch
from spacy import util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer, PyTorchWrapper

from spacy_maral.adaptation.examples import is_target
from spacy_maral.util import logger

IGNORE_INDEX = -100


class MLMHead(torch.nn.Module):
    """A BERT / XLM-R masked-LM head whose output matrix is passed in (tied weights).

    hidden_size (int): width of the transformer's hidden states.
    vocab_size (int): number of word pieces.
    activation (str): the transformer's hidden activation (transformers' ACT2FN name).
    layer_norm_eps (float): epsilon of the layer norm.
    """

    def __init__(self, hidden_size: int, vocab_size: int, activation: str = "gelu", layer_norm_eps: float = 1e-12):
        super().__init__()
        from transformers.activations import ACT2FN

        self.dense = torch.nn.Linear(hidden_size, hidden_size)
        self.activation = ACT2FN[activation]
        self.layer_norm = torch.nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = torch.nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, output_embeddings: torch.Tensor) -> torch.Tensor:
        """Logits over the word pieces, (n, vocab), for hidden states (n, hidden)."""
        h = self.layer_norm(self.activation(self.dense(hidden)))
        return torch.nn.functional.linear(h, output_embeddings, self.bias)


def load_pretrained_head(name: str, head: MLMHead) -> List[str]:
    """Copy the masked-LM head of the checkpoint `name` into `head`, where it has one.

    name (str): a model directory or hub name (AutoModelForMaskedLM).
    head (MLMHead): the head to fill.
    RETURNS (List[str]): the head weights the checkpoint lacked (empty: fully loaded).
    """
    import logging

    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)  # the "newly initialized" warning is ours to give
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(name, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(previous)
    base = model.base_model_prefix
    children = [(n, m) for n, m in model.named_children() if n != base]
    if len(children) != 1:
        raise ValueError(f"maral_mlm: can't find the masked-LM head of {name} (modules {[n for n, _ in children]})")
    prefix, hf_head = children[0]
    linears = [m for m in hf_head.modules() if isinstance(m, torch.nn.Linear)]
    norms = [m for m in hf_head.modules() if isinstance(m, torch.nn.LayerNorm)]
    dense = [m for m in linears if m.out_features == head.dense.out_features]
    decoder = [m for m in linears if m.out_features == head.bias.shape[0]]
    if len(dense) != 1 or len(norms) != 1 or len(decoder) != 1 or decoder[0].bias is None:
        raise ValueError(f"maral_mlm: the masked-LM head of {name} is not a dense/norm/decoder head")
    with torch.no_grad():
        head.dense.load_state_dict(dense[0].state_dict())
        head.layer_norm.load_state_dict(norms[0].state_dict())
        head.bias.copy_(decoder[0].bias)
    tied = {k for k in info.get("missing_keys", []) if k.endswith("decoder.weight")}
    missing = [k for k in info.get("missing_keys", []) if k.startswith(prefix + ".") and k not in tied]
    del model
    return missing


def mask_word_pieces(
    input_ids: torch.Tensor,
    special: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    mask_prob: float,
    generator: torch.Generator,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: pick `mask_prob` of the ordinary pieces; 80% [MASK], 10% random, 10% kept.

    input_ids (torch.Tensor): (batch, length) word-piece ids.
    special (torch.Tensor): (batch, length) bool, True where a piece may not be masked
        (special tokens, padding).
    mask_id (int): the id of the mask token.
    vocab_size (int): number of word pieces (for the random replacements).
    mask_prob (float): fraction of the ordinary pieces to predict.
    generator (torch.Generator): the random source (seeded by the component).
    RETURNS (Tuple[torch.Tensor, torch.Tensor]): the masked ids, and the labels (the
        original id where a piece is to be predicted, IGNORE_INDEX elsewhere). At least
        one piece of every sentence with an ordinary piece is picked.
    """
    shape = input_ids.shape
    draw = torch.rand(shape, generator=generator)
    draw = draw.masked_fill(special, 2.0)
    picked = draw < mask_prob
    # at least one piece per sentence: the one with the smallest draw
    has_ordinary = (~special).any(dim=1)
    first = draw.argmin(dim=1)
    picked[has_ordinary, first[has_ordinary]] = True
    labels = torch.where(picked, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    how = torch.rand(shape, generator=generator)
    masked = input_ids.clone()
    masked[picked & (how < 0.8)] = mask_id
    randomised = picked & (how >= 0.8) & (how < 0.9)
    masked[randomised] = torch.randint(vocab_size, shape, generator=generator)[randomised]
    return masked, labels


@Language.factory(
    "maral_mlm",
    assigns=[],
    requires=[],
    default_config={
        "transformer": "transformer",
        "weight": 0.01,
        "mask_prob": 0.15,
        "target_only": True,
        "require_pretrained_head": False,
        "head_from": None,
        "max_length": 128,
        "seed": 0,
    },
)
def make_maral_mlm(
    nlp: Language,
    name: str,
    transformer: str,
    weight: float,
    mask_prob: float,
    target_only: bool,
    require_pretrained_head: bool,
    head_from: Optional[str],
    max_length: int,
    seed: int,
) -> "MaralMLM":
    """Create a maral_mlm component: the masked-LM auxiliary loss on the shared transformer.

    transformer (str): name of the transformer component to train.
    weight (float): lambda, the weight of the MLM loss (the paper: 0.01 in stage 2).
    mask_prob (float): fraction of the word pieces to predict.
    target_only (bool): mask only the target-language sentences of a stage-2 batch
        (false: every sentence of the batch).
    require_pretrained_head (bool): raise if the encoder's checkpoint has no masked-LM
        head, instead of training a new one.
    head_from (Optional[str]): the checkpoint to read the LM head from (a directory or a
        hub name; in the configs, ${paths.encoder}); None: start a new head.
    max_length (int): longest input in word pieces (longer sentences are cut).
    seed (int): seed of the masking.
    """
    return MaralMLM(
        nlp.vocab, name, transformer=transformer, weight=weight, mask_prob=mask_prob,
        target_only=target_only, require_pretrained_head=require_pretrained_head,
        head_from=head_from, max_length=max_length, seed=seed,
    )


class MaralMLM(TrainablePipe):
    """The masked-LM auxiliary loss as a pipeline component (training only)."""

    # `python -m spacy_maral export` leaves components marked so out of the package
    training_only = True

    def __init__(
        self,
        vocab: Vocab,
        name: str = "maral_mlm",
        *,
        transformer: str = "transformer",
        weight: float = 0.01,
        mask_prob: float = 0.15,
        target_only: bool = True,
        require_pretrained_head: bool = False,
        head_from: Optional[str] = None,
        max_length: int = 128,
        seed: int = 0,
    ) -> None:
        if weight < 0:
            raise ValueError(f"maral_mlm: weight must be >= 0, got {weight}")
        if not 0.0 < mask_prob < 1.0:
            raise ValueError(f"maral_mlm: mask_prob must be in (0, 1), got {mask_prob}")
        self.vocab = vocab
        # the pipeline whose transformer it trains: the one that initialized it (initialize),
        # never the one it was made in (a component sourced into another pipeline is the same
        # object, made in its source pipeline)
        self._nlp: Optional[Language] = None
        self.name = name
        self.transformer_name = transformer
        self.weight = float(weight)
        self.mask_prob = float(mask_prob)
        self.target_only = bool(target_only)
        self.require_pretrained_head = bool(require_pretrained_head)
        self.head_from = head_from
        self.max_length = int(max_length)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.cfg: Dict[str, Any] = {}
        self.model: Model = Model("maral_mlm_empty", lambda model, X, is_train: (X, lambda d: d))

    # ------------------------------------------------------------- the encoder
    def _transformer(self) -> Tuple[Any, Any]:
        """The shared Hugging Face model and tokenizer, of the pipeline that initialized
        this component."""
        if self._nlp is None:
            raise ValueError(
                f"maral_mlm '{self.name}' was not initialized in this pipeline, so it does not know whose "
                "transformer to train: make it by its factory in the training config (factory = \"maral_mlm\"), "
                "not sourced from another pipeline, or call its initialize(get_examples, nlp=nlp) (its LM head "
                "starts again from head_from)"
            )
        if self.transformer_name not in self._nlp.pipe_names:
            raise ValueError(
                f"maral_mlm: the pipeline has no '{self.transformer_name}' component to train "
                f"(pipes: {self._nlp.pipe_names})"
            )
        model = self._nlp.get_pipe(self.transformer_name).model
        hf_model = getattr(model, "transformer", None)
        if hf_model is None or not hasattr(hf_model, "get_input_embeddings"):
            raise ValueError(f"maral_mlm: '{self.transformer_name}' is not a spacy-transformers transformer")
        return hf_model, model.tokenizer

    def _build(self, hidden_size: int, vocab_size: int, activation: str, eps: float) -> MLMHead:
        self.cfg.update(hidden_size=hidden_size, vocab_size=vocab_size, activation=activation, layer_norm_eps=eps)
        head = MLMHead(hidden_size, vocab_size, activation, eps)
        self.model = PyTorchWrapper(head)
        return head

    @property
    def head(self) -> MLMHead:
        shim = getattr(self.model, "shims", None)
        if not shim:
            raise ValueError(f"maral_mlm '{self.name}' is not initialized")
        return shim[0]._model

    def initialize(self, get_examples: Callable[[], Iterable[Example]], *, nlp: Optional[Language] = None) -> None:
        """Build the LM head for the transformer, from its checkpoint where it has one.

        get_examples (Callable[[], Iterable[Example]]): the training data (unused).
        nlp (Optional[Language]): the pipeline whose transformer this component trains
            (Language.initialize passes it).
        """
        if nlp is None:
            raise ValueError(f"maral_mlm '{self.name}': initialize needs the pipeline (nlp.initialize() passes it)")
        self._nlp = nlp
        hf_model, _ = self._transformer()
        config = hf_model.config
        activation = config.hidden_act if isinstance(config.hidden_act, str) else "gelu"
        head = self._build(config.hidden_size, config.vocab_size, activation, float(config.layer_norm_eps))
        missing = load_pretrained_head(self.head_from, head) if self.head_from else ["(no head_from)"]
        self.cfg["pretrained_head"] = not missing
        if missing:
            if self.require_pretrained_head:
                raise ValueError(
                    f"maral_mlm: {self.head_from} has no masked-LM head (missing: {missing[:4]}); set "
                    "require_pretrained_head = false to train a new head, or leave maral_mlm out"
                )
            logger.warning(
                "maral_mlm: %s has no masked-LM head: training a new, untrained head (its first "
                "steps mostly train the head)", self.head_from,
            )
        else:
            logger.info("maral_mlm: LM head loaded from %s", self.head_from)

    # ---------------------------------------------------------------- training
    def mlm_texts(self, examples: Sequence[Example]) -> List[str]:
        """The texts this component masks in a batch."""
        return [eg.predicted.text for eg in examples if len(eg.predicted) and (is_target(eg) or not self.target_only)]

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Back-propagate weight * MLM loss on the batch's (target) sentences into the transformer.

        examples (Iterable[Example]): the batch.
        drop (float): unused (the transformer's own dropout applies).
        sgd (Optional[Optimizer]): the optimizer, for the head.
        losses (Optional[Dict[str, float]]): accumulated losses, by component name.
        RETURNS (Dict[str, float]): the updated losses.
        """
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        validate_examples(examples, "MaralMLM.update")
        examples = list(examples)
        self._check_pipeline(examples)
        texts = self.mlm_texts(examples)
        if not texts or self.weight == 0.0:
            return losses
        loss = self.mlm_loss(texts)
        (self.weight * loss).backward()
        if sgd is not None:
            self.finish_update(sgd)
        losses[self.name] += float(loss.detach())
        return losses

    def _check_pipeline(self, examples: Sequence[Example]) -> None:
        """Refuse a batch of another pipeline than the one whose transformer this
        component trains: a maral_mlm initialized in one pipeline and sourced into
        another (spaCy hands over the component itself) would train the first one's."""
        self._transformer()  # initialized somewhere
        if examples and examples[0].predicted.vocab is not self._nlp.vocab:
            raise ValueError(
                f"maral_mlm '{self.name}' trains the transformer of the pipeline it was made in, not of the one "
                "this batch comes from: it was sourced from another pipeline. Make it by its factory in this "
                "pipeline's config (factory = \"maral_mlm\"), or initialize it there (nlp.initialize())"
            )

    def mlm_loss(self, texts: List[str]) -> torch.Tensor:
        """The masked-LM cross-entropy (mean over the predicted pieces) of `texts`, with its graph."""
        hf_model, tokenizer = self._transformer()
        batch = tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length,
            return_tensors="pt", return_special_tokens_mask=True,
        )
        special = batch["special_tokens_mask"].bool() | (batch["attention_mask"] == 0)
        if tokenizer.mask_token_id is None:
            raise ValueError("maral_mlm: the transformer's tokenizer has no mask token")
        masked, labels = mask_word_pieces(
            batch["input_ids"], special, mask_id=tokenizer.mask_token_id,
            vocab_size=hf_model.config.vocab_size, mask_prob=self.mask_prob, generator=self.generator,
        )
        device = hf_model.device
        output = hf_model(input_ids=masked.to(device), attention_mask=batch["attention_mask"].to(device))
        hidden = output.last_hidden_state
        where = labels.to(device) != IGNORE_INDEX
        logits = self.head(hidden[where], hf_model.get_input_embeddings().weight)
        return torch.nn.functional.cross_entropy(logits, labels.to(device)[where])

    # -------------------------------------------------------------- prediction
    def __call__(self, doc: Doc) -> Doc:
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterable[Doc]:
        yield from stream

    def predict(self, docs: Iterable[Doc]) -> None:
        return None

    def set_annotations(self, docs: Iterable[Doc], scores: Any) -> None:
        return None

    # ---------------------------------------------------------- serialization
    def _restore(self) -> None:
        if self.cfg.get("hidden_size"):
            self._build(self.cfg["hidden_size"], self.cfg["vocab_size"], self.cfg["activation"], self.cfg["layer_norm_eps"])

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        serialize = {"cfg": lambda: srsly.json_dumps(self.cfg), "model": lambda: self.model.to_bytes()}
        return util.to_bytes(serialize, exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "MaralMLM":
        msg = srsly.msgpack_loads(bytes_data)
        self.cfg.update(srsly.json_loads(msg["cfg"]))
        self._restore()
        self.model.from_bytes(msg["model"])
        return self

    def to_disk(self, path, *, exclude: Iterable[str] = tuple()) -> None:
        serialize = {"cfg": lambda p: srsly.write_json(p, self.cfg), "model": lambda p: self.model.to_disk(p)}
        util.to_disk(util.ensure_path(path), serialize, exclude)

    def from_disk(self, path, *, exclude: Iterable[str] = tuple()) -> "MaralMLM":
        path = util.ensure_path(path)
        if not (path / "cfg").exists():
            raise ValueError(f"maral_mlm '{self.name}': {path / 'cfg'} is missing; the pipeline directory is incomplete")
        self.cfg.update(srsly.read_json(path / "cfg"))
        self._restore()
        self.model.from_disk(path / "model")
        return self
