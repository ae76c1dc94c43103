"""A compact student: an encoder with fewer layers than its teacher's, made of some of
the teacher's own layers (as DistilBERT is initialised from BERT). Stage 2 is already a
distillation (the student learns the teacher's soft labels), so a compact student needs
no other machinery. Keeping k of n layers does k/n of the encoder layers' work per
token (measured speed: BENCHMARKS.md, "Speed and cost")."""
from typing import Any, List

import torch


def kept_layers(n_layers: int, keep: int) -> List[int]:
    """The layers a `keep`-layer encoder takes from an `n_layers` one: evenly spaced and
    ending with the last (whose output the span head was trained on), e.g. 6 of 12 are
    1, 3, 5, 7, 9, 11 (counting from 0).

    n_layers (int): the layers of the encoder.
    keep (int): how many to keep, 1..n_layers.
    RETURNS (List[int]): their indices, increasing.
    """
    if not 1 <= keep <= n_layers:
        raise ValueError(f"a compact encoder keeps 1 to {n_layers} of its {n_layers} layers, not {keep}")
    return [round((i + 1) * n_layers / keep) - 1 for i in range(keep)]


def keep_encoder_layers(model: Any, keep: int) -> List[int]:
    """Make a Hugging Face encoder (BERT, XLM-RoBERTa: `encoder.layer`) keep `keep` of its
    layers (kept_layers), in place; its config's num_hidden_layers follows, so the
    pipeline saves and loads as a `keep`-layer model.

    model (Any): the Hugging Face model (a spacy-transformers pipe's model.transformer).
    keep (int): how many layers to keep.
    RETURNS (List[int]): the indices of the layers kept, in the original numbering.
    """
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"a compact encoder needs a model with encoder.layer (BERT, XLM-RoBERTa), not {type(model).__name__}")
    indices = kept_layers(len(layers), keep)
    model.encoder.layer = torch.nn.ModuleList([layers[i] for i in indices])
    model.config.num_hidden_layers = keep
    return indices
