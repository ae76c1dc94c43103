"""Pseudo-labels from a teacher ensemble: the mean of the teachers' span probabilities,
decoded once (spacy_maral.inference.ensemble, pseudo-label --ensemble)."""
import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy
import pytest
import spacy
from spacy.tokens import Doc, DocBin
from thinc.api import Adam, fix_random_seed

from helpers import LEARN_RATE, N_STEPS, STEPS_PER_EPOCH, build_nlp, make_examples
from spacy_maral.adaptation.soft_labels import AGREE_ATTR, PSEUDO_KEY
from spacy_maral.inference.engines import make_engine
from spacy_maral.inference.ensemble import teachers_agree
from spacy_maral.inference.pseudo_label import pseudo_label
from spacy_maral.ml.decoding import decode_doc
from spacy_maral.ml.spans import enumerate_spans
from spacy_maral.pipeline.loading import load_pipeline

TEXTS = [
    "Angela Merkel visited Paris with Siemens .",
    "Google opened an office in Berlin .",
    "John Smith met Maria in London last week .",
    "The United Nations met in New York .",
    "Nothing to see here .",
    "Barack Obama and Microsoft went to Madrid .",
]


@pytest.fixture(scope="module")
def second_dir(tiny_encoder, tmp_path_factory) -> Path:
    """A second tiny teacher: the conftest one's recipe with another seed and half its steps."""
    nlp = build_nlp(tiny_encoder)
    fix_random_seed(1)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = Adam(LEARN_RATE)
    for step in range(N_STEPS // 2):
        nlp.update(examples, sgd=optimizer, drop=0.0)
        if (step + 1) % STEPS_PER_EPOCH == 0:
            nlp.get_pipe("maral_ner").end_epoch()
    path = tmp_path_factory.mktemp("second") / "pipeline"
    nlp.to_disk(path)
    return path


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("target") / "target.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf8")
    return path


def fp32(path: Path):
    return load_pipeline(path, precision="fp32")


def span_table(nlp, text: str) -> Dict[Tuple[int, int], numpy.ndarray]:
    """Every span's probabilities as the teacher alone gives them: (start, end) -> (C,)."""
    ner = nlp.get_pipe("maral_ner")
    doc = list(nlp.pipe([text], disable=["maral_ner"]))[0]
    scores = ner.predict([doc])
    probs = ner.probabilities(scores)
    return {(int(s), int(e)): probs[i].astype(numpy.float64) for i, (_, s, e) in enumerate(scores.spans.tolist())}


def shard_docs(out: Path, vocab) -> List[Doc]:
    return [d for f in sorted(out.glob("shard-*.spacy")) for d in DocBin().from_disk(f).get_docs(vocab)]


def soft_labels(doc: Doc) -> List[Tuple[int, int, str, numpy.ndarray]]:
    group = doc.spans[PSEUDO_KEY]
    probs = numpy.asarray(group.attrs["probs"], dtype=numpy.float64).reshape(len(group), len(group.attrs["classes"]))
    return [(s.start, s.end, s.label_, p) for s, p in zip(group, probs)]


def test_soft_labels_are_the_decoded_mean_of_the_teachers(trained_dir, second_dir, target, tmp_path) -> None:
    first, second = fp32(trained_dir), fp32(second_dir)
    classes = list(first.get_pipe("maral_ner").classes)
    stats = pseudo_label(first, target, tmp_path / "ens", batch_size=2, shard_size=4, progress=False, ensemble=[second])
    docs = shard_docs(tmp_path / "ens", first.vocab)
    assert [d.text.strip() for d in docs] == TEXTS
    differs_from_first = 0
    for doc, text in zip(docs, TEXTS):
        a, b = span_table(first, text), span_table(second, text)
        assert a.keys() == b.keys()
        keys = list(a)
        mean = numpy.stack([(a[k] + b[k]) / 2 for k in keys])
        starts, ends = numpy.array([s for s, _ in keys]), numpy.array([e for _, e in keys])
        expected = [(s, e, classes[c]) for s, e, c, *_ in decode_doc(starts, ends, mean, len(doc))]
        got = soft_labels(doc)
        assert [(s, e, label) for s, e, label, _ in got] == expected
        for s, e, _, probs in got:
            numpy.testing.assert_allclose(probs, (a[(s, e)] + b[(s, e)]) / 2, rtol=1e-5, atol=1e-6)
        alone = [(s, e, classes[c]) for s, e, c, *_ in decode_doc(starts, ends, numpy.stack([a[k] for k in keys]), len(doc))]
        differs_from_first += alone != expected or any(not numpy.allclose(p, a[(s, e)], atol=1e-4) for s, e, _, p in got)
    assert sum(stats.entities.values()) > 0, "the ensemble labels no entity: the checks above are vacuous"
    assert differs_from_first, "the second teacher changed nothing: the test cannot tell an ensemble from one teacher"
    manifest = json.loads((tmp_path / "ens" / "_manifest.json").read_text(encoding="utf8"))
    assert len(manifest["ensemble_head_sha256"]) == 1


