"""End-to-end tests of stage 2 on the tiny random encoder of conftest.py.

The reader (spacy_maral.AdaptationCorpus.v1), the teacher's pseudo-labelling
(spacy_maral.inference.pseudo_label), a two-epoch `spacy train configs/adapt.cfg` run with its
diagnostics, and a run killed with SIGKILL and resumed from its checkpoint.
"""
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc, DocBin, Span, SpanGroup
from thinc.api import Adam, Config

from helpers import REPO, TRAIN_SENTENCES, make_examples, source_config
from spacy_maral.adaptation.examples import is_target, target_index
from spacy_maral.adaptation.progressive import AdaptationSettings, ProgressiveAdaptation
from spacy_maral.adaptation.soft_labels import DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, SoftLabelStore, attach_soft_labels
from spacy_maral.corpora.target_text import iter_target_docs
from spacy_maral.inference.pseudo_label import pseudo_label
from spacy_maral.ml.decoding import decode_doc
from spacy_maral.ml.span_ner import SpanScores
from spacy_maral.ml.spans import count_spans, enumerate_spans
from spacy_maral.pipeline.loading import load_pipeline
from spacy_maral.training.callbacks import (
    CHECKPOINT_MARKER,
    copy_weights_from,
    find_checkpoint,
    freeze_word_embeddings_of,
    load_checkpoint,
    save_checkpoint,
)
from spacy_maral.training.compact import kept_layers
from spacy_maral.training.readers import AdaptationCorpus, target_subset

# Target-language sentences with tags: the tags are diagnostics only (pseudo_label_prf).
TARGET_SENTENCES: List[Tuple[str, List[Tuple[int, int, str]]]] = [
    ("Angela Merkel besuchte Paris am Montag .", [(0, 2, "PER"), (3, 4, "LOC")]),
    ("Siemens eröffnete ein Büro in Berlin .", [(0, 1, "ORG"), (5, 6, "LOC")]),
    ("John Smith arbeitet für Google in London .", [(0, 2, "PER"), (4, 5, "ORG"), (6, 7, "LOC")]),
    ("Die Olympic Games beginnen in Madrid .", [(1, 3, "MISC"), (5, 6, "LOC")]),
    ("Maria Garcia traf das Red Cross Team .", [(0, 2, "PER"), (4, 6, "ORG")]),
    ("Es regnete den ganzen Tag .", []),
]
N_TARGET_TAGS = sum(len(t) for _, t in TARGET_SENTENCES)
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONWARNINGS": "ignore",
}
RUN_TIMEOUT = 420  # seconds for one `spacy train` subprocess (a busy 2-core machine)


# --------------------------------------------------------------------- helpers
def tagged_doc(nlp, text: str, ents: Sequence[Tuple[int, int, str]]) -> Doc:
    doc = Doc(nlp.vocab, words=text.split())
    doc.ents = [Span(doc, s, e, label=label) for s, e, label in ents]
    return doc


def write_docbin(path: Path, docs: Sequence[Doc]) -> Path:
    db = DocBin(store_user_data=True)
    for doc in docs:
        db.add(doc)
    db.to_disk(path)
    return path


def read_shards(directory: Path, vocab) -> List[Doc]:
    docs: List[Doc] = []
    for file in sorted(directory.glob("*.spacy")):
        docs.extend(DocBin().from_disk(file).get_docs(vocab))
    return docs


def pseudo_of(doc: Doc) -> Tuple[List[Tuple[int, int, str]], numpy.ndarray]:
    group = doc.spans[PSEUDO_KEY]
    probs = numpy.asarray(group.attrs["probs"], dtype=numpy.float64).reshape(len(group), len(group.attrs["classes"]))
    return [(s.start, s.end, s.label_) for s in group], probs


@pytest.fixture(scope="module")
def data(tiny_encoder, tmp_path_factory) -> Dict[str, Path]:
    """A tiny teacher trained on TRAIN_SENTENCES, the source corpus and the tagged target corpus."""
    work = tmp_path_factory.mktemp("stage2")
    nlp = spacy.util.load_model_from_config(source_config(tiny_encoder), auto_fill=True, validate=True)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.01)
    for i in range(80):
        nlp.update(examples, sgd=optimizer, drop=0.0)
        if i % 10 == 9:
            nlp.get_pipe("maral_ner").end_epoch()
    nlp.to_disk(work / "teacher")
    write_docbin(work / "source.spacy", [eg.reference for eg in examples])
    write_docbin(work / "target.spacy", [tagged_doc(nlp, t, e) for t, e in TARGET_SENTENCES])
    return {
        "work": work, "teacher": work / "teacher", "source": work / "source.spacy", "target": work / "target.spacy",
        "encoder": tiny_encoder,
    }


@pytest.fixture(scope="module")
def teacher(data):
    # fp32: these tests compare scores of the same spans batched differently, which
    # bfloat16 (the default on CPUs that have it) changes by up to 4e-4 with the thread count
    return load_pipeline(data["teacher"], precision="fp32")


@pytest.fixture(scope="module")
def pseudo_dir(data, teacher) -> Path:
    out = data["work"] / "pseudo"
    pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)
    return out


# --------------------------------------------------------------------- reader
READER_TARGET = [
    "Paris ist schön .",
    "Berlin liegt an der Spree .",
    "Maria arbeitet .",
    "Google und Siemens .",
    "Ein Satz .",
    "Noch ein Satz hier .",
    "Das Ende .",
]


@pytest.fixture
def reader_corpora(tmp_path) -> Tuple[Path, Path]:
    nlp = spacy.blank("xx")
    source = write_docbin(tmp_path / "src.spacy", [tagged_doc(nlp, t, e) for t, e in TRAIN_SENTENCES])
    target_docs = []
    for i, text in enumerate(READER_TARGET):
        doc = Doc(nlp.vocab, words=text.split())
        attach_soft_labels(doc, [(0, 1)], numpy.array([[0.3, 0.6, 0.1]]), ("O", "LOC", "PER"))
        if i % 2 == 0:  # some sentences carry (diagnostic) tags
            doc.spans[DIAGNOSTIC_GOLD_KEY] = SpanGroup(doc, name=DIAGNOSTIC_GOLD_KEY, spans=[Span(doc, 0, 1, label="LOC")])
        if i == 3:  # tags left in doc.ents must never reach the reference
            doc.ents = [Span(doc, 0, 1, label="ORG")]
        target_docs.append(doc)
    target = write_docbin(tmp_path / "tgt.spacy", target_docs)
    return source, target


def test_reader_blocks_and_indices(reader_corpora) -> None:
    source, target = reader_corpora
    nlp = spacy.blank("xx")
    read = AdaptationCorpus(source, target, source_per_batch=2, target_per_batch=3, seed=0)
    epoch1 = list(read(nlp))
    pattern = [is_target(eg) for eg in epoch1]
    assert pattern == [False, False, True, True, True] * 2 + [False, False, True]
    indices = [target_index(eg) for eg in epoch1 if is_target(eg)]
    assert sorted(indices) == list(range(7))
    # each target example is the target sentence of its index
    for eg in epoch1:
        if is_target(eg):
            assert eg.reference.text.strip() == READER_TARGET[target_index(eg)]
            assert eg.predicted.text == eg.reference.text
    # the source examples cycle through the (shuffled) source corpus: 6 sources, each once
    source_texts = [eg.reference.text.strip() for eg in epoch1 if not is_target(eg)]
    assert sorted(source_texts) == sorted(t for t, _ in TRAIN_SENTENCES)
    # the next epoch: every index once again, in another order
    epoch2 = list(read(nlp))
    indices2 = [target_index(eg) for eg in epoch2 if is_target(eg)]
    assert sorted(indices2) == list(range(7)) and indices2 != indices
    # seeded: a fresh reader repeats the first epoch's order
    again = AdaptationCorpus(source, target, source_per_batch=2, target_per_batch=3, seed=0)
    assert [target_index(eg) for eg in again(nlp) if is_target(eg)] == indices


def test_reader_source_cycles_when_shorter(reader_corpora) -> None:
    source, target = reader_corpora
    nlp = spacy.blank("xx")
    read = AdaptationCorpus(source, target, source_per_batch=5, target_per_batch=1, seed=3)
    examples = list(read(nlp))
    assert len(examples) == 7 * 6
    src = [eg.reference.text.strip() for eg in examples if not is_target(eg)]
    assert len(src) == 35
    # 35 draws from 6 sources in a cyclic order: every source 5 or 6 times
    counts = {t: src.count(t) for t, _ in TRAIN_SENTENCES}
    assert set(counts.values()) <= {5, 6} and sum(counts.values()) == 35


