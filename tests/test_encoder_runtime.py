"""The encoder runtime (spacy_maral.EncoderRuntime.v1): precision chosen at load time and
never saved, bfloat16 autocast only where the CPU has it, length-sorted sub-batches; built
by the config, with no private attribute of thinc or spacy-transformers rebound."""
import filecmp
import logging
from pathlib import Path
from typing import Tuple

import numpy
import pytest
import spacy
import torch
from thinc.api import Adam, fix_random_seed

from helpers import assert_nothing_patched, assert_same_predictions, build_nlp, make_examples, predictions
from spacy_maral.pipeline import precision
from spacy_maral.pipeline.int8 import int8_supported
from spacy_maral.pipeline.loading import encoder_runtime_of, load_pipeline, runtime_config
from spacy_maral.pipeline.precision import resolve_precision

TEXTS = [
    "John Smith works for Google in London .",
    "Paris",
    "Maria Garcia met the Red Cross team in Paris and then flew back to Madrid with John Smith .",
    "",
    "Google .",
] * 3


def _dirs_equal(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_dirs_equal(a / d, b / d) for d in cmp.common_dirs)


def test_auto_is_bf16_only_where_the_cpu_has_it(monkeypatch) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    assert resolve_precision("auto") == "fp32"
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert resolve_precision("auto") == "bf16"
    assert resolve_precision("auto", on_gpu=True) == "fp32"
    assert resolve_precision("fp32") == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp16")


def test_a_settings_warning_is_logged_once_not_per_batch(monkeypatch, caplog) -> None:
    """The runtime resolves its precision on every forward: its warning comes once."""
    precision._warn_once.cache_clear()
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    with caplog.at_level("WARNING", logger="spacy_maral"):
        for _ in range(3):
            assert resolve_precision("bf16") == "bf16"
    assert [r.getMessage() for r in caplog.records].count(
        "precision bf16 on a CPU without native bfloat16 (AVX512-BF16 or AMX): it runs, but slowly") == 1
    precision._warn_once.cache_clear()


def test_a_cpu_without_bf16_runs_fp32(trained_dir, monkeypatch) -> None:
    """With the capability forced off, "auto" gives exactly the fp32 outputs."""
    fp32 = load_pipeline(trained_dir, precision="fp32")
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    auto = load_pipeline(trained_dir, precision="auto")
    assert encoder_runtime_of(auto)["running"] == "fp32"
    a, b = predictions(fp32, TEXTS), predictions(auto, TEXTS)
    assert [x[:2] for x in a] == [x[:2] for x in b]
    assert [x[2] for x in a] == [x[2] for x in b]  # bit for bit


