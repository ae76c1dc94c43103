"""Raw text: detokenization, the language tokenizer, character-offset scoring, unreachable
entities, and calibrated scores (issue: what users get from `nlp(text)`)."""
import json
from pathlib import Path

import numpy
import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training import Example

from helpers import predictions, run_cli
from spacy_maral.corpora.detokenize import detokenize, detokenized_spaces
from spacy_maral.evaluation.calibration import fit_temperature, reliability, tempered_scores
from spacy_maral.evaluation.raw_text import RawSentence, char_prf, entity_logits, evaluate_raw_text, raw_sentences, unreachable
from spacy_maral.pipeline.maral_ner import find_maral_ner
from spacy_maral.pipeline.tokenizer import set_tokenizer_lang, tokenizer_lang, tokenizer_rules

# ------------------------------------------------------------------ detokenize


def test_detokenize_follows_prose_spacing() -> None:
    words = ["Die", "SPD-Fraktion", "(", "Bonn", ")", "sagte", ",", "Merkel", "'s", "Plan", "sei", "gut", "."]
    text, _ = detokenize(words)
    assert text == "Die SPD-Fraktion (Bonn) sagte, Merkel's Plan sei gut."
    assert detokenize(["¿", "Dónde", "está", "Madrid", "?"])[0] == "¿Dónde está Madrid?"
    # quotes: no side is known, they stay spaced
    assert detokenize(["er", "sagte", '"', "nein", '"', "."])[0] == 'er sagte " nein ".'


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "Bonn", ".", ",", "(", ")", "'s", "n't", "¿", '"', "-", "%", "x-y"]), min_size=1, max_size=12))
def test_detokenize_offsets_point_at_the_tokens(words) -> None:
    text, offsets = detokenize(words)
    assert [text[s:e] for s, e in offsets] == words
    assert not detokenized_spaces(words)[-1]


def test_converter_writes_raw_text(tmp_path) -> None:
    from spacy_maral.corpora.conll import read_conll

    path = tmp_path / "x.conll"
    path.write_text("Die O\nSPD-Fraktion B-ORG\n( O\nBonn B-LOC\n) O\ntagte O\n. O\n", encoding="utf8")
    (doc,) = list(read_conll(path))
    assert doc.text == "Die SPD-Fraktion (Bonn) tagte."
    assert [(e.text, e.label_) for e in doc.ents] == [("SPD-Fraktion", "ORG"), ("Bonn", "LOC")]


# ------------------------------------------------------------------ tokenizer


def test_language_tokenizer_keeps_hyphenated_compounds() -> None:
    text = "Die SPD-Fraktion in Baden-Württemberg tagte."
    xx = spacy.blank("xx")
    assert [t.text for t in xx(text)] == ["Die", "SPD", "-", "Fraktion", "in", "Baden", "-", "Württemberg", "tagte", "."]
    de = set_tokenizer_lang(spacy.blank("xx"), "de")
    assert [t.text for t in de(text)] == ["Die", "SPD-Fraktion", "in", "Baden-Württemberg", "tagte", "."]
    assert de.lang == "xx" and tokenizer_lang(de) == "de"


def test_language_tokenizer_round_trip_to_disk(tmp_path) -> None:
    nlp = set_tokenizer_lang(spacy.blank("xx"), "de")
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.config["nlp"]["tokenizer"] == {"@tokenizers": "spacy_maral.tokenizer.v1", "lang": "de"}
    assert [t.text for t in loaded("SPD-Fraktion tagte.")] == ["SPD-Fraktion", "tagte", "."]
    # from config alone (no tokenizer files): the rules are rebuilt from the language
    fresh = spacy.util.load_model_from_config(loaded.config, auto_fill=True)
    assert [t.text for t in fresh("SPD-Fraktion tagte.")] == ["SPD-Fraktion", "tagte", "."]


def test_tokenizer_rules_swap_for_a_block_and_restore_on_error() -> None:
    nlp = spacy.blank("xx")
    own = nlp.tokenizer
    with tokenizer_rules(nlp, "de"):
        assert [t.text for t in nlp("SPD-Fraktion")] == ["SPD-Fraktion"]
        assert nlp.config["nlp"]["tokenizer"].get("lang") is None  # the config is not touched
    assert nlp.tokenizer is own and len(nlp("SPD-Fraktion")) == 3
    with pytest.raises(RuntimeError):
        with tokenizer_rules(nlp, "de"):
            raise RuntimeError("boom")
    assert nlp.tokenizer is own
    with tokenizer_rules(nlp, None):  # None: the pipeline's own rules
        assert nlp.tokenizer is own