def test_reader_target_references_carry_no_entities(reader_corpora) -> None:
    source, target = reader_corpora
    nlp = spacy.blank("xx")
    examples = list(AdaptationCorpus(source, target, source_per_batch=1, target_per_batch=7)(nlp))
    targets = [eg for eg in examples if is_target(eg)]
    sources = [eg for eg in examples if not is_target(eg)]
    assert len(targets) == 7 and len(sources) == 1
    for eg in targets:
        i = target_index(eg)
        assert eg.reference.ents == () and eg.predicted.ents == ()
        assert all(t.ent_iob == 0 for t in eg.reference)  # no NER annotation at all
        assert list(eg.predicted.spans) == []
        group = eg.reference.spans[PSEUDO_KEY]
        assert [(s.start, s.end, s.label_) for s in group] == [(0, 1, "LOC")]
        assert group.attrs["classes"] == ["O", "LOC", "PER"]
        numpy.testing.assert_allclose(group.attrs["probs"], [[0.3, 0.6, 0.1]])
        if i % 2 == 0:
            assert eg.reference.user_data[DIAGNOSTIC_GOLD_KEY] == [(0, 1, "LOC")]
        else:
            assert DIAGNOSTIC_GOLD_KEY not in eg.reference.user_data
    # source examples keep their gold entities
    assert sources[0].reference.ents and not sources[0].predicted.ents


def test_reader_max_target_docs(reader_corpora) -> None:
    source, target = reader_corpora
    nlp = spacy.blank("xx")
    read = AdaptationCorpus(source, target, source_per_batch=1, target_per_batch=2, max_target_docs=4, seed=5)
    subset = target_subset(7, 4, 5)
    assert subset.tolist() == sorted(subset.tolist()) and len(set(subset.tolist())) == 4
    for _ in range(2):  # two epochs: the same subset, indices 0..3 once each
        targets = [eg for eg in read(nlp) if is_target(eg)]
        assert sorted(target_index(eg) for eg in targets) == [0, 1, 2, 3]
        for eg in targets:
            assert eg.reference.text.strip() == READER_TARGET[int(subset[target_index(eg)])]
    # 0 or a number >= the corpus size: everything
    assert target_subset(7, 0, 5).tolist() == list(range(7))
    assert target_subset(7, 9, 5).tolist() == list(range(7))


def test_reader_reads_a_shard_directory(reader_corpora, tmp_path) -> None:
    source, target = reader_corpora
    nlp = spacy.blank("xx")
    shards = tmp_path / "shards"
    shards.mkdir()
    docs = list(DocBin().from_disk(target).get_docs(nlp.vocab))
    write_docbin(shards / "shard-00000.spacy", docs[:4])
    write_docbin(shards / "shard-00001.spacy", docs[4:])
    (shards / "summary.json").write_text("{}", encoding="utf8")
    targets = [eg for eg in AdaptationCorpus(source, shards, 1, 7)(nlp) if is_target(eg)]
    assert {target_index(eg): eg.reference.text.strip() for eg in targets} == dict(enumerate(READER_TARGET))


def test_reader_errors(reader_corpora, tmp_path) -> None:
    source, target = reader_corpora
    nlp = spacy.blank("xx")
    with pytest.raises(ValueError, match=">= 1"):
        AdaptationCorpus(source, target, source_per_batch=0)
    with pytest.raises(ValueError, match="does not exist"):
        list(AdaptationCorpus(source, tmp_path / "missing.spacy")(nlp))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ValueError, match="no .spacy files"):
        list(AdaptationCorpus(source, tmp_path / "empty_dir")(nlp))
    empty = write_docbin(tmp_path / "empty.spacy", [])
    with pytest.raises(ValueError, match="target corpus .* is empty"):
        list(AdaptationCorpus(source, empty)(nlp))


def test_reader_agreed_only_keeps_the_sentences_the_teachers_agree_on(reader_corpora, tmp_path) -> None:
    source, _ = reader_corpora
    nlp = spacy.blank("xx")
    docs = []
    for i, text in enumerate(READER_TARGET):
        doc = Doc(nlp.vocab, words=text.split())
        attach_soft_labels(doc, [(0, 1)], numpy.array([[0.3, 0.6, 0.1]]), ("O", "LOC", "PER"), teachers_agree=i % 3 != 1)
        docs.append(doc)
    target = write_docbin(tmp_path / "agree.spacy", docs)
    agreed = [t for i, t in enumerate(READER_TARGET) if i % 3 != 1]
    read = AdaptationCorpus(source, target, 1, 7, agreed_only=True)
    assert sorted(eg.reference.text.strip() for eg in read(nlp) if is_target(eg)) == sorted(agreed)
    assert [eg.reference.text.strip() for eg in read.target_examples(nlp)] == agreed
    # the subset of max_target_docs is drawn from the agreed sentences only
    two = AdaptationCorpus(source, target, 1, 7, max_target_docs=2, agreed_only=True)
    subset = [eg.reference.text.strip() for eg in two.target_examples(nlp)]
    assert len(subset) == 2 and set(subset) <= set(agreed)
    # without agreed_only every sentence is used
    assert len(list(AdaptationCorpus(source, target, 1, 7).target_examples(nlp))) == len(READER_TARGET)


def test_reader_agreed_only_refuses_labels_of_one_teacher(reader_corpora, tmp_path) -> None:
    source, target = reader_corpora  # one teacher's labels: no agreement recorded
    with pytest.raises(ValueError, match="records no teachers' agreement"):
        list(AdaptationCorpus(source, target, agreed_only=True)(spacy.blank("xx")))
    nlp = spacy.blank("xx")
    doc = Doc(nlp.vocab, words=["Paris", "."])
    attach_soft_labels(doc, [], numpy.zeros((0, 3)), ("O", "LOC", "PER"), teachers_agree=False)
    none_agree = write_docbin(tmp_path / "none.spacy", [doc])
    with pytest.raises(ValueError, match="agree on no sentence"):
        list(AdaptationCorpus(source, none_agree, agreed_only=True).target_examples(nlp))