def test_each_sentence_records_whether_the_teachers_own_entities_agree(trained_dir, second_dir, target, tmp_path) -> None:
    first, second = fp32(trained_dir), fp32(second_dir)
    stats = pseudo_label(first, target, tmp_path / "ens", batch_size=2, shard_size=4, progress=False, ensemble=[second])
    flags = []
    for doc, text in zip(shard_docs(tmp_path / "ens", first.vocab), TEXTS):
        a, b = span_table(first, text), span_table(second, text)
        keys = list(a)
        starts, ends = numpy.array([s for s, _ in keys]), numpy.array([e for _, e in keys])
        own = [{(s, e, c) for s, e, c, *_ in decode_doc(starts, ends, numpy.stack([t[k] for k in keys]), len(doc))} for t in (a, b)]
        flags.append(doc.spans[PSEUDO_KEY].attrs[AGREE_ATTR])
        assert flags[-1] is (own[0] == own[1]), text
    assert True in flags and False in flags, "the teachers agree everywhere or nowhere: the test can't tell"
    assert stats.agreed == sum(flags)
    summary = json.loads((tmp_path / "ens" / "summary.json").read_text(encoding="utf8"))
    assert summary["sentences_teachers_agree"] == sum(flags)
    # one teacher records nothing; a teacher with itself agrees everywhere
    pseudo_label(first, target, tmp_path / "one", shard_size=4, progress=False)
    assert all(AGREE_ATTR not in d.spans[PSEUDO_KEY].attrs for d in shard_docs(tmp_path / "one", first.vocab))
    pseudo_label(first, target, tmp_path / "self", shard_size=4, progress=False, ensemble=[fp32(trained_dir)])
    assert all(d.spans[PSEUDO_KEY].attrs[AGREE_ATTR] is True for d in shard_docs(tmp_path / "self", first.vocab))


def test_teachers_agree_needs_the_same_spans_and_the_same_labels() -> None:
    """teachers_agree on hand-made probabilities: one span each, over classes O, PER, LOC."""
    vocab = spacy.blank("xx").vocab
    docs = [Doc(vocab, words=["Anna", "sings", "."]), Doc(vocab, words=["Rain", "."])]
    spans = enumerate_spans([3, 2], max_width=2)

    def teacher(entities: Dict[Tuple[int, int, int], int]) -> numpy.ndarray:
        probs = numpy.tile(numpy.array([[0.9, 0.05, 0.05]], dtype=numpy.float32), (len(spans), 1))
        for row, (d, s, e) in enumerate(spans.tolist()):
            if (d, s, e) in entities:
                probs[row] = [0.1, 0.1, 0.1]
                probs[row, entities[(d, s, e)]] = 0.8
        return probs

    anna_per = teacher({(0, 0, 1): 1})
    assert teachers_agree(docs, spans, [anna_per, teacher({(0, 0, 1): 1})]) == [True, True]
    assert teachers_agree(docs, spans, [anna_per, teacher({(0, 0, 1): 2})]) == [False, True]  # same span, other label
    assert teachers_agree(docs, spans, [anna_per, teacher({(0, 0, 2): 1})]) == [False, True]  # other span
    assert teachers_agree(docs, spans, [anna_per, anna_per, teacher({})]) == [False, True]  # one of three finds none
    assert teachers_agree(docs, spans, [anna_per, teacher({(0, 0, 1): 1, (1, 0, 1): 2})]) == [True, False]


def test_three_teachers_weigh_one_third_each(trained_dir, second_dir, target, tmp_path) -> None:
    """The first teacher and the second twice: every soft label is (a + 2b) / 3 (a running
    pairwise mean would give (a + 3b) / 4)."""
    first = fp32(trained_dir)
    pseudo_label(first, target, tmp_path / "three", batch_size=2, shard_size=4, progress=False,
                 ensemble=[fp32(second_dir), fp32(second_dir)])
    second = fp32(second_dir)
    checked = 0
    for doc, text in zip(shard_docs(tmp_path / "three", first.vocab), TEXTS):
        a, b = span_table(first, text), span_table(second, text)
        for s, e, _, probs in soft_labels(doc):
            numpy.testing.assert_allclose(probs, (a[(s, e)] + 2 * b[(s, e)]) / 3, rtol=1e-5, atol=1e-6)
            checked += 1
    assert checked, "no soft label to check"


def test_a_teacher_averaged_with_itself_labels_as_it_alone(trained_dir, target, tmp_path) -> None:
    teacher = fp32(trained_dir)
    pseudo_label(teacher, target, tmp_path / "one", batch_size=2, shard_size=4, progress=False)
    pseudo_label(teacher, target, tmp_path / "two", batch_size=2, shard_size=4, progress=False, ensemble=[fp32(trained_dir)])
    for one, two in zip(shard_docs(tmp_path / "one", teacher.vocab), shard_docs(tmp_path / "two", teacher.vocab)):
        a, b = soft_labels(one), soft_labels(two)
        assert [x[:3] for x in a] == [x[:3] for x in b]
        for x, y in zip(a, b):
            numpy.testing.assert_allclose(x[3], y[3], rtol=1e-6)


