"""The masked-LM auxiliary loss component (maral_mlm): masking, head loading, training, IO."""
import logging
from pathlib import Path
from typing import Dict

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc
from thinc.api import Adam, fix_random_seed

from helpers import TRAIN_SENTENCES, build_nlp, encoder_parameters, make_examples
from spacy_maral.pipeline.maral_mlm import IGNORE_INDEX, mask_word_pieces
from spacy_maral.training.readers import target_example


def _batch(n: int = 64, length: int = 40, pad_from: int = 30):
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(10, 100, (n, length), generator=generator)
    special = torch.zeros((n, length), dtype=torch.bool)
    special[:, 0] = True  # [CLS]
    special[:, pad_from:] = True  # [SEP] + padding
    return ids, special


def test_masking_picks_only_ordinary_pieces_at_the_rate() -> None:
    ids, special = _batch()
    masked, labels = mask_word_pieces(
        ids, special, mask_id=4, vocab_size=100, mask_prob=0.15, generator=torch.Generator().manual_seed(0)
    )
    picked = labels != IGNORE_INDEX
    assert not picked[special].any()
    assert torch.equal(labels[picked], ids[picked])
    assert torch.equal(masked[~picked], ids[~picked])  # nothing else is touched
    rate = picked.sum().item() / (~special).sum().item()
    assert 0.12 < rate < 0.19
    as_mask = (masked[picked] == 4).float().mean().item()
    assert 0.7 < as_mask < 0.9
    assert picked.any(dim=1).all()  # every sentence predicts at least one piece