# --------------------------------------------------------------- pseudo-label
def test_pseudo_label_shards_summary_and_gold_kept_aside(data, teacher, tmp_path) -> None:
    out = tmp_path / "pseudo"
    stats = pseudo_label(teacher, data["target"], out, batch_size=3, shard_size=4, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["_lock", "_manifest.json", "shard-00000.spacy", "shard-00000.spacy.json",
                                                     "shard-00001.spacy", "shard-00001.spacy.json", "summary.json"]
    summary = json.loads((out / "summary.json").read_text(encoding="utf8"))
    ner = teacher.get_pipe("maral_ner")
    assert summary["classes"] == list(ner.classes)
    assert summary["sentences"] == 6 and summary["shards_written"] == 2 and summary["shards_kept"] == 0
    assert summary["skipped_sentences_from_finished_shards"] == 0
    assert summary["diagnostic_gold_entities"] == N_TARGET_TAGS
    assert len(DocBin().from_disk(out / "shard-00000.spacy")) == 4
    assert len(DocBin().from_disk(out / "shard-00001.spacy")) == 2
    docs = read_shards(out, teacher.vocab)
    assert [d.text.strip() for d in docs] == [t for t, _ in TARGET_SENTENCES]
    counted: Dict[str, int] = {}
    for doc, (text, tags) in zip(docs, TARGET_SENTENCES):
        assert doc.ents == ()  # the target tags are never visible as entities
        gold = [(s.start, s.end, s.label_) for s in doc.spans.get(DIAGNOSTIC_GOLD_KEY, [])]
        assert gold == tags
        spans, probs = pseudo_of(doc)
        assert probs.shape == (len(spans), len(ner.classes))
        numpy.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
        taken = numpy.zeros(len(doc), dtype=int)
        for (s, e, label), p in zip(spans, probs):
            assert ner.classes[int(p.argmax())] == label != "O"
            taken[s:e] += 1
            counted[label] = counted.get(label, 0) + 1
        assert taken.max(initial=0) <= 1  # non-overlapping
        # the same entities as the teacher's own prediction
        predicted = teacher(Doc(teacher.vocab, words=text.split()))
        assert [(s.start, s.end, s.label_) for s in predicted.spans["maral"]] == spans
        numpy.testing.assert_allclose(predicted.spans["maral"].attrs["scores"], probs.max(axis=1) if len(spans) else [], rtol=1e-4)
    assert summary["entities"] == counted == dict(stats.entities)
    # the counts of the teacher's own entities, found here with a batched pipe
    expected = Counter(e.label_ for doc in teacher.pipe([t for t, _ in TARGET_SENTENCES], batch_size=2) for e in doc.ents)
    assert counted == dict(expected) and expected, "the tiny teacher finds no entity: the checks above are vacuous"


def test_pseudo_label_rerun_keeps_finished_shards(data, teacher, tmp_path) -> None:
    out = tmp_path / "pseudo"
    first = pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)
    shard0, shard1 = out / "shard-00000.spacy", out / "shard-00001.spacy"
    bytes0, bytes1 = shard0.read_bytes(), shard1.read_bytes()
    mtime0 = shard0.stat().st_mtime_ns
    summary1 = json.loads((out / "summary.json").read_text(encoding="utf8"))
    docs1 = read_shards(out, teacher.vocab)

    second = pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)
    assert second.shards_kept == 2 and second.shards_written == 0 and second.skipped_sentences == 6
    assert shard0.read_bytes() == bytes0 and shard1.read_bytes() == bytes1
    assert shard0.stat().st_mtime_ns == mtime0  # not rewritten
    summary2 = json.loads((out / "summary.json").read_text(encoding="utf8"))
    assert summary2["entities"] == summary1["entities"] == dict(first.entities)
    assert summary2["diagnostic_gold_entities"] == summary1["diagnostic_gold_entities"] == N_TARGET_TAGS
    assert summary2["sentences"] == 6 and summary2["shards_kept"] == 2

    # a run killed before the last shard: that shard alone is labelled again, identically
    shard1.unlink()
    third = pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)
    assert third.shards_kept == 1 and third.shards_written == 1 and third.skipped_sentences == 4
    assert shard0.stat().st_mtime_ns == mtime0
    # a damaged shard is labelled again too
    shard1.write_bytes(shard1.read_bytes()[:20])
    fourth = pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)
    assert fourth.shards_kept == 1 and fourth.shards_written == 1
    docs3 = read_shards(out, teacher.vocab)
    assert len(docs3) == len(docs1) == 6
    for a, b in zip(docs1, docs3):
        spans_a, probs_a = pseudo_of(a)
        spans_b, probs_b = pseudo_of(b)
        assert spans_a == spans_b and a.text == b.text
        numpy.testing.assert_allclose(probs_a, probs_b, rtol=1e-5, atol=1e-6)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_pseudo_label_refuses_the_shards_of_another_run(data, teacher, tmp_path) -> None:
    """A rerun into a folder that holds another run's shards (other settings, input or
    teacher) stops with an error naming what differs, since the stage-2 reader would read
    every shard there; --overwrite replaces them; the same run still resumes."""
    out = tmp_path / "pseudo"
    pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=2, progress=False)
    assert len(read_shards(out, teacher.vocab)) == 6 and len(list(out.glob("shard-*.spacy"))) == 3
    with pytest.raises(ValueError, match="another pseudo-label run.*shard_size.*--overwrite"):
        pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)
    with pytest.raises(ValueError, match="limit"):
        pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=2, limit=2, progress=False)
    # a retrained teacher: other head weights
    import torch

    head = next(shim._model for node in teacher.get_pipe("maral_ner").model.walk() for shim in node.shims)
    weight = next(head.parameters())
    original = weight.detach().clone()
    with torch.no_grad():
        weight += 0.01
    try:
        with pytest.raises(ValueError, match="teacher_head_sha256"):
            pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=2, progress=False)
    finally:
        with torch.no_grad():
            weight.copy_(original)
    other = tmp_path / "other.txt"
    other.write_text("Paris liegt in Frankreich .\n", encoding="utf8")
    with pytest.raises(ValueError, match="inputs"):
        pseudo_label(teacher, other, out, progress=False)
    # nothing was touched by the refused runs: the same run resumes every shard
    again = pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=2, progress=False)
    assert again.shards_kept == 3 and again.shards_written == 0
    # --overwrite: the other run's shards go, none is left to be read with the new ones
    replaced = pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False, overwrite=True)
    assert replaced.shards_written == 2 and replaced.shards_kept == 0
    assert sorted(p.name for p in out.glob("shard-*.spacy")) == ["shard-00000.spacy", "shard-00001.spacy"]
    assert len(read_shards(out, teacher.vocab)) == 6
    # shards without a manifest (another tool, an older version) are refused too
    (out / "_manifest.json").unlink()
    with pytest.raises(ValueError, match="no _manifest.json"):
        pseudo_label(teacher, data["target"], out, batch_size=4, shard_size=4, progress=False)


def test_pseudo_label_bad_input_names_the_file(teacher, tmp_path) -> None:
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Paris .\nK\xf6ln liegt am Rhein .\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.txt, line 2: not valid UTF-8"):
        pseudo_label(teacher, latin, tmp_path / "out", progress=False)
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a.spacy").write_bytes(b"not a docbin")
    with pytest.raises(ValueError, match=r"a.spacy: not a readable .spacy"):
        pseudo_label(teacher, shards, tmp_path / "out2", progress=False)
    with pytest.raises(ValueError, match="shard_size"):
        pseudo_label(teacher, latin, tmp_path / "out3", shard_size=0, progress=False)
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"text": "Paris ."}\n', encoding="utf8")
    with pytest.raises(ValueError, match=r"corpus.jsonl: the target text must be plain text.*not .jsonl"):
        pseudo_label(teacher, jsonl, tmp_path / "out4", progress=False)
    # a UTF-8 byte-order mark (Windows editors write one) is not part of the first word
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffAngela Merkel besuchte Paris .\n".encode("utf8"))
    first = next(iter_target_docs(bom, teacher))
    assert first[0].text == "Angela" and first.text.startswith("Angela")
    # old-Mac line ends (a lone \r) end lines too, as in text mode
    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"Paris .\rBerlin .\r\nBonn .\n")
    assert pseudo_label(teacher, mac, tmp_path / "out5", progress=False).sentences == 3
    # an input refused before anything is read: --overwrite has not removed the old shards
    kept = tmp_path / "kept"
    pseudo_label(teacher, mac, kept, progress=False)
    with pytest.raises(ValueError, match="not .jsonl"):
        pseudo_label(teacher, jsonl, kept, progress=False, overwrite=True)
    assert len(read_shards(kept, teacher.vocab)) == 3
    # the output folder is the input's, or holds it: refused, and the input stays (overwrite
    # deleted a shard-named input as an old run's shard; without it, the shards mixed with it)
    inside = tmp_path / "corpus"
    inside.mkdir()
    (inside / "shard-00000.spacy").write_bytes((kept / "shard-00000.spacy").read_bytes())
    for given in (inside, inside / "shard-00000.spacy"):
        with pytest.raises(ValueError, match=r"the output folder \S*corpus (is the input folder|holds the input)"):
            pseudo_label(teacher, given, inside, progress=False, overwrite=True)
    assert sorted(p.name for p in inside.iterdir()) == ["shard-00000.spacy"]


def test_pseudo_label_text_file(teacher, tmp_path) -> None:
    text = tmp_path / "target.txt"
    lines = ["Angela Merkel besuchte Paris .", "", "  Siemens in Berlin .  ", "Maria Garcia traf John Smith ."]
    text.write_text("\n".join(lines) + "\n\n", encoding="utf8")
    stats = pseudo_label(teacher, text, tmp_path / "out", batch_size=2, shard_size=2, progress=False)
    assert stats.sentences == 3 and stats.shards_written == 2 and stats.diagnostic_gold == 0
    docs = read_shards(tmp_path / "out", teacher.vocab)
    assert [d.text for d in docs] == ["Angela Merkel besuchte Paris .", "Siemens in Berlin .", "Maria Garcia traf John Smith ."]
    assert [len(d) for d in docs] == [5, 4, 6]
    for doc in docs:
        assert PSEUDO_KEY in doc.spans and DIAGNOSTIC_GOLD_KEY not in doc.spans and doc.ents == ()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf8"))
    assert summary["sentences"] == 3 and summary["diagnostic_gold_entities"] == 0
    # limit, and an input without sentences
    assert pseudo_label(teacher, text, tmp_path / "limited", shard_size=10, limit=2, progress=False).sentences == 2
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", encoding="utf8")
    with pytest.raises(ValueError, match="no sentences"):
        pseudo_label(teacher, blank, tmp_path / "none", progress=False)
    with pytest.raises(ValueError, match="does not exist"):
        pseudo_label(teacher, tmp_path / "missing.txt", tmp_path / "none", progress=False)


