"""Helpers and constants shared by the tests (the fixtures stay in conftest.py).

Importable as `helpers` because pyproject.toml puts tests/ on sys.path
(`[tool.pytest.ini_options] pythonpath`).
"""
import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy
import pytest
import spacy
import torch
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training import Example
from thinc.api import Config

REPO = Path(__file__).resolve().parents[1]

# The CoNLL data (LANG/{train,dev,test}.conll) lives outside the repository; tests that
# need it read its folder from this environment variable and skip without it.
CONLL_DIR_ENV = "MARAL_CONLL_DIR"
CONLL_SKIP_REASON = f"set {CONLL_DIR_ENV} to a folder with LANG/{{train,dev,test}}.conll to run this test"

TRAIN_SENTENCES: List[Tuple[str, List[Tuple[int, int, str]]]] = [
    ("Angela Merkel visited Paris on Monday .", [(0, 2, "PER"), (3, 4, "LOC")]),
    ("Siemens opened an office in Berlin .", [(0, 1, "ORG"), (5, 6, "LOC")]),
    ("John Smith works for Google in London .", [(0, 2, "PER"), (4, 5, "ORG"), (6, 7, "LOC")]),
    ("The Olympic Games start in Madrid .", [(1, 3, "MISC"), (5, 6, "LOC")]),
    ("Maria Garcia met the Red Cross team .", [(0, 2, "PER"), (4, 6, "ORG")]),
    ("It rained all day .", []),
]

# Adam(0.01) also trains the tiny random BERT at 0.01, which oscillates (ents_f 0.4-0.9 over
# 100-150 steps) or collapses (0.03: every span gets the same vector); the span head alone is
# stable at 0.01. At 0.003 the whole pipeline overfits for seeds 0-5 (ents_f 1.0 by step 80).
LEARN_RATE = 0.003
N_STEPS = 100
STEPS_PER_EPOCH = 10


def write_train_corpus(folder: Path) -> Path:
    """TRAIN_SENTENCES into FOLDER: gold `dev.spacy` (on spaCy's xx tokens) and `text.txt`
    (one sentence a line). RETURNS the folder."""
    from spacy.tokens import DocBin

    nlp = spacy.blank("xx")
    docs = []
    for text, ents in TRAIN_SENTENCES:
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, start, end, label=label) for start, end, label in ents]
        docs.append(doc)
    DocBin(docs=docs).to_disk(folder / "dev.spacy")
    (folder / "text.txt").write_text("".join(t + "\n" for t, _ in TRAIN_SENTENCES), encoding="utf8")
    return folder


def conll_file(lang: str, split: str) -> Path:
    """$MARAL_CONLL_DIR/LANG/SPLIT.conll; skips the calling test when it is unset or absent."""
    root = os.environ.get(CONLL_DIR_ENV)
    if not root:
        pytest.skip(f"{CONLL_SKIP_REASON} ({CONLL_DIR_ENV} is unset)")
    path = Path(root) / lang / f"{split}.conll"
    if not path.is_file():
        pytest.skip(f"{CONLL_SKIP_REASON} ({path} is absent)")
    return path