def test_raw_text_per_sentence_counts_sum_to_the_totals() -> None:
    gold = [_gold_doc(["Die", "SPD-Fraktion", "tagte", "in", "Bonn", "."], [(1, 2, "ORG"), (4, 5, "LOC")]),
            _gold_doc(["Bonn", "liegt", "am", "Rhein", "."], [(0, 1, "LOC"), (3, 4, "LOC")])]
    nlp = _ruler_pipeline("xx", [{"label": "ORG", "pattern": "SPD"}, {"label": "LOC", "pattern": "Bonn"}])
    raw = evaluate_raw_text(nlp, gold)
    # sentence 1: Bonn right, SPD a cut-through false positive, SPD-Fraktion missed;
    # sentence 2: Bonn right, Rhein missed
    assert raw["per_sentence"] == [[1, 2, 2], [1, 1, 2]]
    assert (raw["tp"], raw["fp"], raw["fn"]) == (2, 1, 2)
    # the guard needs only the scores: no second tokenization for the unreachable count
    quick = evaluate_raw_text(nlp, gold, count_unreachable=False)
    assert "unreachable" in raw and "unreachable" not in quick
    assert quick["per_sentence"] == raw["per_sentence"]


def test_language_tokenizer_refuses_non_rule_based_languages() -> None:
    with pytest.raises(ValueError, match="'zh'.*not rule-based"):
        set_tokenizer_lang(spacy.blank("xx"), "zh")


def test_language_tokenizer_and_the_text_check_refuse_an_unknown_code_alike() -> None:
    # one check of a language code (corpora.text_check.language_rules) serves both
    with pytest.raises(ValueError, match="spacy_maral.tokenizer.v1.*unknown language code 'xy'"):
        set_tokenizer_lang(spacy.blank("xx"), "xy")


def test_trained_pipeline_keeps_its_tokenizer_through_disk(trained, tmp_path) -> None:
    nlp = trained.nlp
    before = tokenizer_lang(nlp)
    try:
        set_tokenizer_lang(nlp, "de")
        nlp.to_disk(tmp_path / "p")
    finally:
        set_tokenizer_lang(nlp, before)
    loaded = spacy.load(tmp_path / "p")
    assert tokenizer_lang(loaded) == "de"
    assert len(loaded("Baden-Württemberg")) == 1


# ------------------------------------------------------------ character scoring


def _ruler_pipeline(lang: str, patterns) -> Language:
    nlp = spacy.blank("xx")
    if lang != "xx":
        set_tokenizer_lang(nlp, lang)
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(patterns)
    return nlp


def _gold_doc(words, ents, spaces=None) -> Doc:
    doc = Doc(spacy.blank("xx").vocab, words=words, spaces=spaces)
    doc.ents = [Span(doc, s, e, label=label) for s, e, label in ents]
    return doc