def test_pseudo_labels_follow_the_whitespace_rule_of_the_teacher(teacher, tmp_path, monkeypatch) -> None:
    ner = teacher.get_pipe("maral_ner")

    def predict_entities_on_whitespace(docs):
        """Scores that make every span starting or ending on a whitespace token an entity."""
        docs = list(docs)
        spans = enumerate_spans([len(d) for d in docs], ner.max_width)
        logits = numpy.full((spans.shape[0], len(ner.classes)), -5.0, dtype=numpy.float32)
        logits[:, 0] = 5.0
        for r, (i, s, e) in enumerate(spans):
            if docs[i][int(s)].is_space or docs[i][int(e) - 1].is_space:
                logits[r, 0], logits[r, 1] = -5.0, 5.0
        vectors = numpy.zeros((spans.shape[0], 16), dtype=numpy.float32)
        return SpanScores(spans=spans, logits=logits, vectors=vectors, lengths=[len(d) for d in docs])

    # (the real predict can't run here: see test_pseudo_label_text_with_a_double_space)
    monkeypatch.setattr(ner, "predict", predict_entities_on_whitespace)
    text = tmp_path / "target.txt"
    text.write_text("Paris  ist schön\n", encoding="utf8")  # two spaces: a whitespace token
    pseudo_label(teacher, text, tmp_path / "out", progress=False)
    doc = read_shards(tmp_path / "out", teacher.vocab)[0]
    assert [t.is_space for t in doc] == [False, True, False, False]
    # the teacher's own prediction keeps no entity there ...
    predicted = teacher(doc.text)
    assert predicted.ents == ()
    # ... and neither should its pseudo-labels
    spans, _ = pseudo_of(doc)
    assert not [(s, e) for s, e, _ in spans if doc[s].is_space or doc[e - 1].is_space]


def test_pseudo_label_text_with_a_double_space(teacher, tmp_path) -> None:
    text = tmp_path / "target.txt"
    text.write_text("Paris  ist schön\nBerlin \t liegt an der Spree\n", encoding="utf8")
    stats = pseudo_label(teacher, text, tmp_path / "out", progress=False)
    assert stats.sentences == 2
    for doc in read_shards(tmp_path / "out", teacher.vocab):
        spans, _ = pseudo_of(doc)
        assert not [(s, e) for s, e, _ in spans if doc[s].is_space or doc[e - 1].is_space]


# ------------------------------------------------------------ stage-2 training
RECORDING_HOOK = '''
"""Test instrument: spacy_maral.epoch_hook.v1, plus a dump of the soft labels right after
the first before_update (that is, after a resume, before the first update)."""
import numpy
from spacy.util import registry
from spacy_maral.training.callbacks import make_epoch_hook


@registry.callbacks("test_maral.recording_hook.v1")
def make_recording_hook(checkpoint_dir=None, checkpoint_every=0, dump_path=None):
    inner = make_epoch_hook(checkpoint_dir, checkpoint_every)
    state = {"done": False}

    def before_update(nlp, info):
        inner(nlp, info)
        if dump_path and not state["done"]:
            state["done"] = True
            store = nlp.get_pipe("maral_ner").adaptation.store
            numpy.savez(dump_path, q=store.q, anchor=store.anchor, epoch=store.epoch, step=info["step"])

    return before_update
'''


def write_stage2_config(data: Dict[str, Path], path: Path, hook: str = "spacy_maral.epoch_hook.v1", max_steps: int = 6) -> Path:
    """configs/adapt.cfg with the tiny encoder, small batches and the test corpora.

    [training.before_update] becomes a section, so that `--training.before_update.*` can
    be overridden on the command line.
    """
    config = Config().from_disk(REPO / "configs" / "adapt.cfg", interpolate=False)
    config["paths"].update(
        {"source": str(data["source"]), "dev": str(data["source"]), "encoder": str(data["encoder"])}
    )
    config["components"]["transformer"]["model"]["encoder"]["get_spans"].update({"window": 32, "stride": 24})
    config["components"]["maral_ner"]["model"].update({"hidden_width": 32, "projection_dim": 16})
    config["components"]["maral_ner"]["adaptation"]["knn_k"] = 5
    config["components"]["maral_ner"]["adaptation"]["n_epochs"] = 4
    config["corpora"]["train"].update({"source_per_batch": 2, "target_per_batch": 2})
    config["training"]["batcher"]["size"] = 4
    config["training"]["max_steps"] = max_steps
    config["training"]["eval_frequency"] = 1000
    config["training"]["optimizer"]["learn_rate"].update({"warmup_steps": 2, "initial_rate": 0.001})
    config["training"]["before_update"] = {"@callbacks": hook, "checkpoint_dir": "${paths.checkpoint}", "checkpoint_every": 0}
    if hook != "spacy_maral.epoch_hook.v1":
        config["training"]["before_update"]["dump_path"] = None
    config.to_disk(path)
    return path


def spacy_train(config: Path, output: Path, *args: str) -> List[str]:
    return [sys.executable, "-m", "spacy", "train", str(config), "--output", str(output), *args]