def test_bf16_runs_under_autocast_and_its_outputs_are_fp32(trained_dir) -> None:
    nlp = load_pipeline(trained_dir, precision="bf16")
    assert encoder_runtime_of(nlp)["running"] == "bf16"
    hf_model = nlp.get_pipe("transformer").model.transformer
    seen = []
    handle = hf_model.encoder.layer[0].attention.self.query.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    doc = nlp("John Smith works for Google in London .")
    handle.remove()
    assert seen and all(dtype == torch.bfloat16 for dtype in seen)  # the encoder ran in bfloat16
    assert numpy.asarray(doc._.trf_data.model_output.last_hidden_state).dtype == numpy.float32
    assert all(p.dtype == torch.float32 for p in hf_model.parameters())  # weights stay fp32
    scores = doc.spans["maral"].attrs["scores"]
    assert all(0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("precision", [
    "bf16", pytest.param("int8", marks=pytest.mark.skipif(not int8_supported(), reason="no torch._int_mm on this CPU"))])
def test_saved_after_prediction_reloads_bit_identical_to_a_pipeline_that_never_saw_it(trained_dir, tmp_path, precision) -> None:
    """A pipeline that predicted in bf16 or int8 saves the fp32 weights it loaded, unchanged."""
    never = load_pipeline(trained_dir, precision="fp32")
    expected = predictions(never, TEXTS)
    other = load_pipeline(trained_dir, precision=precision)
    assert encoder_runtime_of(other)["running"] == precision
    predictions(other, TEXTS)  # predict at that precision first
    other.to_disk(tmp_path / "saved")
    never.to_disk(tmp_path / "never")
    # the same weights, all fp32 (torch's files are not byte-stable from save to save)
    saved_weights = load_pipeline(tmp_path / "saved", precision="fp32").get_pipe("transformer").model.transformer.state_dict()
    never_weights = load_pipeline(tmp_path / "never", precision="fp32").get_pipe("transformer").model.transformer.state_dict()
    assert set(saved_weights) == set(never_weights)
    for key, value in saved_weights.items():
        assert value.dtype == never_weights[key].dtype and torch.equal(value, never_weights[key]), key
    assert all(v.dtype in (torch.float32, torch.int64) for v in saved_weights.values())
    assert _dirs_equal(tmp_path / "saved" / "maral_ner", tmp_path / "never" / "maral_ner")
    reloaded = load_pipeline(tmp_path / "saved", precision="fp32")
    got = predictions(reloaded, TEXTS)
    assert [x[:2] for x in got] == [x[:2] for x in expected]
    assert [x[2] for x in got] == [x[2] for x in expected]


def test_bf16_agrees_with_fp32_on_the_trained_pipeline(trained_dir) -> None:
    fp32 = predictions(load_pipeline(trained_dir, precision="fp32"), TEXTS)
    bf16 = predictions(load_pipeline(trained_dir, precision="bf16"), TEXTS)
    assert [x[0] for x in bf16] == [x[0] for x in fp32]  # the same entities
    for (_, _, a), (_, _, b) in zip(fp32, bf16):
        numpy.testing.assert_allclose(a, b, atol=0.05)


def test_length_sorted_sub_batches_equal_one_padded_batch(trained_dir) -> None:
    plain = spacy.load(trained_dir, config=runtime_config("fp32", sort_by_length=False))
    sorted_ = spacy.load(trained_dir, config=runtime_config("fp32", sort_by_length=True, bucket_rows=2))
    docs_plain = list(plain.pipe(TEXTS, batch_size=16))
    docs_sorted = list(sorted_.pipe(TEXTS, batch_size=16))
    for a, b in zip(docs_plain, docs_sorted):
        assert [(e.start, e.end, e.label_) for e in a.ents] == [(e.start, e.end, e.label_) for e in b.ents]
        if len(a):
            ha = a._.trf_data.model_output.last_hidden_state
            hb = b._.trf_data.model_output.last_hidden_state
            width = min(ha.shape[1], hb.shape[1])
            mask = a._.trf_data.wordpieces.attention_mask[:, :width].astype(bool)
            numpy.testing.assert_allclose(numpy.asarray(ha)[:, :width][mask], numpy.asarray(hb)[:, :width][mask], rtol=1e-4, atol=1e-5)
    assert_same_predictions(predictions(plain, TEXTS), predictions(sorted_, TEXTS))


def test_the_setting_round_trips_through_the_saved_config(trained_dir, tmp_path) -> None:
    nlp = spacy.load(trained_dir, config=runtime_config("bf16", bucket_rows=4))
    nlp.to_disk(tmp_path / "p")
    again = spacy.load(tmp_path / "p")
    # train_bucket_rows: configs/source.cfg's, which the pipeline was trained with
    assert encoder_runtime_of(again) == {"precision": "bf16", "sort_by_length": True, "bucket_rows": 4, "train_bucket_rows": 4,
                                      "running": "bf16"}
    overridden = load_pipeline(tmp_path / "p", precision="fp32")
    assert encoder_runtime_of(overridden)["running"] == "fp32"
    assert encoder_runtime_of(load_pipeline(tmp_path / "p"))["precision"] == "bf16"  # none asked: the saved one


def test_the_precision_reaches_a_components_own_encoder_after_replace_listeners(trained_dir, tmp_path) -> None:
    """After `nlp.replace_listeners`, maral_ner holds its own copy of the runtime (a
    Tok2VecEncoderRuntime.v1 block inside its model): load_pipeline sets its settings."""
    nlp = spacy.load(trained_dir, config=runtime_config("bf16"))
    nlp.replace_listeners("transformer", "maral_ner", ["model.tok2vec"])
    nlp.remove_pipe("transformer")
    nlp.to_disk(tmp_path / "own")
    assert encoder_runtime_of(spacy.load(tmp_path / "own"))["precision"] == "bf16"
    loaded = load_pipeline(tmp_path / "own", precision="fp32", bucket_rows=3)
    settings = encoder_runtime_of(loaded)
    assert (settings["precision"], settings["bucket_rows"]) == ("fp32", 3)
    assert loaded.config["nlp"]["after_pipeline_creation"] is None  # no callback added
    assert predictions(loaded, TEXTS)


def test_a_callback_of_the_users_is_never_replaced(trained_dir, tmp_path, caplog) -> None:
    """A pipeline saved without the runtime whose config has its own
    after_pipeline_creation: loaded with it, as saved, with a warning naming it when
    settings are asked that only the legacy callback in its place could set."""
    import shutil

    from spacy.util import registry

    @registry.callbacks("test_maral.mark.v1")
    def make_mark():
        def mark(nlp):
            nlp.meta["marked"] = True
            return nlp
        return mark

    old = tmp_path / "old"
    shutil.copytree(trained_dir, old)
    _old_style_config(old)
    from thinc.api import Config

    config = Config().from_disk(old / "config.cfg", interpolate=False)
    config["nlp"]["after_pipeline_creation"] = {"@callbacks": "test_maral.mark.v1"}
    config.to_disk(old / "config.cfg")
    assert load_pipeline(old).meta.get("marked") is True
    with caplog.at_level(logging.WARNING, logger="spacy_maral"):
        loaded = load_pipeline(old, precision="fp32")  # what every command asks (--precision auto by default)
    assert loaded.meta.get("marked") is True and predictions(loaded, TEXTS)
    assert "'test_maral.mark.v1', not 'spacy_maral.encoder_runtime.v1'" in caplog.text


def test_bf16_training_keeps_fp32_weights_and_learns(tiny_encoder) -> None:
    nlp = build_nlp(tiny_encoder, {"components.transformer.model.precision": "bf16"})
    assert encoder_runtime_of(nlp)["running"] == "bf16"
    fix_random_seed(0)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.003)
    losses = []
    for step in range(30):
        step_losses = {}
        nlp.update(examples, sgd=optimizer, drop=0.0, losses=step_losses)
        losses.append(step_losses["maral_ner"])
        if (step + 1) % 10 == 0:
            nlp.get_pipe("maral_ner").end_epoch()
    hf_model = nlp.get_pipe("transformer").model.transformer
    assert all(p.dtype == torch.float32 for p in hf_model.parameters())
    assert numpy.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]