def test_char_prf_counts_a_split_token_entity_as_false_positive() -> None:
    gold = [[(4, 16, "ORG"), (20, 24, "LOC")]]
    predicted = [[(4, 7, "ORG"), (20, 24, "LOC"), (30, 33, "PER")]]
    r = char_prf(gold, predicted)
    assert (r["tp"], r["fp"], r["fn"]) == (1, 2, 1)
    assert r["ents_p"] == pytest.approx(1 / 3)
    assert r["ents_r"] == pytest.approx(1 / 2)
    assert r["ents_f"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert r["ents_per_type"]["LOC"] == {"p": 1.0, "r": 1.0, "f": 1.0}
    assert r["ents_per_type"]["ORG"] == {"p": 0.0, "r": 0.0, "f": 0.0}


def test_raw_text_scoring_with_a_token_split_unlike_spacys_scorer() -> None:
    """The xx rules split `SPD-Fraktion`; a ruler tagging `SPD` predicts an entity that
    cuts through the gold token. spaCy's scorer drops it; the raw-text score counts it."""
    gold = _gold_doc(["Die", "SPD-Fraktion", "tagte", "in", "Bonn", "."], [(1, 2, "ORG"), (4, 5, "LOC")])
    nlp = _ruler_pipeline("xx", [{"label": "ORG", "pattern": "SPD"}, {"label": "LOC", "pattern": "Bonn"}])
    raw = evaluate_raw_text(nlp, [gold])
    assert (raw["tp"], raw["fp"], raw["fn"]) == (1, 1, 1)
    assert raw["ents_p"] == pytest.approx(0.5)
    # spaCy's scorer on the same text: the cut-through entity is not counted at all
    example = Example(nlp(gold.text), gold)
    assert nlp.get_pipe("entity_ruler").score([example])["ents_p"] == pytest.approx(1.0)
    # with German rules the token stays whole, the ruler can't cut it: no false positive
    raw_de = evaluate_raw_text(_ruler_pipeline("de", [{"label": "LOC", "pattern": "Bonn"}]), [gold])
    assert (raw_de["tp"], raw_de["fp"], raw_de["fn"]) == (1, 0, 1)


def test_unreachable_counts_misaligned_and_too_wide_entities() -> None:
    sentences = [
        RawSentence("SPD-Chef kam.", [(0, 3, "ORG")]),  # a boundary inside "SPD-Chef" (de rules)
        RawSentence("the bank of the united states of america.", [(4, 40, "ORG")]),  # 7 tokens
        RawSentence("Paris is big.", [(0, 5, "LOC")]),
    ]
    de = set_tokenizer_lang(spacy.blank("xx"), "de")
    r = unreachable(de, sentences, max_width=5)
    assert (r["entities"], r["misaligned"], r["too_wide"], r["unreachable"]) == (3, 1, 1, 2)
    assert r["recall_ceiling"] == pytest.approx(1 / 3)
    assert r["too_wide_by_label"] == {"ORG": 1}
    # with xx rules "SPD" is its own token: only the wide one is lost; no width limit: none
    assert unreachable(spacy.blank("xx"), sentences, max_width=5)["unreachable"] == 1
    assert unreachable(spacy.blank("xx"), sentences, max_width=7)["unreachable"] == 0


def test_an_entity_decoding_can_never_give_is_unreachable() -> None:
    """A gold entity holding a soft hyphen (or starting on a joiner) is masked by
    decoding (pipeline.nontext): it counts against the recall ceiling."""
    sentences = [RawSentence("Jean\u00adLuc kam.", [(0, 8, "PER")]), RawSentence("Paris is big.", [(0, 5, "LOC")])]
    r = unreachable(spacy.blank("xx"), sentences, max_width=5)
    assert (r["non_text"], r["unreachable"], r["recall_ceiling"]) == (1, 1, 0.5)


def test_raw_sentences_char_offsets_from_gold_tokens() -> None:
    doc = _gold_doc(["Die", "SPD-Fraktion", "(", "Bonn", ")", "."], [(1, 2, "ORG"), (3, 4, "LOC")])
    (sentence,) = raw_sentences([doc])
    assert sentence.text == "Die SPD-Fraktion (Bonn)."
    assert [sentence.text[s:e] for s, e, _ in sentence.gold] == ["SPD-Fraktion", "Bonn"]


# ----------------------------------------------------------------- calibration


def test_reliability_hand_computed() -> None:
    r = reliability([0.95, 0.95, 0.15, 0.15, 0.55], [True, False, False, False, True])
    # bins: (0.9,1]: 2 entities, accuracy .5, mean .95; (0.1,.2]: 2, accuracy 0, mean .15;
    # (0.5,0.6]: 1, accuracy 1, mean .55
    assert r["ece"] == pytest.approx(0.45 * 2 / 5 + 0.15 * 2 / 5 + 0.45 * 1 / 5)
    assert r["precision_at_0.9"] == pytest.approx(0.5) and r["count_at_0.9"] == 2
    assert r["precision_at_0.5"] == pytest.approx(2 / 3) and r["count_at_0.5"] == 3
    assert [b["count"] for b in r["bins"]] == [0, 2, 0, 0, 0, 1, 0, 0, 0, 2]


def test_fit_temperature_recovers_the_generating_temperature() -> None:
    rng = numpy.random.default_rng(0)
    logits = rng.normal(0, 3, size=(20000, 5))
    classes = logits.argmax(axis=1)
    true_t = 2.5
    p = softmax(logits / true_t, axis=1)[numpy.arange(20000), classes]
    correct = rng.random(20000) < p
    t = fit_temperature(logits, classes, correct)
    assert t == pytest.approx(true_t, rel=0.1)
    # calibrated scores have a small ECE, the raw ones (T = 1) a large one
    assert reliability(tempered_scores(logits, classes, t), correct)["ece"] < 0.02
    assert reliability(tempered_scores(logits, classes, 1.0), correct)["ece"] > 0.1


def test_fit_temperature_keeps_one_when_every_entity_is_right_or_wrong() -> None:
    logits = numpy.random.default_rng(1).normal(0, 2, size=(50, 5))
    classes = logits.argmax(axis=1)
    assert fit_temperature(logits, classes, numpy.ones(50, dtype=bool)) == 1.0
    assert fit_temperature(logits, classes, numpy.zeros(50, dtype=bool)) == 1.0
    mixed = numpy.arange(50) % 3 == 0
    assert fit_temperature(logits, classes, mixed) != 1.0


@pytest.mark.parametrize("temperature,slope,offset", [(3.0, 1.0, 0.0), (3.0, 0.6, -0.4), (1.0, 0.6, -0.4)])
def test_score_map_is_applied_stored_and_leaves_predictions(trained, tmp_path, temperature, slope, offset) -> None:
    from spacy_maral.pipeline.decoding import ScoreMap

    nlp = trained.nlp
    ner = find_maral_ner(nlp)
    texts = [" ".join(t for t in eg.reference.text.split()) for eg in trained.examples]
    base = predictions(nlp, texts)
    docs = [nlp.make_doc(t) for t in texts]
    nlp.get_pipe("transformer").set_annotations(docs, nlp.get_pipe("transformer").predict(docs))
    raw = ner.model.predict(docs)
    logits = ner.model.ops.to_numpy(raw.logits) + ner.inference_tau * ner.loss.log_prior[None, :]
    rows = {(int(d), int(s), int(e)): i for i, (d, s, e) in enumerate(raw.spans.tolist())}
    stored = dict(ner.cfg)
    try:
        ner.score_map = ScoreMap(temperature, slope, offset)
        hot = predictions(nlp, texts)
        nlp.to_disk(tmp_path / "p")
    finally:  # the shared fixture's cfg as it was (a test that compares it with its saved copy runs later)
        ner.cfg.clear()
        ner.cfg.update(stored)
    for i, ((ents, spans, _), (ents_t, spans_t, scores_t)) in enumerate(zip(base, hot)):
        assert ents == ents_t and spans == spans_t  # the same entities
        for (s, e, label), score in zip(spans_t, scores_t):
            row = logits[rows[(i, s, e)]]
            p = softmax(row / temperature)[ner.classes.index(label)]
            expected = 1.0 / (1.0 + ((1.0 - p) / p) ** slope * numpy.exp(-offset))  # sigmoid(a logit(p) + b)
            assert score == pytest.approx(expected, rel=1e-4)
            assert score != pytest.approx(softmax(row)[ner.classes.index(label)], rel=1e-3)
    loaded = spacy.load(tmp_path / "p")
    loaded_map = find_maral_ner(loaded).score_map  # JSON keeps about 15 digits
    assert (loaded_map.temperature, loaded_map.slope, loaded_map.offset) == pytest.approx((temperature, slope, offset), rel=1e-12)
    again = predictions(loaded, texts)
    for (_, _, a), (_, _, b) in zip(hot, again):
        numpy.testing.assert_allclose(a, b, rtol=1e-5)


def test_a_score_map_needs_a_positive_temperature_and_slope() -> None:
    from spacy_maral.pipeline.decoding import ScoreMap

    with pytest.raises(ValueError, match="temperature must be > 0"):
        ScoreMap(0.0)
    with pytest.raises(ValueError, match="slope must be > 0"):
        ScoreMap(1.0, 0.0, 0.0)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.2, 5.0), st.floats(0.05, 4.0), st.floats(-3.0, 3.0), st.integers(0, 2**31 - 1))