def test_an_ensemble_folder_is_not_a_single_teacher_one(trained_dir, second_dir, target, tmp_path) -> None:
    first = fp32(trained_dir)
    pseudo_label(first, target, tmp_path / "out", shard_size=4, progress=False)
    with pytest.raises(ValueError, match="another run|other"):
        pseudo_label(first, target, tmp_path / "out", shard_size=4, progress=False, ensemble=[fp32(second_dir)])


def test_a_member_with_other_labels_is_refused_before_work(trained_dir, tiny_encoder, target, tmp_path) -> None:
    other = build_nlp(tiny_encoder)
    ner = other.get_pipe("maral_ner")
    for label in ("PER", "LOC"):
        ner.add_label(label)
    other.initialize()
    other.meta["name"] = "two_labels"
    with pytest.raises(ValueError, match=r"ensemble teacher 2 \(two_labels\) has the classes"):
        pseudo_label(fp32(trained_dir), target, tmp_path / "out", progress=False, ensemble=[other])
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("shard-*"))


@pytest.mark.slow
def test_ensemble_in_worker_processes_is_bit_identical(trained_dir, second_dir, target, tmp_path) -> None:
    first = fp32(trained_dir)
    here = pseudo_label(first, target, tmp_path / "here", batch_size=2, shard_size=2, progress=False, ensemble=[fp32(second_dir)])
    with make_engine("local", trained_dir, n_process=2, threads=1, precision="fp32", ensemble=[second_dir]) as workers:
        there = pseudo_label(first, target, tmp_path / "there", batch_size=2, shard_size=2, progress=False,
                             ensemble=[fp32(second_dir)], engine=workers)
    assert here.entities == there.entities and here.shards_written == there.shards_written == 3
    for shard in sorted((tmp_path / "here").glob("shard-*.spacy")):
        assert (tmp_path / "there" / shard.name).read_bytes() == shard.read_bytes()
    pseudo_label(first, target, tmp_path / "alone", batch_size=2, shard_size=2, progress=False)
    assert any((tmp_path / "alone" / shard.name).read_bytes() != shard.read_bytes()
               for shard in (tmp_path / "there").glob("shard-*.spacy")), "the workers labelled with the first teacher alone"
    with make_engine("local", trained_dir, n_process=2, threads=1, precision="fp32") as single:
        with pytest.raises(ValueError, match="ensemble teachers"):
            pseudo_label(first, target, tmp_path / "bad", progress=False, ensemble=[fp32(second_dir)], engine=single)


def test_pseudo_label_command_takes_ensemble_teachers(trained_dir, second_dir, target, tmp_path) -> None:
    from typer.testing import CliRunner

    from spacy_maral.cli import app

    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["pseudo-label", str(trained_dir), str(target), str(out), "--ensemble", str(second_dir),
                                      "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "_manifest.json").read_text(encoding="utf8"))
    assert len(manifest["ensemble_head_sha256"]) == 1
    agreed = json.loads((out / "summary.json").read_text(encoding="utf8"))["sentences_teachers_agree"]
    assert f"{agreed} of {len(TEXTS)} sentences where every teacher found the same entities" in result.output
    listed = tmp_path / "teachers.json"  # what train-teachers writes
    listed.write_text(json.dumps({"teachers": {"1": {"model": str(second_dir)}}}), encoding="utf8")
    result = CliRunner().invoke(app, ["pseudo-label", str(trained_dir), str(target), str(tmp_path / "from"), "--ensemble-from", str(listed),
                                      "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    for shard in sorted(out.glob("shard-*.spacy")):
        assert (tmp_path / "from" / shard.name).read_bytes() == shard.read_bytes()
    missing = CliRunner().invoke(app, ["pseudo-label", str(trained_dir), str(target), str(tmp_path / "x"), "--ensemble",
                                       str(tmp_path / "no-such-teacher")])
    assert missing.exit_code == 1 and "no-such-teacher" in missing.output


def test_pseudo_label_command_loads_teachers_by_package_name(target, tmp_path, monkeypatch) -> None:
    """A teacher and an ensemble member given as installed package names reach spacy.load
    as names (a Path would make spaCy look for a directory of that name: E052)."""
    from typer.testing import CliRunner

    from spacy_maral.cli import app
    from spacy_maral.pipeline import loading, location

    asked = []

    def fake_load(model, precision="auto", **kwargs):
        asked.append(model)
        if len(asked) == 2:
            raise OSError("stop here")
        return spacy.blank("de")

    monkeypatch.setattr(loading, "load_pipeline", fake_load)
    monkeypatch.setattr(location, "installed_package", lambda name: name in ("xx_maral_ner", "xx_other_teacher"))
    result = CliRunner().invoke(app, ["pseudo-label", "xx_maral_ner", str(target), str(tmp_path / "out"), "--ensemble", "xx_other_teacher"])
    assert result.exit_code == 1 and "stop here" in result.output
    assert asked == ["xx_maral_ner", "xx_other_teacher"]
    assert all(isinstance(name, str) for name in asked)