def _one_step_gradients(tiny_encoder, train_bucket_rows: int) -> Tuple[dict, int]:
    """The encoder's and the span head's gradients after one update on the six training
    sentences (no dropout, the encoder's own included; no optimizer step), from seed 0,
    and how many times the Hugging Face model ran."""
    fix_random_seed(0)
    nlp = build_nlp(tiny_encoder, {"components.transformer.model.train_bucket_rows": train_bucket_rows,
                                   "components.transformer.model.precision": "fp32"})
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    for module in nlp.get_pipe("transformer").model.transformer.modules():
        if isinstance(module, torch.nn.Dropout):  # torch's train mode: on whatever `drop` says
            module.p = 0.0
        if hasattr(module, "dropout_prob"):  # the SDPA attention's dropout, not a module
            module.dropout_prob = 0.0
    calls = []
    hf_model = nlp.get_pipe("transformer").model.transformer
    hook = hf_model.register_forward_pre_hook(lambda module, args: calls.append(1))
    nlp.update(examples, drop=0.0, sgd=None, losses={})
    hook.remove()
    grads = {f"encoder.{k}": p.grad.detach().clone() for k, p in nlp.get_pipe("transformer").model.transformer.named_parameters()
             if p.grad is not None}
    for node in nlp.get_pipe("maral_ner").model.walk():
        for name in node.param_names:
            if node.has_grad(name):
                grads[f"{node.id}.{name}"] = torch.as_tensor(numpy.asarray(node.get_grad(name)))
    return grads, len(calls)