def make_tiny_encoder(path: Path) -> Path:
    """A 2-layer, 32-wide random BERT with a small WordPiece vocabulary, saved offline."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    words = sorted({w.lower() for s, _ in TRAIN_SENTENCES for w in s.split()})
    letters = list("abcdefghijklmnopqrstuvwxyzäöüéñ0123456789.,-")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + letters + ["##" + c for c in letters]
    (path / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf8")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(path))
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(path))
    return path


def source_config(encoder: Path, overrides: Optional[Dict[str, object]] = None) -> Config:
    """configs/source.cfg with the tiny encoder and small settings."""
    config = Config().from_disk(REPO / "configs" / "source.cfg", interpolate=False)
    settings = {
        "paths.encoder": str(encoder),
        "components.transformer.model.encoder.get_spans.window": 32,
        "components.transformer.model.encoder.get_spans.stride": 24,
        "components.maral_ner.model.hidden_width": 32,
        "components.maral_ner.model.projection_dim": 16,
    }
    settings.update(overrides or {})
    for key, value in settings.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config.interpolate()


def build_nlp(encoder: Path, overrides: Optional[Dict[str, object]] = None) -> Language:
    return spacy.util.load_model_from_config(source_config(encoder, overrides), auto_fill=True, validate=True)


def make_examples(nlp: Language) -> List[Example]:
    examples = []
    for text, ents in TRAIN_SENTENCES:
        words = text.split()
        ref = Doc(nlp.vocab, words=words)
        ref.ents = [Span(ref, s, e, label=label) for s, e, label in ents]
        examples.append(Example(Doc(nlp.vocab, words=words), ref))
    return examples


def predictions(nlp: Language, texts: List[str]) -> List[Tuple[list, list, list]]:
    """(ents, maral spans, maral scores) of every text."""
    out = []
    for doc in nlp.pipe(texts):
        group = doc.spans["maral"]
        out.append(
            (
                [(e.start, e.end, e.label_) for e in doc.ents],
                [(s.start, s.end, s.label_) for s in group],
                list(group.attrs["scores"]),
            )
        )
    return out


def assert_same_predictions(a, b) -> None:
    assert len(a) == len(b)
    for (ents_a, spans_a, scores_a), (ents_b, spans_b, scores_b) in zip(a, b):
        assert ents_a == ents_b
        assert spans_a == spans_b
        numpy.testing.assert_allclose(scores_a, scores_b, rtol=1e-5, atol=1e-6)


def encoder_parameters(nlp: Language) -> Dict[str, torch.Tensor]:
    hf_model = nlp.get_pipe("transformer").model.transformer
    return dict(hf_model.named_parameters())


def assert_nothing_patched(nlp, window: int = 32, stride: int = 24) -> None:
    """The transformer's model is the registered architecture built by the config; every
    function, method and span getter of thinc and spacy-transformers is their own."""
    import thinc.layers.pytorchwrapper
    from spacy_transformers.layers import transformer_model
    from spacy_transformers.pipeline_component import Transformer

    from spacy_maral.pipeline import encoder_runtime
    from spacy_maral.pipeline.encoder_runtime import EncoderRuntime
    from spacy_maral.pipeline.subwords import EncoderWindows, configure_encoder_windows
    from spacy_maral.util import registry

    pipe = nlp.get_pipe("transformer")
    assert type(pipe) is Transformer
    assert "from_disk" not in vars(pipe) and type(pipe).from_disk is Transformer.from_disk  # the class's method
    model = pipe.model
    assert type(model) is EncoderRuntime and model._func is encoder_runtime._forward
    inner = model.encoder
    assert type(inner) is transformer_model.TransformerModel
    assert inner._func is transformer_model.forward  # spacy-transformers' own forward
    assert inner.layers[0]._func is thinc.layers.pytorchwrapper.forward  # thinc's, not rebound
    assert all(not getattr(node._func, "__module__", "").startswith("spacy_maral") for node in inner.walk())
    hf_model = inner.transformer  # None until the model is initialized or loaded
    for module in hf_model.modules() if hf_model is not None else []:
        assert not [name for name in vars(module) if "maral" in name.lower()]  # no flag of ours on the HF model
        hooks = list(module._forward_hooks.values()) + list(module._forward_pre_hooks.values())
        assert not [h for h in hooks if getattr(h, "__module__", "").startswith("spacy_maral")]
    get_spans = inner.attrs["get_spans"]
    assert registry.span_getters.get("spacy_maral.encoder_windows.v1") is configure_encoder_windows
    assert type(get_spans) is EncoderWindows and (get_spans.window, get_spans.stride) == (window, stride)
    assert get_spans.encoder is inner


def app_of(command: str):
    """The typer app that has `command`: the benchmark tools' (`python -m
    spacy_maral.bench`: measure, benchmark-report, parallel) or the user's (`python -m
    spacy_maral`)."""
    import typer.main

    from spacy_maral.bench.cli import app as bench_app
    from spacy_maral.cli import app

    return bench_app if command in typer.main.get_command(bench_app).commands else app


def run_cli(*args: object) -> subprocess.CompletedProcess:
    """`python -m spacy_maral ARGS` (or `python -m spacy_maral.bench ARGS`) run in this
    process by typer's CliRunner, returned as `subprocess.run(..., capture_output=True,
    text=True)` returns a command's run: its exit status, stdout and stderr, kept apart.
    It saves the imports of a new Python (about 5 s a command). An exception the command
    does not turn into an exit status (a traceback, in a real process) is raised here,
    so a test cannot take it for a clean refusal. What only a real process shows
    (signals, its environment, what it imports) is tested with one.

    args (object): the command's name and arguments (paths are turned into strings).
    RETURNS (subprocess.CompletedProcess): returncode, stdout and stderr.
    """
    from typer.testing import CliRunner

    argv = [str(a) for a in args]
    result = CliRunner().invoke(app_of(argv[0]), argv)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(argv, result.exit_code, result.stdout, result.stderr)