def run_to_end(cmd: List[str], log: Path) -> str:
    with log.open("w", encoding="utf8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, cwd=str(REPO), timeout=RUN_TIMEOUT)
    text = log.read_text(encoding="utf8")
    assert proc.returncode == 0, text[-4000:]
    return text


@pytest.mark.slow
def test_stage2_two_epochs_end_to_end(data, pseudo_dir, tmp_path) -> None:
    config = write_stage2_config(data, tmp_path / "adapt.cfg", max_steps=6)
    diag = tmp_path / "diagnostics.jsonl"
    out = tmp_path / "out"
    cmd = spacy_train(config, out, "--paths.target", str(pseudo_dir), "--paths.diagnostics", str(diag))
    run_to_end(cmd, tmp_path / "train.log")
    # 6 target sentences, 2 per step: 3 steps an epoch; steps 0..6 finish two epochs
    records = [json.loads(line) for line in diag.read_text(encoding="utf8").splitlines()]
    assert [r["epoch_completed"] for r in records] == [1, 2]
    teacher_classes = json.loads((pseudo_dir / "summary.json").read_text(encoding="utf8"))["classes"]
    max_width = Config().from_disk(config, interpolate=False)["components"]["maral_ner"]["model"]["max_width"]
    n_target_spans = sum(count_spans(len(text.split()), max_width) for text, _ in TARGET_SENTENCES)
    for r in records:
        assert r["adapting_next"] is True
        assert set(r["classes"]) == set(teacher_classes)
        for stats in r["classes"].values():
            assert 0.0 <= stats["anchor_fraction"] <= 1.0
        # every span of every target sentence has exactly one hard label
        assert sum(s["spans"] for s in r["classes"].values()) == n_target_spans
        prior = r["target_prior"]
        assert set(prior) == set(teacher_classes) and sum(prior.values()) == pytest.approx(1.0, abs=1e-3)
        assert prior["O"] > 0.5
        for key in ("margins_global", "margins_local"):
            assert set(r[key]) == set(teacher_classes)
        assert r["margins_global"]["O"] is not None
        cos = numpy.asarray(r["class_mean_cosines"])
        assert cos.shape == (len(teacher_classes),) * 2
        numpy.testing.assert_allclose(numpy.diag(cos), 1.0, atol=1e-3)
        assert set(r["pseudo_label_prf"]) == {"p", "r", "f"}  # the numbers: test_pseudo_label_prf_by_hand
    # anchors were selected at the end of epoch 1: some spans anchors, some not
    fractions = [s["anchor_fraction"] for s in records[0]["classes"].values() if s["spans"]]
    assert max(fractions) > 0.0
    # the output model loads and predicts
    nlp = spacy.load(out / "model-last")
    assert nlp.pipe_names == ["transformer", "maral_ner"]
    doc = nlp("Angela Merkel besuchte Paris .")
    ner = nlp.get_pipe("maral_ner")
    # the entities, decoded here from the student's own span probabilities
    scores = ner.predict([nlp.get_pipe("transformer")(nlp.make_doc(doc.text))])
    logits = ner.decision_logits(scores)
    probs = numpy.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    expected = [(s, e, ner.classes[c]) for s, e, c, *_ in decode_doc(scores.spans[:, 1], scores.spans[:, 2], probs, len(doc))]
    assert [(e.start, e.end, e.label_) for e in doc.ents] == [(s.start, s.end, s.label_) for s in doc.spans["maral"]] == expected
    assert list(ner.classes) == teacher_classes
    store = SoftLabelStore.load(out / "model-last" / "maral_ner" / "adaptation" / "soft_labels.npz")
    assert store.epoch == 2 and store.n_docs == 6


def test_pseudo_label_prf_by_hand() -> None:
    """ProgressiveAdaptation.pseudo_label_prf decodes the soft labels of the sentences with tags and scores
    them against the tags; the P/R/F here are counted by hand."""
    # classes O, LOC, PER; max width 2: a 3-token sentence has the spans (0,1) (1,2) (2,3)
    # (0,2) (1,3), a 2-token one (0,1) (1,2) (0,2), a 1-token one (0,1)
    o, loc, per = [1.0, 0.0, 0.0], [0.2, 0.8, 0.0], [0.1, 0.0, 0.9]
    q = numpy.array([
        loc, o, [0.4, 0.0, 0.6], per, o,  # 0: (0,2) PER 0.9 wins over (0,1) LOC 0.8; (2,3) PER 0.6
        [0.3, 0.7, 0.0], o, o,  # 1: (0,1) LOC
        [0.0, 1.0, 0.0],  # 2: (0,1) LOC, but sentence 2 has no tags: not counted
    ], dtype=numpy.float32)
    adaptation = ProgressiveAdaptation(AdaptationSettings())
    adaptation.set_store(SoftLabelStore(numpy.array([3, 2, 1]), q, max_width=2))
    adaptation.gold = {0: [(0, 2, 2), (2, 3, 1)], 1: [(0, 1, 1), (1, 2, 2)]}
    # predicted {(0,2,PER), (2,3,PER)} and {(0,1,LOC)}: 2 of 3 right, 2 of 4 tags found
    p, r = 2 / 3, 2 / 4
    assert adaptation.pseudo_label_prf() == pytest.approx({"p": p, "r": r, "f": 2 * p * r / (p + r)})
    assert adaptation.pseudo_label_prf()["f"] == pytest.approx(4 / 7)
    adaptation.gold = {2: []}  # a sentence with no tags and one pseudo-entity
    assert adaptation.pseudo_label_prf() == {"p": 0.0, "r": 0.0, "f": 0.0}


def _try_load_store(path: Path):
    try:
        return SoftLabelStore.load(path)
    except Exception:  # the checkpoint may be swapped while we read it
        return None


@pytest.fixture(scope="module")
def killed_run(data, pseudo_dir, tmp_path_factory) -> Dict[str, object]:
    """A stage-2 run with a checkpoint every 2 steps, SIGKILLed once a checkpoint holds a finished epoch."""
    work = tmp_path_factory.mktemp("resume")
    hook_file = work / "recording_hook.py"
    hook_file.write_text(RECORDING_HOOK, encoding="utf8")
    config = write_stage2_config(data, work / "adapt.cfg", hook="test_maral.recording_hook.v1")
    checkpoint = work / "checkpoint"
    diag = work / "diagnostics.jsonl"

    def command(out: str, max_steps: int, every: int, dump: str) -> List[str]:
        return spacy_train(
            config, work / out, "--code", str(hook_file),
            "--paths.target", str(pseudo_dir), "--paths.diagnostics", str(diag),
            "--paths.checkpoint", str(checkpoint),
            "--training.max_steps", str(max_steps),
            "--training.before_update.checkpoint_every", str(every),
            "--training.before_update.dump_path", str(work / dump),
        )

    log1 = work / "run1.log"
    with log1.open("w", encoding="utf8") as f:
        proc = subprocess.Popen(command("out1", 1000, 2, "dump1.npz"), stdout=f, stderr=subprocess.STDOUT, env=ENV, cwd=str(REPO))
    killed = False
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            if (checkpoint / CHECKPOINT_MARKER).exists():
                store = _try_load_store(checkpoint / "maral_ner" / "adaptation" / "soft_labels.npz")
                if store is not None and store.epoch >= 1:
                    os.kill(proc.pid, signal.SIGKILL)  # wherever it is, maybe mid-checkpoint
                    killed = True
                    break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and not killed:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return {
        "work": work, "command": command, "checkpoint": checkpoint, "diag": diag, "killed": killed,
        "returncode": proc.returncode, "log": log1.read_text(encoding="utf8"),
    }


@pytest.mark.slow
def test_killed_run_leaves_a_complete_checkpoint(killed_run) -> None:
    assert killed_run["killed"], "no checkpoint with a finished epoch appeared:\n" + killed_run["log"][-4000:]
    assert killed_run["returncode"] == -signal.SIGKILL
    work: Path = killed_run["work"]
    found = find_checkpoint(killed_run["checkpoint"])
    assert found is not None and (found / CHECKPOINT_MARKER).exists()
    saved = SoftLabelStore.load(found / "maral_ner" / "adaptation" / "soft_labels.npz")
    assert saved.epoch >= 1 and saved.n_docs == 6
    assert saved.anchor.any()  # anchors were selected at the end of epoch 1
    adaptation = ProgressiveAdaptation(AdaptationSettings())
    adaptation.load(found / "maral_ner" / "adaptation")  # prior, margins, index, history
    assert adaptation.margins_p is not None and adaptation.index is not None
    assert len(adaptation.history) == saved.epoch
    assert int(numpy.load(work / "dump1.npz")["epoch"]) == 0  # run 1 started fresh
    records = killed_run["diag"].read_text(encoding="utf8").splitlines()
    assert len(records) >= saved.epoch
    # the checkpoint is a loadable pipeline, soft labels included
    nlp = spacy.load(found)
    assert nlp.get_pipe("maral_ner").adaptation.store.epoch == saved.epoch
    assert isinstance(nlp("Siemens in Berlin .").ents, tuple)


@pytest.mark.slow
def test_killed_run_resumes_and_finishes(killed_run) -> None:
    assert killed_run["killed"]
    work: Path = killed_run["work"]
    checkpoint: Path = killed_run["checkpoint"]
    found = find_checkpoint(checkpoint)
    saved = SoftLabelStore.load(found / "maral_ner" / "adaptation" / "soft_labels.npz")
    # the same command with fewer steps resumes from the checkpoint and finishes
    log2 = run_to_end(killed_run["command"]("out2", 3, 2, "dump2.npz"), work / "run2.log")
    assert "Resumed from the checkpoint" in log2
    dump2 = numpy.load(work / "dump2.npz")  # the state after the resume, before the first update
    assert int(dump2["step"]) == 0 and int(dump2["epoch"]) == saved.epoch
    numpy.testing.assert_array_equal(dump2["q"], saved.q)
    numpy.testing.assert_array_equal(dump2["anchor"], saved.anchor)
    final = SoftLabelStore.load(work / "out2" / "model-last" / "maral_ner" / "adaptation" / "soft_labels.npz")
    assert final.q.shape == saved.q.shape
    numpy.testing.assert_array_equal(final.lengths, saved.lengths)
    assert final.epoch >= saved.epoch + 1  # steps 0..3 cross one more epoch boundary
    records = [json.loads(line) for line in killed_run["diag"].read_text(encoding="utf8").splitlines()]
    assert records[-1]["epoch_completed"] == final.epoch
    nlp = spacy.load(work / "out2" / "model-last")
    assert isinstance(nlp("Siemens in Berlin .").ents, tuple)
    assert find_checkpoint(checkpoint) == checkpoint  # rewritten by run 2, complete


# ------------------------------------------------------------ checkpoints
@pytest.fixture
def trained_nlp(tiny_encoder):
    nlp = spacy.util.load_model_from_config(source_config(tiny_encoder), auto_fill=True, validate=True)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=Adam(0.01))
    return nlp