def test_platt_keeps_the_order_of_the_tempered_scores(temperature, slope, offset, seed) -> None:
    from spacy_maral.pipeline.decoding import ScoreMap

    rng = numpy.random.default_rng(seed)
    logits = rng.normal(0, 3, size=(40, 5))
    classes = logits.argmax(axis=1)
    tempered = tempered_scores(logits, classes, temperature)
    mapped = ScoreMap(temperature, slope, offset).scores(logits, classes)
    assert numpy.all((mapped >= 0) & (mapped <= 1))
    # Platt's map is increasing: an entity with a higher tempered probability never gets a
    # lower score (a temperature alone can reorder entities of different logits). Pairs
    # whose tempered probabilities a float cannot tell apart (both round to 1.0 at a sharp
    # temperature) have no order to keep: the map, from the exact log-odds, may split them
    i, j = numpy.nonzero(tempered[:, None] - tempered[None, :] > 1e-9)  # tempered[i] > tempered[j]
    assert len(i) and numpy.all(mapped[i] >= mapped[j] - 1e-12)
    # slope 1 and offset 0 report the tempered probabilities as they are
    numpy.testing.assert_allclose(ScoreMap(temperature).scores(logits, classes), tempered, rtol=1e-12)


def test_fit_platt_recovers_the_generating_slope_and_offset() -> None:
    from spacy_maral.evaluation.calibration import fit_platt

    rng = numpy.random.default_rng(3)
    z = rng.uniform(-1.5, 25.0, size=40000)  # log-odds, many beyond what a float's p can hold apart from 1
    true_slope, true_offset = 0.3, -0.7
    correct = rng.random(40000) < 1.0 / (1.0 + numpy.exp(-(true_slope * z + true_offset)))
    slope, offset = fit_platt(z, correct)
    assert slope == pytest.approx(true_slope, abs=0.03) and offset == pytest.approx(true_offset, abs=0.1)
    # nothing to fit: the scores as they are
    assert fit_platt(z[:50], numpy.ones(50, dtype=bool)) == (1.0, 0.0)
    assert fit_platt(z[:0], numpy.zeros(0, dtype=bool)) == (1.0, 0.0)
    # a fit that would reverse the scores' order is refused
    assert fit_platt(z, rng.random(40000) < 1.0 / (1.0 + numpy.exp(z / 4))) == (1.0, 0.0)


def test_fit_platt_stays_finite_on_a_few_separable_entities() -> None:
    """Five entities, the right ones all above the wrong ones: plain log loss has no
    minimum (its slope runs to the solver's limit, every score mapped to 0 or 1); Platt's
    smoothed targets (2 wrong: 1/4; 3 right: 4/5) give the minimum found here by scipy."""
    from scipy.optimize import minimize

    from spacy_maral.evaluation.calibration import fit_platt

    z = numpy.array([-1.0, -0.5, 0.5, 1.0, 1.5])
    correct = numpy.array([False, False, True, True, True])
    target = numpy.array([0.25, 0.25, 0.8, 0.8, 0.8])

    def loss(params: numpy.ndarray) -> float:
        p = 1.0 / (1.0 + numpy.exp(-(params[0] * z + params[1])))
        return float(-(target * numpy.log(p) + (1 - target) * numpy.log(1 - p)).sum())

    expected = minimize(loss, numpy.zeros(2), method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-12}).x
    slope, offset = fit_platt(z, correct)
    assert slope == pytest.approx(expected[0], abs=1e-3) and offset == pytest.approx(expected[1], abs=1e-3)
    assert slope < 3.0  # unsmoothed, the slope is above 15 here