def test_masking_is_seeded() -> None:
    ids, special = _batch()
    a = mask_word_pieces(ids, special, mask_id=4, vocab_size=100, mask_prob=0.15, generator=torch.Generator().manual_seed(3))
    b = mask_word_pieces(ids, special, mask_id=4, vocab_size=100, mask_prob=0.15, generator=torch.Generator().manual_seed(3))
    c = mask_word_pieces(ids, special, mask_id=4, vocab_size=100, mask_prob=0.15, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_masking_a_sentence_of_special_tokens_only() -> None:
    ids = torch.tensor([[2, 3, 0, 0]])
    special = torch.ones_like(ids, dtype=torch.bool)
    masked, labels = mask_word_pieces(ids, special, mask_id=4, vocab_size=10, mask_prob=0.5, generator=torch.Generator())
    assert torch.equal(masked, ids) and (labels == IGNORE_INDEX).all()


def mlm_nlp(encoder: Path, **cfg):
    nlp = build_nlp(encoder)
    settings = {"head_from": str(encoder), "weight": 1.0, "target_only": False}
    settings.update(cfg)
    nlp.add_pipe("maral_mlm", config=settings)
    return nlp


@pytest.fixture(params=["bert", "xlm-roberta"])
def encoder_with_mlm_head(request, tiny_encoder, tmp_path) -> Path:
    """A tiny masked-LM checkpoint with a (random) LM head: BERT's layout (cls.predictions)
    or XLM-R's (lm_head), with the tiny encoder's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, XLMRobertaConfig, XLMRobertaForMaskedLM

    torch.manual_seed(5)
    bert = BertConfig.from_pretrained(str(tiny_encoder))
    if request.param == "bert":
        model = BertForMaskedLM(bert)
    else:
        config = XLMRobertaConfig(
            vocab_size=bert.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=130, pad_token_id=0,
        )
        model = XLMRobertaForMaskedLM(config)
    with torch.no_grad():
        model.get_output_embeddings().bias.normal_()
    path = tmp_path / f"tiny-{request.param}-mlm"
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(str(tiny_encoder)).save_pretrained(str(path))
    return path


def test_head_is_loaded_from_a_checkpoint_with_one(encoder_with_mlm_head) -> None:
    from transformers import AutoModelForMaskedLM

    nlp = mlm_nlp(encoder_with_mlm_head, require_pretrained_head=True)
    nlp.initialize(lambda: make_examples(nlp))
    mlm = nlp.get_pipe("maral_mlm")
    assert mlm.cfg["pretrained_head"] is True
    reference = AutoModelForMaskedLM.from_pretrained(str(encoder_with_mlm_head))
    head = {k: v for k, v in reference.named_parameters() if k.startswith(("cls.", "lm_head."))}
    dense = next(v for k, v in head.items() if k.endswith("dense.weight"))
    norm = next(v for k, v in head.items() if k.lower().endswith(("layernorm.weight", "layer_norm.weight")))
    torch.testing.assert_close(mlm.head.dense.weight, dense)
    torch.testing.assert_close(mlm.head.layer_norm.weight, norm)
    torch.testing.assert_close(mlm.head.bias, reference.get_output_embeddings().bias)
    # the loaded head predicts as the checkpoint's own head does, on the same hidden states
    hidden = torch.randn(3, 32)
    embeddings = nlp.get_pipe("transformer").model.transformer.get_input_embeddings().weight
    expected = reference.get_output_embeddings()(
        reference.cls.predictions.transform(hidden) if hasattr(reference, "cls")
        else reference.lm_head.layer_norm(torch.nn.functional.gelu(reference.lm_head.dense(hidden)))
    )
    torch.testing.assert_close(mlm.head(hidden, embeddings), expected, rtol=1e-4, atol=1e-4)


def test_encoder_without_a_head_warns_or_raises(tiny_encoder, caplog) -> None:
    nlp = mlm_nlp(tiny_encoder)
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        nlp.initialize(lambda: make_examples(nlp))
    assert nlp.get_pipe("maral_mlm").cfg["pretrained_head"] is False
    assert any("no masked-LM head" in r.getMessage() for r in caplog.records)
    strict = mlm_nlp(tiny_encoder, require_pretrained_head=True)
    with pytest.raises(ValueError, match="has no masked-LM head"):
        strict.initialize(lambda: make_examples(strict))


def test_bad_settings_and_missing_transformer(tiny_encoder) -> None:
    nlp = build_nlp(tiny_encoder)
    with pytest.raises(ValueError, match="mask_prob"):
        nlp.add_pipe("maral_mlm", config={"mask_prob": 0.0})
    bare = spacy.blank("xx")
    bare.add_pipe("maral_mlm")
    with pytest.raises(ValueError, match="no 'transformer' component"):
        bare.initialize()


def test_target_only_masks_the_target_sentences(tiny_encoder) -> None:
    nlp = mlm_nlp(tiny_encoder, target_only=True)
    mlm = nlp.get_pipe("maral_mlm")
    source = make_examples(nlp)[:2]
    target = [target_example(Doc(nlp.vocab, words="Paris opened an office .".split()), 0, nlp)]
    assert [t.strip() for t in mlm.mlm_texts(source + target)] == ["Paris opened an office ."]
    mlm.target_only = False
    assert len(mlm.mlm_texts(source + target)) == 3


def test_mlm_gradient_reaches_the_encoder_but_not_frozen_embeddings(tiny_encoder) -> None:
    nlp = mlm_nlp(tiny_encoder)
    fix_random_seed(0)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    params = encoder_parameters(nlp)
    for p in params.values():
        p.grad = None
    nlp.get_pipe("maral_mlm").update(examples, sgd=None)
    grads = {k: p.grad for k, p in params.items()}
    embeddings = [k for k in grads if "word_embeddings" in k]
    assert embeddings and all(grads[k] is None for k in embeddings)  # frozen by configure_encoder
    layer = [k for k in grads if "encoder.layer.1.output.dense.weight" in k][0]
    assert grads[layer] is not None and grads[layer].abs().sum() > 0
    # weight 0: no gradient at all
    for p in params.values():
        p.grad = None
    mlm = nlp.get_pipe("maral_mlm")
    mlm.weight = 0.0
    mlm.update(examples, sgd=None)
    assert all(p.grad is None for p in params.values())


def test_mlm_loss_falls_and_the_encoder_moves(tiny_encoder) -> None:
    nlp = mlm_nlp(tiny_encoder)
    fix_random_seed(0)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    before = {k: v.detach().clone() for k, v in encoder_parameters(nlp).items()}
    head_before = nlp.get_pipe("maral_mlm").head.dense.weight.detach().clone()
    optimizer = Adam(0.03)  # a new head on a random encoder: 0.003 moves it too slowly for 80 steps
    history = []
    for _ in range(80):
        losses: Dict[str, float] = {}
        nlp.update(examples, sgd=optimizer, drop=0.0, losses=losses, exclude=["maral_ner"])
        history.append(losses["maral_mlm"])
    # ln(vocab) = 4.9 at the start; 3.5 after 80 steps with seed 0
    assert numpy.mean(history[-10:]) < 0.85 * numpy.mean(history[:10]), history
    after = encoder_parameters(nlp)
    moved = [k for k in before if not torch.equal(before[k], after[k].detach())]
    assert any("encoder.layer" in k for k in moved)
    assert not any("word_embeddings" in k for k in moved)
    assert not torch.equal(head_before, nlp.get_pipe("maral_mlm").head.dense.weight.detach())


def test_mlm_round_trip_and_no_effect_on_predictions(tiny_encoder, tmp_path) -> None:
    nlp = mlm_nlp(tiny_encoder)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=Adam(0.003), losses={})
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.pipe_names == ["transformer", "maral_ner", "maral_mlm"]
    torch.testing.assert_close(loaded.get_pipe("maral_mlm").head.bias, nlp.get_pipe("maral_mlm").head.bias)
    torch.testing.assert_close(loaded.get_pipe("maral_mlm").head.dense.weight, nlp.get_pipe("maral_mlm").head.dense.weight)
    text = TRAIN_SENTENCES[0][0]
    with_mlm = [(e.start, e.end, e.label_) for e in loaded(text).ents]
    disabled = loaded.select_pipes(disable=["maral_mlm"])
    without = [(e.start, e.end, e.label_) for e in loaded(text).ents]
    disabled.restore()
    assert with_mlm == without


def test_export_leaves_maral_mlm_out(tiny_encoder, tmp_path) -> None:
    from spacy_maral.cli.package import export_command

    nlp = mlm_nlp(tiny_encoder)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    nlp.to_disk(tmp_path / "trained")
    export_command(
        model=tmp_path / "trained", output_dir=tmp_path / "export", name="test_ner", version="0.0.1", guard=None, lang=None,
        precision="auto",
    )
    exported = spacy.load(tmp_path / "export")
    assert exported.pipe_names == ["transformer", "maral_ner"]
    assert not (tmp_path / "export" / "maral_mlm").exists()


def test_a_maral_mlm_sourced_from_another_pipeline_refuses_to_train_that_ones_transformer(tiny_encoder, tmp_path) -> None:
    """spaCy hands a sourced component over as it is: it would train its first
    pipeline's transformer. Its update refuses, naming the fix, whether sourced through
    a config (as `spacy train` does: not initialized, the vocab shared) or in Python;
    initialized in the new pipeline, it trains that one's."""
    first = mlm_nlp(tiny_encoder)
    first.initialize(lambda: make_examples(first))
    first.to_disk(tmp_path / "first")
    config = build_nlp(tiny_encoder).config
    config["components"]["maral_mlm"] = {"source": str(tmp_path / "first")}
    config["nlp"]["pipeline"] = [*config["nlp"]["pipeline"], "maral_mlm"]
    from_config = spacy.util.load_model_from_config(config, auto_fill=True)
    with pytest.raises(ValueError, match="was not initialized in this pipeline"):
        from_config.get_pipe("maral_mlm").update(make_examples(from_config), sgd=None)
    second = build_nlp(tiny_encoder)
    second.add_pipe("maral_mlm", source=first)
    examples = make_examples(second)
    with pytest.raises(ValueError, match="sourced from another pipeline"):
        second.get_pipe("maral_mlm").update(examples, sgd=None)
    second.initialize(lambda: examples)
    params = encoder_parameters(second)
    for p in params.values():
        p.grad = None
    second.get_pipe("maral_mlm").update(examples, sgd=None)
    assert any(p.grad is not None for p in params.values())