def test_save_checkpoint_is_complete_and_found(trained_nlp, tmp_path) -> None:
    path = tmp_path / "ckpt"
    save_checkpoint(trained_nlp, path)
    save_checkpoint(trained_nlp, path)  # over an existing one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no .tmp / .old left
    assert (path / CHECKPOINT_MARKER).exists() and find_checkpoint(path) == path
    text = "Angela Merkel visited Paris on Monday ."
    before = trained_nlp.get_pipe("maral_ner").predict([trained_nlp(text)]).logits
    loaded = spacy.load(path)
    numpy.testing.assert_allclose(loaded.get_pipe("maral_ner").predict([loaded(text)]).logits, before, rtol=1e-4, atol=1e-5)
    # the temporary folder of a killed save is removed by the next save
    (tmp_path / ".ckpt.tmp-killed").mkdir()
    (tmp_path / ".ckpt.tmp-killed" / "junk").write_text("x", encoding="utf8")
    save_checkpoint(trained_nlp, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    # a kill between the two renames leaves only the ".old" sibling: still found
    os.replace(path, tmp_path / ".ckpt.old")
    assert find_checkpoint(path) == tmp_path / ".ckpt.old"
    (tmp_path / ".ckpt.old" / CHECKPOINT_MARKER).unlink()
    assert find_checkpoint(path) is None
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        load_checkpoint(trained_nlp, tmp_path / ".ckpt.old")


def test_load_checkpoint_restores_the_weights(trained_nlp, tiny_encoder, tmp_path) -> None:
    text = "Angela Merkel visited Paris on Monday ."
    before = trained_nlp.get_pipe("maral_ner").predict([trained_nlp(text)]).logits.copy()
    save_checkpoint(trained_nlp, tmp_path / "ckpt")
    other = spacy.util.load_model_from_config(source_config(tiny_encoder), auto_fill=True, validate=True)
    other.initialize(lambda: make_examples(other))
    fresh = other.get_pipe("maral_ner").predict([other(text)]).logits
    assert not numpy.allclose(fresh, before, rtol=1e-4, atol=1e-5)
    load_checkpoint(other, tmp_path / "ckpt")
    after = other.get_pipe("maral_ner").predict([other(text)]).logits
    numpy.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-5)


def test_resume_keeps_word_embeddings_frozen(tiny_encoder, tmp_path) -> None:
    nlp = spacy.util.load_model_from_config(source_config(tiny_encoder), auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp))
    assert freeze_word_embeddings_of(nlp) > 0
    path = tmp_path / "ckpt"
    save_checkpoint(nlp, path)
    load_checkpoint(nlp, path)
    weight = nlp.get_pipe("transformer").model.transformer.get_input_embeddings().weight
    assert not weight.requires_grad


def test_pseudo_label_cli(data, tmp_path) -> None:
    from typer.testing import CliRunner

    from spacy_maral.cli import app

    out = tmp_path / "cli-pseudo"
    result = CliRunner().invoke(app, ["pseudo-label", str(data["teacher"]), str(data["target"]), str(out), "--shard-size", "3"])
    assert result.exit_code == 0, result.output
    assert "sentences" in result.output and "diagnostics only" in result.output
    assert (out / "summary.json").exists() and (out / "shard-00000.spacy").exists()
    missing = CliRunner().invoke(app, ["pseudo-label", str(data["teacher"]), str(tmp_path / "nope.spacy"), str(out)])
    assert missing.exit_code == 1
    assert "nope.spacy" in missing.output


@pytest.mark.slow
def test_stage2_store_covers_every_target_sentence(data, teacher, tmp_path) -> None:
    """spaCy initializes a streamed corpus (max_epochs = -1) from its first 100 examples
    only; the soft-label store must still hold every target sentence."""
    texts = [f"Maria {i} besuchte Paris ." for i in range(130)]
    target = write_docbin(tmp_path / "many.spacy", [teacher.make_doc(t) for t in texts])
    pseudo = tmp_path / "pseudo-many"
    pseudo_label(teacher, target, pseudo, batch_size=32, shard_size=64, progress=False)
    config = write_stage2_config(data, tmp_path / "adapt.cfg", max_steps=1)
    out = tmp_path / "out"
    run_to_end(spacy_train(config, out, "--paths.target", str(pseudo)), tmp_path / "train.log")
    store = SoftLabelStore.load(out / "model-last" / "maral_ner" / "adaptation" / "soft_labels.npz")
    assert store.n_docs == 130
    assert store.lengths.tolist() == [len(teacher.make_doc(t)) for t in texts]


@pytest.mark.slow
def test_stage2_with_the_mlm_switch_on(data, pseudo_dir, tmp_path) -> None:
    """The MLM auxiliary loss is off in configs/adapt.cfg and switched on from the command line."""
    default = Config().from_disk(REPO / "configs" / "adapt.cfg", interpolate=False)
    assert "maral_mlm" not in default["nlp"]["pipeline"]
    config = write_stage2_config(data, tmp_path / "adapt.cfg", max_steps=3)
    out = tmp_path / "out"
    cmd = spacy_train(
        config, out, "--paths.target", str(pseudo_dir),
        "--nlp.pipeline", '["transformer","maral_ner","maral_mlm"]', "--paths.log", str(tmp_path / "log.jsonl"),
        "--training.eval_frequency", "3",
    )
    log = run_to_end(cmd, tmp_path / "train.log")
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text(encoding="utf8").splitlines()]
    assert records and records[-1]["losses"]["maral_mlm"] > 0.0
    assert "no masked-LM head" in log  # the tiny encoder, like multilingual-e5-small, has none
    nlp = spacy.load(out / "model-last")
    assert nlp.pipe_names == ["transformer", "maral_ner", "maral_mlm"]
    assert nlp.get_pipe("maral_mlm").cfg["pretrained_head"] is False
    assert isinstance(nlp("Angela Merkel besuchte Paris .").ents, tuple)


def test_warm_start_copies_the_teacher_weights(trained, trained_dir, tiny_encoder, tmp_path) -> None:
    """configure_encoder(init_from=...) starts a pipeline from a trained one's weights."""
    from helpers import assert_same_predictions, build_nlp, predictions

    texts = [t for t, _ in TRAIN_SENTENCES]
    fresh = build_nlp(tiny_encoder)
    # labels are added in the order the data shows them: here another order than the teacher's
    fresh.initialize(lambda: list(reversed(make_examples(fresh))))
    classes = fresh.get_pipe("maral_ner").classes
    assert sorted(classes) == sorted(trained.nlp.get_pipe("maral_ner").classes)
    assert classes != trained.nlp.get_pipe("maral_ner").classes
    copied = copy_weights_from(fresh, trained_dir)
    assert copied == ["transformer", "maral_ner"]
    assert_same_predictions(predictions(fresh, texts), predictions(trained.nlp, texts))
    make = spacy.util.registry.callbacks.get("spacy_maral.configure_encoder.v1")
    other = build_nlp(tiny_encoder)
    other.initialize(lambda: make_examples(other))
    make(freeze_word_embeddings=True, init_from=str(trained_dir))(other)
    assert_same_predictions(predictions(other, texts), predictions(trained.nlp, texts))
    embeddings = other.get_pipe("transformer").model.transformer.get_input_embeddings().weight
    assert embeddings.requires_grad is False  # frozen after the copy, which rebuilds the model
    with pytest.raises(ValueError, match="not a spaCy pipeline directory"):
        copy_weights_from(fresh, tmp_path)