def test_class_log_odds_is_finite_where_the_probability_rounds_to_one() -> None:
    from spacy_maral.pipeline.decoding import ScoreMap, class_log_odds

    logits = numpy.array([[0.0, 2.0, 1.0], [0.0, 60.0, 1.0], [3.0, 0.0, 0.0]], dtype=numpy.float32)
    classes = numpy.array([1, 1, 0])
    # by hand: log p - log(1 - p) = l_k - log(sum of exp(l_j), j != k)
    expected = [2.0 - numpy.log(1.0 + numpy.e), 60.0 - numpy.log(1.0 + numpy.e), 3.0 - numpy.log(2.0)]
    numpy.testing.assert_allclose(class_log_odds(logits, classes), expected, rtol=1e-12)
    numpy.testing.assert_allclose(class_log_odds(logits, classes, 2.0)[0], 1.0 - numpy.log(1.0 + numpy.exp(0.5)), rtol=1e-12)
    # the second entity's p is 1.0 in floating point; Platt's map still tells it from a sure one
    scores = ScoreMap(1.0, 0.1, 0.0).scores(logits, classes)
    assert scores[1] == pytest.approx(1.0 / (1.0 + numpy.exp(-0.1 * expected[1])), rel=1e-12) and scores[1] < 1.0


def mixed_gold(trained) -> list:
    """The training docs with every other gold entity given another label: the overfitted
    pipeline predicts the original labels, so about half its entities are now wrong."""
    labels = sorted({e.label_ for eg in trained.examples for e in eg.reference.ents})
    docs = []
    for eg in trained.examples:
        doc = eg.reference.copy()
        doc.ents = [
            Span(doc, e.start, e.end, labels[(labels.index(e.label_) + 1) % len(labels)]) if i % 2 else e
            for i, e in enumerate(doc.ents)
        ]
        docs.append(doc)
    return docs


def score_ordered_gold(trained) -> list:
    """The training docs with the gold entities mostly of the pipeline's lowest-scored
    predictions given another label: right and wrong entities whose correctness rises
    with the score, without separating them (five of the eleven lowest-first ranks wrong)."""
    nlp = trained.nlp
    labels = sorted({e.label_ for eg in trained.examples for e in eg.reference.ents})
    ranked = []
    for i, eg in enumerate(trained.examples):
        doc = nlp(eg.reference.text)
        group = doc.spans[find_maral_ner(nlp).spans_key]
        for span, score in zip(group, group.attrs["scores"]):
            ranked.append((float(score), i, span.start_char, span.end_char))
    ranked.sort()
    wrong = {(i, s, e) for rank, (_, i, s, e) in enumerate(ranked) if rank in (0, 1, 2, 4, 7)}
    docs = []
    for i, eg in enumerate(trained.examples):
        doc = eg.reference.copy()
        doc.ents = [
            Span(doc, e.start, e.end, labels[(labels.index(e.label_) + 1) % len(labels)]) if (i, e.start_char, e.end_char) in wrong else e
            for e in doc.ents
        ]
        docs.append(doc)
    return docs


def test_entity_logits_match_the_predicted_entities(trained) -> None:
    nlp = trained.nlp
    ner = find_maral_ner(nlp)
    docs = mixed_gold(trained)
    logits, classes, correct = entity_logits(nlp, docs)
    raw = evaluate_raw_text(nlp, docs)
    # one row per predicted entity, and the same exact-match count as the raw-text score
    assert logits.shape[0] == raw["tp"] + raw["fp"]
    assert int(correct.sum()) == raw["tp"] and 0 < raw["tp"] < logits.shape[0]
    assert raw["calibration"]["n"] == logits.shape[0]
    # each row, in the order of the predicted entities, gives that entity's class and, at
    # the pipeline's temperature 1, the very score its doc.spans carries; its correctness
    # is whether gold holds exactly that (start, end, label)
    predicted = []
    for doc, gold in zip(nlp.pipe([d.text for d in docs]), docs):
        spans = {(e.start_char, e.end_char, e.label_) for e in gold.ents}
        group = doc.spans[ner.spans_key]
        predicted += [(s.label_, float(p), (s.start_char, s.end_char, s.label_) in spans)
                      for s, p in zip(group, group.attrs["scores"])]
    assert len(predicted) == logits.shape[0]
    for row, c, ok, (label, score, right) in zip(logits, classes, correct, predicted):
        assert ner.classes[c] == label and bool(ok) == right
        assert softmax(row)[c] == pytest.approx(score, rel=1e-4)


