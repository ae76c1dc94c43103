"""Shared fixtures: a tiny random transformer encoder built offline, and pipelines on it."""
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training import Example
from thinc.api import Config

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data" / "conll"

TRAIN_SENTENCES: List[Tuple[str, List[Tuple[int, int, str]]]] = [
    ("Angela Merkel visited Paris on Monday .", [(0, 2, "PER"), (3, 4, "LOC")]),
    ("Siemens opened an office in Berlin .", [(0, 1, "ORG"), (5, 6, "LOC")]),
    ("John Smith works for Google in London .", [(0, 2, "PER"), (4, 5, "ORG"), (6, 7, "LOC")]),
    ("The Olympic Games start in Madrid .", [(1, 3, "MISC"), (5, 6, "LOC")]),
    ("Maria Garcia met the Red Cross team .", [(0, 2, "PER"), (4, 6, "ORG")]),
    ("It rained all day .", []),
]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests (real encoder build, full runs)")


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
    import torch

    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("encoder") / "tiny-bert")


def source_config(encoder: Path, overrides: Optional[Dict[str, object]] = None) -> Config:
    """configs/source.cfg with the tiny encoder and small settings."""
    config = Config().from_disk(REPO / "configs" / "source.cfg", interpolate=False)
    settings = {
        "paths.encoder": str(encoder),
        "components.transformer.model.get_spans.window": 32,
        "components.transformer.model.get_spans.stride": 24,
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


def make_examples(nlp: Language) -> List[Example]:
    examples = []
    for text, ents in TRAIN_SENTENCES:
        words = text.split()
        ref = Doc(nlp.vocab, words=words)
        ref.ents = [Span(ref, s, e, label=label) for s, e, label in ents]
        examples.append(Example(Doc(nlp.vocab, words=words), ref))
    return examples


@pytest.fixture
def tiny_nlp(tiny_encoder) -> Language:
    return spacy.util.load_model_from_config(source_config(tiny_encoder), auto_fill=True, validate=True)