def test_length_sorted_training_gives_the_whole_batchs_gradients(tiny_encoder) -> None:
    whole, whole_calls = _one_step_gradients(tiny_encoder, 0)
    sorted_, sorted_calls = _one_step_gradients(tiny_encoder, 2)
    assert (whole_calls, sorted_calls) == (1, 3)  # six sentences: three sub-batches of two
    assert len(whole) == len(sorted_) and sum(k.startswith("encoder.") for k in whole) > 10
    for key, grad in whole.items():
        assert grad.abs().sum() > 0 or key.startswith("encoder.embeddings.word"), key
        torch.testing.assert_close(sorted_[key], grad, rtol=1e-4, atol=1e-6, msg=key)


def test_bad_settings_fail_when_the_config_is_resolved(trained_dir) -> None:
    with pytest.raises(Exception, match="precision must be one of"):
        spacy.load(trained_dir, config=runtime_config("half"))
    with pytest.raises(Exception, match="bucket_rows"):
        spacy.load(trained_dir, config=runtime_config("fp32", bucket_rows=0))
    with pytest.raises(Exception, match="train_bucket_rows must be 0"):
        build_nlp(Path(trained_dir) / "never-read", {"components.transformer.model.train_bucket_rows": -1})


def test_truncated_transformer_weights_name_the_file(trained_dir, tmp_path) -> None:
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(trained_dir, damaged)
    weights = damaged / "transformer" / "model"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"transformer/model: can't be read \(ValueError: Unpack failed"):
        load_pipeline(damaged, precision="fp32")


def test_a_pipeline_with_the_runtime_still_pickles(trained_dir) -> None:
    """nlp.pipe(n_process=N) with the spawn start method (macOS, Windows) pickles the
    pipeline: the runtime's wrappers are classes, not closures."""
    import pickle

    nlp = load_pipeline(trained_dir, precision="bf16")
    again = pickle.loads(pickle.dumps(nlp))
    assert encoder_runtime_of(again)["precision"] == "bf16"
    assert_same_predictions(predictions(again, TEXTS), predictions(nlp, TEXTS))


# ------------------------------------------- built by the config, nothing patched


def _old_style_config(saved: Path, precision: str = "auto") -> None:
    """Rewrite a saved pipeline's config.cfg as a pipeline saved before
    spacy_maral.EncoderRuntime.v1 had it: a bare TransformerModel with strided windows and
    the after_pipeline_creation callback (the weights' file is the same)."""
    from thinc.api import Config

    config = Config().from_disk(saved / "config.cfg", interpolate=False)
    encoder = dict(config["components"]["transformer"]["model"]["encoder"])
    spans = dict(encoder["get_spans"])
    encoder["get_spans"] = {"@span_getters": "spacy-transformers.strided_spans.v1", "window": spans["window"], "stride": spans["stride"]}
    config["components"]["transformer"]["model"] = encoder
    config["nlp"]["after_pipeline_creation"] = {
        "@callbacks": "spacy_maral.encoder_runtime.v1", "precision": precision, "sort_by_length": True, "bucket_rows": 16,
    }
    config.to_disk(saved / "config.cfg")


def test_nothing_is_patched_when_built_trained_saved_and_loaded(tiny_encoder, trained, trained_dir, tmp_path) -> None:
    assert_nothing_patched(build_nlp(tiny_encoder))
    assert_nothing_patched(trained.nlp)
    assert_nothing_patched(spacy.load(trained_dir))
    nlp = load_pipeline(trained_dir, precision="bf16")
    predictions(nlp, TEXTS)
    assert_nothing_patched(nlp)
    nlp.to_disk(tmp_path / "again")
    assert_nothing_patched(load_pipeline(tmp_path / "again", precision="fp32"))