def test_calibrate_cli_stores_the_temperature(trained_dir, trained, tmp_path) -> None:
    from spacy.tokens import DocBin

    dev = tmp_path / "dev.spacy"
    docs = mixed_gold(trained)  # right and wrong entities: a temperature to fit
    DocBin(docs=docs).to_disk(dev)
    out = tmp_path / "calibrated"
    report = tmp_path / "cal.json"
    run = run_cli("calibrate", trained_dir, dev, "--output", out, "--report", report)
    assert run.returncode == 0, run.stderr
    result = json.loads(report.read_text())
    stored = find_maral_ner(spacy.load(out)).score_map.temperature
    assert result["fitted"] is True and stored == pytest.approx(result["temperature"]) and stored != 1.0
    assert result["after"]["ece"] < result["before"]["ece"]
    # the stored T has the lowest log loss of the dev entities' scores (computed here from
    # the logits, by hand) among its neighbours on either side
    logits, classes, correct = entity_logits(trained.nlp, docs)
    c = correct.astype(float)

    def log_loss(t: float) -> float:
        p = numpy.clip([softmax(row / t)[k] for row, k in zip(logits, classes)], 1e-7, 1 - 1e-7)
        return float(-(c * numpy.log(p) + (1 - c) * numpy.log(1 - p)).mean())

    assert log_loss(stored) <= min(log_loss(stored * 0.8), log_loss(stored * 1.25), log_loss(1.0))
    # the source pipeline is untouched
    assert find_maral_ner(spacy.load(trained_dir)).score_map.temperature == 1.0


def test_calibrate_cli_in_place_keeps_a_users_other_files(trained_dir, trained, tmp_path) -> None:
    import shutil

    from spacy.tokens import DocBin

    dev = tmp_path / "dev.spacy"
    DocBin(docs=[eg.reference for eg in trained.examples]).to_disk(dev)
    model = tmp_path / "model"
    shutil.copytree(trained_dir, model)
    (model / "NOTES.md").write_text("how this model was made", encoding="utf8")
    (model / "metrics").mkdir()
    (model / "metrics" / "dev.json").write_text("{}", encoding="utf8")
    run = run_cli("calibrate", model, dev, "--temperature", "1.7")
    assert run.returncode == 0, run.stderr
    assert find_maral_ner(spacy.load(model)).score_map.temperature == pytest.approx(1.7)
    assert (model / "NOTES.md").read_text(encoding="utf8") == "how this model was made"
    assert (model / "metrics" / "dev.json").read_text(encoding="utf8") == "{}"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".model")]  # no temporary left


def test_calibrate_cli_stores_a_given_temperature_and_reports_the_dev_set_at_it(trained_dir, trained, tmp_path) -> None:
    from spacy.tokens import DocBin

    from spacy_maral.evaluation.calibration import reliability, tempered_scores
    from spacy_maral.evaluation.raw_text import entity_logits

    dev = tmp_path / "dev.spacy"
    DocBin(docs=[eg.reference for eg in trained.examples]).to_disk(dev)
    out, report = tmp_path / "calibrated", tmp_path / "cal.json"
    base = ["calibrate", trained_dir, dev]
    run = run_cli(*base, "--output", out, "--report", report, "--temperature", "2.5")
    assert run.returncode == 0, run.stderr
    result = json.loads(report.read_text())
    assert result["temperature"] == 2.5 and result["fitted"] is False
    assert find_maral_ner(spacy.load(out)).score_map.temperature == 2.5
    # the report's "after" is the dev set's calibration at the given temperature
    nlp = spacy.load(trained_dir)
    logits, classes, correct = entity_logits(nlp, list(DocBin().from_disk(dev).get_docs(nlp.vocab)))
    expected = reliability(tempered_scores(logits, classes, 2.5), correct)["ece"]
    assert result["after"]["ece"] == pytest.approx(expected, abs=1e-6)
    # a negative temperature is refused before any work, and nothing is written
    bad = run_cli(*base, "--output", tmp_path / "bad", "--temperature", "-1")
    assert bad.returncode == 1 and "--temperature must be > 0" in " ".join(bad.stderr.split())  # errors go to stderr
    assert not (tmp_path / "bad").exists()


def test_a_gold_corpus_without_entities_is_refused_before_anything_is_fitted_or_scored(trained_dir, trained, tmp_path) -> None:
    """A dev set whose tags were lost: calibrate stored T = 1 over the pipeline's score map
    ("all predicted entities are wrong"), guard saw no source dev F1 to lose and trusted
    the student, evaluate scored 0.00."""
    from spacy.tokens import Doc, DocBin

    untagged = tmp_path / "untagged.spacy"
    docs = [Doc(eg.reference.vocab, words=[t.text for t in eg.reference], spaces=[bool(t.whitespace_) for t in eg.reference])
            for eg in trained.examples]
    DocBin(docs=docs).to_disk(untagged)
    text = tmp_path / "target.txt"
    text.write_text("Angela Merkel besuchte Paris.\n", encoding="utf8")
    stored = (Path(trained_dir) / "maral_ner" / "cfg").read_bytes()
    for args in (["calibrate", trained_dir, untagged], ["evaluate", untagged, f"m={trained_dir}"],
                 ["guard", trained_dir, trained_dir, untagged, text, "-o", tmp_path / "g.json"]):
        run = run_cli(*args)
        said = " ".join(run.stderr.split())
        assert run.returncode == 1 and f"none of its {len(docs)} sentences has a gold entity" in said, (args[0], said)
    assert (Path(trained_dir) / "maral_ner" / "cfg").read_bytes() == stored and not (tmp_path / "g.json").exists()