# ------------------------------------------------------- stage 2 in one process
# Source sentences of known shapes, so that every class count can be written down by
# hand: cycling through them, 40 sentences are 20 of shape A (5 tokens; PER, LOC),
# 10 of shape B (8 tokens; ORG, LOC) and 10 of shape C (6 tokens; MISC).
SOURCE_SHAPES: List[Tuple[str, List[Tuple[int, int, str]]]] = [
    ("Anna Berg visited Rome .", [(0, 2, "PER"), (3, 4, "LOC")]),
    ("Siemens opened an office in Berlin today .", [(0, 1, "ORG"), (5, 6, "LOC")]),
    ("Anna Berg visited Rome .", [(0, 2, "PER"), (3, 4, "LOC")]),
    ("The Olympic Games start soon .", [(1, 3, "MISC")]),
]
# Pseudo-labelled target sentences: (text, kept spans with the teacher's probabilities
# over STUDENT_TEACHER_CLASSES, the tags a tagged corpus carries for diagnostics).
STUDENT_TEACHER_CLASSES = ("O", "PER", "LOC")
STUDENT_TARGET = [
    ("Anna Berg besuchte Rom .", [((0, 2), [0.2, 0.7, 0.1]), ((3, 4), [0.3, 0.1, 0.6])], [(0, 2, "PER"), (3, 4, "LOC")]),
    ("Siemens baut in Berlin .", [((3, 4), [0.4, 0.1, 0.5])], [(0, 1, "ORG"), (3, 4, "LOC")]),
    ("Es regnet .", [], []),
    ("Die Spiele beginnen bald in Rom .", [((5, 6), [0.1, 0.2, 0.7])], [(5, 6, "LOC")]),
]


def write_student_corpora(directory: Path, n_source: int, diagnostic_tags: bool = True) -> Tuple[Path, Path]:
    """A source corpus of `n_source` sentences (SOURCE_SHAPES, cycled) and the
    pseudo-labelled STUDENT_TARGET corpus, with or without diagnostic tags."""
    directory.mkdir(parents=True, exist_ok=True)
    nlp = spacy.blank("xx")
    sources = [tagged_doc(nlp, *SOURCE_SHAPES[i % len(SOURCE_SHAPES)]) for i in range(n_source)]
    targets = []
    for text, kept, tags in STUDENT_TARGET:
        doc = Doc(nlp.vocab, words=text.split())
        probs = numpy.asarray([p for _, p in kept], dtype=numpy.float64).reshape(len(kept), len(STUDENT_TEACHER_CLASSES))
        attach_soft_labels(doc, [s for s, _ in kept], probs, STUDENT_TEACHER_CLASSES)
        if diagnostic_tags:
            doc.spans[DIAGNOSTIC_GOLD_KEY] = SpanGroup(
                doc, name=DIAGNOSTIC_GOLD_KEY, spans=[Span(doc, s, e, label=label) for s, e, label in tags]
            )
        targets.append(doc)
    return write_docbin(directory / "source.spacy", sources), write_docbin(directory / "target.spacy", targets)


def student_nlp(encoder: Path, source: Path, target: Path, corpus: Dict[str, object], adaptation: Dict[str, object] = None):
    """configs/adapt.cfg on the tiny encoder, built and initialized in this process
    (as `spacy train` does: nlp.initialize on the [training] train_corpus reader).
    RETURNS: the pipeline and its train corpus reader."""
    from spacy.util import resolve_dot_names

    config = Config().from_disk(REPO / "configs" / "adapt.cfg", interpolate=False)
    config["paths"].update({"source": str(source), "target": str(target), "dev": str(source), "encoder": str(encoder)})
    config["components"]["transformer"]["model"]["encoder"]["get_spans"].update({"window": 32, "stride": 24})
    config["components"]["maral_ner"]["model"].update({"hidden_width": 32, "projection_dim": 16})
    config["components"]["maral_ner"]["adaptation"].update({"knn_k": 5, "n_epochs": 4, **(adaptation or {})})
    config["corpora"]["train"].update(corpus)
    config = config.interpolate()
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    (train_corpus,) = resolve_dot_names(nlp.config.interpolate(), ["corpora.train"])
    nlp.initialize(lambda: train_corpus(nlp))
    return nlp, train_corpus


def test_student_class_prior_counts_the_whole_source_corpus(tiny_encoder, tmp_path) -> None:
    """pi_src and the class weights of stage 2 are counted over every source sentence
    once, as stage 1 counts them; not over the few source sentences that one pass of
    the reader interleaves with the target batches (here 4 of 40)."""
    from spacy.training import Example

    from helpers import build_nlp
    from spacy_maral.pipeline.span_labels import count_classes

    source, target = write_student_corpora(tmp_path, n_source=40)
    nlp, _ = student_nlp(tiny_encoder, source, target, {"source_per_batch": 1, "target_per_batch": 1})
    ner = nlp.get_pipe("maral_ner")
    assert ner.max_width == 5
    # by hand: spans of width 1..5 are 15 in a 5-token sentence, 30 in 8 tokens, 20 in 6
    n_spans = 20 * 15 + 10 * 30 + 10 * 20
    counts = dict(zip(ner.classes, ner.cfg["class_counts"]))
    assert counts == {"O": n_spans - 70.0, "PER": 20.0, "LOC": 30.0, "ORG": 10.0, "MISC": 10.0}
    assert ner.cfg["entities_total"] == 70 and ner.cfg["entities_too_wide"] == 0
    # what a stage-1 component counts on all 40 source examples
    stage1 = build_nlp(tiny_encoder)
    docs = list(DocBin().from_disk(source).get_docs(stage1.vocab))
    examples = [Example(Doc(stage1.vocab, words=[t.text for t in d]), d) for d in docs]
    assert len(examples) == 40
    teacher_ner = stage1.get_pipe("maral_ner")
    for label in ner.labels:
        teacher_ner.add_label(label)
    assert count_classes(examples, teacher_ner.classes, teacher_ner.max_width) == (ner.cfg["class_counts"], 70, 0)
    stage1.initialize(lambda: examples)
    assert teacher_ner.classes == ner.classes
    assert teacher_ner.cfg["class_counts"] == ner.cfg["class_counts"]
    assert teacher_ner.cfg["loss_state"] == ner.cfg["loss_state"]
    numpy.testing.assert_array_equal(ner.loss.log_prior, teacher_ner.loss.log_prior)
    numpy.testing.assert_array_equal(ner.loss.weights, teacher_ner.loss.weights)
    # the soft-label store still holds every target sentence
    assert ner.adaptation.store.n_docs == len(STUDENT_TARGET)
    # the decision rule adds tau_u * log pi_src (configs/adapt.cfg: inference_tau = tau_u),
    # pi_src with add-one smoothing; pi_tgt only enters the target loss
    assert ner.inference_tau == ner.adaptation.settings.tau_u == 0.1
    pi_src = numpy.asarray([730.0, 20.0, 30.0, 10.0, 10.0]) + 1.0
    zero = SpanScores(
        spans=numpy.zeros((1, 3), dtype=numpy.int64), logits=numpy.zeros((1, 5), dtype=numpy.float32),
        vectors=numpy.zeros((1, 16), dtype=numpy.float32), lengths=[1],
    )
    numpy.testing.assert_allclose(ner.decision_logits(zero)[0], 0.1 * numpy.log(pi_src / pi_src.sum()), rtol=1e-5)


def _log_softmax(x: numpy.ndarray) -> numpy.ndarray:
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - numpy.log(numpy.exp(shifted).sum(axis=1, keepdims=True))