def test_no_factory_edits_the_transformer(tiny_encoder) -> None:
    """maral_ner's factory leaves the transformer created before it as its config made it."""
    from helpers import source_config

    config = source_config(tiny_encoder)
    config["nlp"]["pipeline"] = ["transformer"]
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    model = nlp.get_pipe("transformer").model
    before = (model, model._func, model.encoder._func, dict(model.encoder.attrs))
    nlp.add_pipe("maral_ner", config={k: v for k, v in config["components"]["maral_ner"].items() if k != "factory"})
    model = nlp.get_pipe("transformer").model
    assert (model, model._func, model.encoder._func, dict(model.encoder.attrs)) == before
    assert_nothing_patched(nlp)


def test_sub_batches_merge_into_the_batch_the_model_gives_in_one_piece(trained_dir) -> None:
    """Length-sorted sub-batches give the FullTransformerBatch of one padded batch: the same
    spans, wordpieces, alignment and (under the mask) outputs."""
    plain = spacy.load(trained_dir, config=runtime_config("fp32", sort_by_length=False))
    sorted_ = spacy.load(trained_dir, config=runtime_config("fp32", sort_by_length=True, bucket_rows=2))
    long_text = " ".join(["Maria Garcia met the Red Cross team in Paris ."] * 8)  # 80 words: overlapping windows
    docs = [plain.make_doc(t) for t in TEXTS[:3] + [long_text] + TEXTS[3:]]
    assert max(len(spans) for spans in plain.get_pipe("transformer").model.encoder.attrs["get_spans"](docs)) > 2
    a = plain.get_pipe("transformer").model.predict(docs)
    b = sorted_.get_pipe("transformer").model.predict(docs)
    assert [[(s.start, s.end) for s in d] for d in a.spans] == [[(s.start, s.end) for s in d] for d in b.spans]
    assert a.wordpieces.strings == b.wordpieces.strings and a.wordpieces.lengths == b.wordpieces.lengths
    numpy.testing.assert_array_equal(a.wordpieces.input_ids, b.wordpieces.input_ids)
    numpy.testing.assert_array_equal(a.wordpieces.attention_mask, b.wordpieces.attention_mask)
    numpy.testing.assert_array_equal(a.align.dataXd, b.align.dataXd)
    numpy.testing.assert_array_equal(a.align.lengths, b.align.lengths)
    mask = a.wordpieces.attention_mask.astype(bool)
    ha, hb = (x.model_output.last_hidden_state.detach().numpy() for x in (a, b))
    numpy.testing.assert_allclose(ha[mask], hb[mask], rtol=1e-4, atol=1e-5)
    for da, db in zip(a.doc_data, b.doc_data):
        numpy.testing.assert_array_equal(da.align.dataXd, db.align.dataXd)


def test_a_pipeline_saved_before_the_architecture_loads_through_the_legacy_callback(trained_dir, tmp_path) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(trained_dir, old)
    _old_style_config(old, precision="bf16")
    nlp = spacy.load(old)  # the callback of its config: bf16
    assert encoder_runtime_of(nlp) == {"precision": "bf16", "sort_by_length": True, "bucket_rows": 16, "train_bucket_rows": 0,
                                      "running": "bf16"}
    assert_nothing_patched(nlp)
    fp32 = load_pipeline(old, precision="fp32")  # --precision on an older pipeline: its callback's setting
    assert encoder_runtime_of(fp32)["running"] == "fp32"
    assert_same_predictions(predictions(fp32, TEXTS), predictions(load_pipeline(trained_dir, precision="fp32"), TEXTS))
    assert [x[0] for x in predictions(nlp, TEXTS)] == [x[0] for x in predictions(fp32, TEXTS)]
    fp32.to_disk(tmp_path / "resaved")  # saved again: still its older config, and it loads the same
    assert_same_predictions(predictions(load_pipeline(tmp_path / "resaved", precision="fp32"), TEXTS), predictions(fp32, TEXTS))


def test_the_legacy_callback_on_a_current_pipeline_says_what_to_set(trained_dir) -> None:
    legacy = {"nlp": {"after_pipeline_creation": {"@callbacks": "spacy_maral.encoder_runtime.v1", "precision": "fp32"}}}
    with pytest.raises(ValueError, match=r"set components\.transformer\.model\.precision"):
        spacy.load(trained_dir, config=legacy)