def test_student_temperature_fits_only_on_the_students_own_language() -> None:
    from spacy_maral.evaluation.calibration import OFF_DEV_LANGUAGE_TEMPERATURE, student_temperature

    assert OFF_DEV_LANGUAGE_TEMPERATURE == 2.0
    assert student_temperature(0.0, "es", "es") is None  # its own language's dev set: fit
    assert student_temperature(0.0, None, "es") is None  # not a student of a known language: fit
    assert student_temperature(0.0, "de", "es") == 2.0
    assert student_temperature(1.5, "de", "es") == 1.5 and student_temperature(1.5, "es", "es") == 1.5
    with pytest.raises(ValueError):
        student_temperature(-1.0, "de", "es")


def test_calibrate_refuses_an_unknown_score_map_before_loading(tmp_path) -> None:
    """--score-map takes one of calibration's maps: any other value is refused by the
    parser (exit status 2, the choices named), before the model is even looked for."""
    run = run_cli("calibrate", tmp_path / "no-model", tmp_path / "dev.spacy", "--score-map", "isotonic")
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "'isotonic' is not one of 'temperature', 'platt'" in " ".join(run.stderr.split()), run.stderr


def test_calibrate_cli_stores_the_off_language_temperature_for_a_student_of_another_language(trained_dir, trained, tmp_path) -> None:
    from spacy.tokens import DocBin

    dev = tmp_path / "dev.spacy"
    docs = score_ordered_gold(trained)  # right and wrong entities, more of them right at higher scores
    DocBin(docs=docs).to_disk(dev)
    base = ["calibrate", trained_dir, dev, "--lang", "en", "--score-map", "platt"]
    for target, fitted in (("de", False), ("en", True)):
        out, report = tmp_path / f"calibrated-{target}", tmp_path / f"cal-{target}.json"
        run = run_cli(*base, "--output", out, "--report", report, "--target-lang", target)
        assert run.returncode == 0, run.stderr
        result = json.loads(report.read_text())
        assert result["fitted"] is fitted and result["target_lang"] == target
        stored = find_maral_ner(spacy.load(out)).score_map
        assert (stored.temperature, stored.slope, stored.offset) == pytest.approx(
            (result["temperature"], result["slope"], result["offset"]))
        if not fitted:  # the student of another language: the constant, no Platt map
            assert (result["temperature"], result["slope"], result["offset"], result["score_map"]) == (2.0, 1.0, 0.0, "temperature")
    # its own language's student: Platt's slope and offset on the scores at T = 1, of the
    # lowest log loss of the dev entities' scores (computed here by hand) among neighbours
    assert result["score_map"] == "platt" and result["temperature"] == 1.0 and result["slope"] != 1.0
    assert result["after"]["ece"] < result["before"]["ece"]
    logits, classes, correct = entity_logits(trained.nlp, docs)  # the pipeline saved in trained_dir
    p = numpy.array([softmax(row)[k] for row, k in zip(logits, classes)])
    c = correct.astype(float)

    def log_loss(a: float, b: float) -> float:
        q = numpy.clip(1.0 / (1.0 + ((1.0 - p) / p) ** a * numpy.exp(-b)), 1e-9, 1 - 1e-9)
        return float(-(c * numpy.log(q) + (1 - c) * numpy.log(1 - q)).mean())

    a, b = result["slope"], result["offset"]
    assert log_loss(a, b) <= min(log_loss(a * 0.9, b), log_loss(a * 1.1, b), log_loss(a, b - 0.1), log_loss(a, b + 0.1), log_loss(1.0, 0.0))
    # --target-lang needs the dev set's language, and says so before any work
    bad = run_cli("calibrate", trained_dir, dev, "--output", tmp_path / "bad", "--target-lang", "de")
    assert bad.returncode == 1 and "needs --lang" in " ".join(bad.stderr.split())
    assert not (tmp_path / "bad").exists()


# ------------------------------------------- training and labelling on raw text


def test_adaptation_corpus_tokenizes_source_raw_text_with_source_rules(tmp_path) -> None:
    from spacy.tokens import DocBin

    from spacy_maral.adaptation.examples import is_target
    from spacy_maral.training.readers import AdaptationCorpus

    source = _gold_doc(["Die", "SPD-Fraktion", "tagte", "."], [(1, 2, "ORG")], spaces=[True, True, False, False])
    target = Doc(source.vocab, words=["Baden-Württemberg", "ist", "schön"])
    DocBin(docs=[source]).to_disk(tmp_path / "s.spacy")
    DocBin(docs=[target]).to_disk(tmp_path / "t.spacy")
    nlp = spacy.blank("xx")  # the pipeline's own rules split hyphens
    tokens = {}
    for name, kwargs in {"gold": {}, "xx": {"gold_preproc": False}, "de": {"gold_preproc": False, "source_lang": "de"}}.items():
        reader = AdaptationCorpus(tmp_path / "s.spacy", tmp_path / "t.spacy", 1, 1, **kwargs)
        examples = list(reader(nlp))
        src = [eg for eg in examples if not is_target(eg)][0]
        tgt = [eg for eg in examples if is_target(eg)][0]
        tokens[name] = [t.text for t in src.predicted]
        assert [t.text for t in tgt.predicted] == ["Baden-Württemberg", "ist", "schön"]  # the teacher's tokens
        if name == "de":
            assert [(e.start, e.end, e.label_) for e in src.get_aligned_spans_y2x(src.reference.ents)] == [(1, 2, "ORG")]
    assert tokens["gold"] == ["Die", "SPD-Fraktion", "tagte", "."]
    assert tokens["xx"] == ["Die", "SPD", "-", "Fraktion", "tagte", "."]
    assert tokens["de"] == ["Die", "SPD-Fraktion", "tagte", "."]