def test_student_update_loss_and_gradient_by_hand(tiny_encoder, tmp_path, monkeypatch) -> None:
    """update() of the student on one source and one target sentence, against the loss
    and d_logits computed here from the logits: L = L_src + L_tgt with

    L_src = sum_i w_y * -log softmax(s + tau * log pi_src)_y / n_source_spans (source spans only),
    L_tgt = -sum_i m_i sum_c q_ic log softmax(s + tau_u * log pi_tgt)_c / sum_i m_i

    (m: the reliable target spans, q: their soft labels; one log-softmax, no class weights)."""
    source, target = write_student_corpora(tmp_path, n_source=4)
    tau_u = 0.5
    nlp, train_corpus = student_nlp(
        tiny_encoder, source, target, {"source_per_batch": 1, "target_per_batch": 1}, {"tau_u": tau_u, "refine": False}
    )
    ner = nlp.get_pipe("maral_ner")
    n_classes = len(ner.classes)
    assert ner.loss.tau == 1.0 and n_classes == 5
    store = ner.adaptation.store
    # the second epoch: the anchors (here every other span) are the reliable spans
    store.epoch = 1
    store.anchor[:] = False
    store.anchor[::2] = True
    pi_tgt = numpy.array([0.6, 0.1, 0.05, 0.15, 0.1])
    ner.adaptation.target_log_prior = numpy.log(pi_tgt).astype(numpy.float32)
    batch = list(train_corpus(nlp))[:2]
    assert [is_target(eg) for eg in batch] == [False, True]
    src_eg, tgt_eg = batch
    rows = store.rows([target_index(tgt_eg)])
    q = store.q[rows].astype(numpy.float64)
    m = store.anchor[rows].astype(numpy.float64)
    assert 0 < m.sum() < m.shape[0] and (q[:, 1:] > 0).any()  # a real soft label among the spans

    captured: Dict[str, numpy.ndarray] = {}
    forward = ner.model._func

    def spy(model, docs, is_train):
        scores, backprop = forward(model, docs, is_train)
        if not is_train:
            return scores, backprop
        captured["logits"] = numpy.asarray(model.ops.to_numpy(scores.logits), dtype=numpy.float64)
        captured["spans"] = numpy.asarray(scores.spans).copy()

        def spy_backprop(d_logits):
            captured["d_logits"] = numpy.asarray(model.ops.to_numpy(d_logits), dtype=numpy.float64)
            return backprop(d_logits)

        return scores, spy_backprop

    monkeypatch.setattr(ner.model, "_func", spy)
    losses: Dict[str, float] = {}
    nlp.update(batch, sgd=Adam(0.001), drop=0.0, losses=losses)
    logits, spans = captured["logits"], captured["spans"]

    # the reference, from the logits alone
    src = numpy.flatnonzero(spans[:, 0] == 0)
    tgt = numpy.flatnonzero(spans[:, 0] == 1)
    assert src.shape[0] + tgt.shape[0] == spans.shape[0] and tgt.shape[0] == rows.shape[0]
    assert [t.text for t in src_eg.predicted] == [t.text for t in src_eg.reference]
    gold = {(e.start, e.end): ner.classes.index(e.label_) for e in src_eg.reference.ents}
    y = numpy.asarray([gold.get((int(s), int(e)), 0) for _, s, e in spans[src]])
    assert (y > 0).sum() == len(src_eg.reference.ents) > 0  # every gold entity is one span
    counts = numpy.asarray(ner.cfg["class_counts"], dtype=numpy.float64)
    w = 1.0 / numpy.log(numpy.maximum(counts, numpy.e))
    w = w / w.mean()
    log_pi_src = numpy.log((counts + 1.0) / (counts + 1.0).sum())
    lp_src = _log_softmax(logits[src] + 1.0 * log_pi_src)
    onehot = numpy.eye(n_classes)[y]
    loss_src = -(w[y] * lp_src[numpy.arange(y.shape[0]), y]).sum() / src.shape[0]
    d_src = w[y][:, None] * (numpy.exp(lp_src) - onehot) / src.shape[0]
    lp_tgt = _log_softmax(logits[tgt] + tau_u * numpy.log(pi_tgt))
    loss_tgt = -(m[:, None] * q * lp_tgt).sum() / m.sum()
    d_tgt = m[:, None] * (numpy.exp(lp_tgt) - q) / m.sum()
    expected = numpy.zeros_like(logits)
    expected[src] = d_src
    expected[tgt] = d_tgt

    assert loss_tgt > 0.05 * loss_src  # the target term is not negligible here
    assert losses["maral_ner"] == pytest.approx(loss_src + loss_tgt, rel=1e-5)
    numpy.testing.assert_allclose(captured["d_logits"], expected, rtol=1e-4, atol=1e-7)
    # unreliable target spans get no gradient at all
    numpy.testing.assert_array_equal(captured["d_logits"][tgt[m == 0]], 0.0)


def _train_student(encoder: Path, source: Path, target: Path, n_epochs: int = 3) -> Dict[str, object]:
    """A few seeded stage-2 updates (2 source + 2 target sentences a step, 2 steps an
    epoch), with the epoch ends spaCy's training loop would call."""
    from thinc.api import fix_random_seed

    from spacy_maral.ml.span_ner import get_span_head

    fix_random_seed(0)
    nlp, train_corpus = student_nlp(encoder, source, target, {"source_per_batch": 2, "target_per_batch": 2})
    ner = nlp.get_pipe("maral_ner")
    optimizer = Adam(0.001)
    losses: List[float] = []
    for _ in range(n_epochs):
        examples = list(train_corpus(nlp))
        for start in range(0, len(examples), 4):
            step: Dict[str, float] = {}
            nlp.update(examples[start : start + 4], sgd=optimizer, drop=0.1, losses=step)
            losses.append(step["maral_ner"])
        ner.end_epoch()
    hf = nlp.get_pipe("transformer").model.transformer
    weights = {f"head.{k}": v.detach().clone() for k, v in get_span_head(ner.model).state_dict().items()}
    weights.update({f"encoder.{k}": v.detach().clone() for k, v in hf.state_dict().items()})
    store = ner.adaptation.store
    return {
        "losses": losses, "weights": weights, "q": store.q.copy(), "anchor": store.anchor.copy(),
        "scores": store.scores.copy(), "gold": dict(ner.adaptation.gold), "history": list(ner.adaptation.history),
    }


def test_student_training_ignores_the_diagnostic_tags(tiny_encoder, tmp_path) -> None:
    """The same seeded stage-2 run on a target corpus with and without its tags
    (kept aside for the diagnostics) gives the same losses, soft labels and weights."""
    source, tagged = write_student_corpora(tmp_path / "tagged", n_source=6, diagnostic_tags=True)
    _, untagged = write_student_corpora(tmp_path / "untagged", n_source=6, diagnostic_tags=False)
    with_tags = _train_student(tiny_encoder, source, tagged)
    without = _train_student(tiny_encoder, source, untagged)
    # the tags did reach the diagnostics (and only them)
    assert with_tags["gold"] and not without["gold"]
    assert all("pseudo_label_prf" in r for r in with_tags["history"])
    assert not any("pseudo_label_prf" in r for r in without["history"])
    assert len(with_tags["losses"]) == 6 and all(numpy.isfinite(with_tags["losses"]))
    assert with_tags["losses"] == without["losses"]
    numpy.testing.assert_array_equal(with_tags["q"], without["q"])
    numpy.testing.assert_array_equal(with_tags["anchor"], without["anchor"])
    numpy.testing.assert_array_equal(with_tags["scores"], without["scores"])
    import torch

    assert with_tags["weights"].keys() == without["weights"].keys()
    different = [k for k, v in with_tags["weights"].items() if not torch.equal(v, without["weights"][k])]
    assert different == []


# ------------------------------------------------------------ compact student
def test_kept_layers_are_evenly_spaced_and_end_with_the_last() -> None:
    assert kept_layers(12, 6) == [1, 3, 5, 7, 9, 11]
    assert kept_layers(12, 4) == [2, 5, 8, 11]
    assert kept_layers(12, 12) == list(range(12))
    assert kept_layers(2, 1) == [1]
    for bad in (0, 13):
        with pytest.raises(ValueError, match="keeps 1 to 12"):
            kept_layers(12, bad)


def test_a_compact_student_starts_from_the_teachers_layers_and_saves_as_compact(trained, trained_dir, tiny_encoder, tmp_path) -> None:
    from helpers import assert_same_predictions, build_nlp, predictions

    texts = [t for t, _ in TRAIN_SENTENCES]
    make = spacy.util.registry.callbacks.get("spacy_maral.configure_encoder.v1")
    compact = build_nlp(tiny_encoder)
    compact.initialize(lambda: make_examples(compact))
    make(freeze_word_embeddings=True, init_from=str(trained_dir), encoder_layers=1)(compact)
    model = compact.get_pipe("transformer").model.transformer
    teacher = trained.nlp.get_pipe("transformer").model.transformer
    assert len(model.encoder.layer) == 1 and model.config.num_hidden_layers == 1
    kept, last = model.encoder.layer[0].state_dict(), teacher.encoder.layer[1].state_dict()
    assert kept.keys() == last.keys()
    for name in kept:
        assert torch.equal(kept[name], last[name]), name
    assert model.get_input_embeddings().weight.requires_grad is False
    compact.update(make_examples(compact), sgd=Adam(0.001))  # it trains
    compact.to_disk(tmp_path / "compact")
    loaded = load_pipeline(tmp_path / "compact")
    assert len(loaded.get_pipe("transformer").model.transformer.encoder.layer) == 1
    assert_same_predictions(predictions(loaded, texts), predictions(compact, texts))
    with pytest.raises(ValueError, match="encoder_layers must be 0"):
        make(encoder_layers=-1)