def test_pseudo_label_input_is_tokenized_from_raw_text(tmp_path) -> None:
    from spacy_maral.corpora.target_text import iter_target_docs

    path = tmp_path / "t.conll"
    path.write_text("Baden-Württemberg B-LOC\nwählt O\n( O\nCDU-Chef B-PER\n) O\n", encoding="utf8")
    xx = spacy.blank("xx")
    (doc,) = list(iter_target_docs(path, xx))
    assert doc.text == "Baden-Württemberg wählt (CDU-Chef)"
    assert [t.text for t in doc] == ["Baden", "-", "Württemberg", "wählt", "(", "CDU", "-", "Chef", ")"]
    # the tags (diagnostics only) move with the characters
    assert [(e.text, e.label_) for e in doc.ents] == [("Baden-Württemberg", "LOC"), ("CDU-Chef", "PER")]
    (kept,) = list(iter_target_docs(path, xx, gold_tokens=True))
    assert [t.text for t in kept] == ["Baden-Württemberg", "wählt", "(", "CDU-Chef", ")"]
    de = set_tokenizer_lang(spacy.blank("xx"), "de")
    (doc_de,) = list(iter_target_docs(path, de))
    assert [t.text for t in doc_de] == ["Baden-Württemberg", "wählt", "(", "CDU-Chef", ")"]


def test_calibrate_cli_without_predicted_entities_keeps_temperature_one(trained_dir, tmp_path) -> None:
    from spacy.tokens import DocBin

    dev = tmp_path / "dev.spacy"
    vocab = spacy.blank("xx").vocab
    doc = Doc(vocab, words=[".", ",", "."])  # punctuation: no entity predicted
    doc.ents = [doc.char_span(2, 3, label="LOC")]  # a gold one (a dev set without any is refused)
    DocBin(docs=[doc]).to_disk(dev)
    out = tmp_path / "calibrated"
    run = run_cli("calibrate", trained_dir, dev, "--output", out)
    assert run.returncode == 0, run.stderr
    assert "nothing to calibrate" in " ".join(run.stderr.split())  # a warning: stderr
    assert find_maral_ner(spacy.load(out)).score_map.temperature == 1.0
    # a given temperature is stored on such a dev set too (its ECE, which it can't measure, was formatted)
    given = tmp_path / "given"
    run = run_cli("calibrate", trained_dir, dev, "--output", given, "--temperature", "1.5")
    assert run.returncode == 0, run.stderr
    assert "T=1.500 is stored, its calibration not measured" in " ".join(run.stderr.split())
    assert find_maral_ner(spacy.load(given)).score_map.temperature == 1.5


def test_evaluate_model_specs_names_and_refuses_two_of_one_name(tmp_path) -> None:
    from spacy_maral.cli.evaluate import model_specs

    (tmp_path / "lr=1e-4" / "model-best").mkdir(parents=True)
    bare_with_equals = str(tmp_path / "lr=1e-4" / "model-best")
    assert model_specs(["teacher=runs/t/model-best", "runs/s/model-last"]) == [
        ("teacher", "runs/t/model-best"), ("model-last", "runs/s/model-last")]
    assert model_specs(["best=runs/lr=1e-4/model-best"]) == [("best", "runs/lr=1e-4/model-best")]
    assert model_specs(["runs/lr=1e-4/model-best"]) == [("model-best", "runs/lr=1e-4/model-best")]
    assert model_specs([bare_with_equals]) == [("model-best", bare_with_equals)]
    assert model_specs(["xx_maral_ner"]) == [("xx_maral_ner", "xx_maral_ner")]
    with pytest.raises(ValueError, match="two pipelines are named 'model-best'.*runs/a/model-best, runs/b/model-best"):
        model_specs(["runs/a/model-best", "runs/b/model-best"])


def test_prf_by_hand() -> None:
    from spacy_maral.prf import prf

    assert prf(2, 1, 3) == pytest.approx((2 / 3, 0.4, 0.5))  # F1 = 2 * (2/3 * 0.4) / (2/3 + 0.4)
    assert prf(0, 0, 0) == (0.0, 0.0, 0.0) and prf(0, 2, 0) == (0.0, 0.0, 0.0)
    assert prf(3, 0, 1) == pytest.approx((1.0, 0.75, 6 / 7))
