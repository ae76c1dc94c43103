"""`annotate` and `pseudo-label --engine ray` (issue: corpora beyond one machine).

Length-sorted batching; text, JSONL and Parquet inputs; the Parquet output of a maral
pipeline (with scores) and of a plain spaCy pipeline (without); bad input lines; the
local, multi-process and Ray engines giving the same rows; a killed run resuming; the
teacher's soft labels from Ray actors bit-identical to the local engine's.

The Ray tests run on a local Ray instance of 2 CPUs. Ray is an optional extra
(the [ray] extra); the Makefile installs it, and under CI a missing ray fails these
tests instead of skipping them.
"""
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import List

import pyarrow
import pyarrow.parquet as pq
import pytest
import spacy
from spacy.tokens import DocBin

from helpers import TRAIN_SENTENCES, run_cli
from reference_input import iter_partitions, iter_units
from spacy_maral.inference.annotate import (
    EXIT_BAD_LINES,
    OUTPUT_SCHEMA,
    annotate,
    input_files,
    parse_partition,
)
from spacy_maral.inference.batching import length_sorted_batches, pipe_length_sorted
from spacy_maral.inference.engines import make_engine
from spacy_maral.inference.pseudo_label import pseudo_label

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs the extra: a missing ray is a failure there)
else:
    ray = pytest.importorskip("ray")

SENTENCES = [s for s, _ in TRAIN_SENTENCES]
# lengths that vary a lot, so that length-sorting changes the batches
CORPUS = [
    SENTENCES[i % len(SENTENCES)] if i % 3 else " ".join(SENTENCES[: 1 + i % 5])
    for i in range(40)
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def write_jsonl(path: Path, texts: List[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"doc{i}", "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf8")
    return path


def table_of(output: Path) -> pyarrow.Table:
    """The whole output, as pyarrow reads a directory of partitions."""
    return pq.read_table(output)


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance with 2 CPUs for this module's tests (the engines reuse it)."""
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")  # never a running cluster
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def ruler_dir(tmp_path_factory) -> Path:
    """A plain spaCy pipeline without scores: blank English with an entity_ruler."""
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([
        {"label": "PER", "pattern": "Angela Merkel"}, {"label": "PER", "pattern": "John Smith"},
        {"label": "LOC", "pattern": "Paris"}, {"label": "LOC", "pattern": "Berlin"},
        {"label": "ORG", "pattern": "Siemens"}, {"label": "ORG", "pattern": "Google"},
    ])
    path = tmp_path_factory.mktemp("ruler") / "pipeline"
    nlp.to_disk(path)
    return path


def run_annotate(model, corpus, out, engine="local", **kwargs):
    options = {k: kwargs.pop(k) for k in ("n_process", "num_actors", "threads", "precision") if k in kwargs}
    with make_engine(engine, model, **options) as workers:
        return annotate(workers, corpus, out, progress=False, **kwargs)


# ---------------------------------------------------------- length-sorted batching
def test_length_sorted_batches_and_order_restored() -> None:
    nlp = spacy.blank("en")
    seen: List[List[int]] = []

    class Recorder:
        def __call__(self, doc):
            return doc

        def pipe(self, docs, batch_size=1000):
            from spacy.util import minibatch

            for batch in minibatch(docs, batch_size):
                seen.append([len(d.text) for d in batch])
                yield from batch

    @spacy.Language.factory("record_batches")
    def make_recorder(nlp, name):
        return Recorder()

    nlp.add_pipe("record_batches")
    texts = ["a" * n for n in (5, 1, 9, 3, 3, 7, 2, 8, 4, 6)]
    docs = list(pipe_length_sorted(nlp, texts, batch_size=3, buffer_size=0))
    assert [d.text for d in docs] == texts  # the input order
    assert seen == [[1, 2, 3], [3, 4, 5], [6, 7, 8], [9]]  # batches of similar length
    # a buffer of 4: each buffer is sorted on its own, results still in input order
    seen.clear()
    lengths = [len(x) for x in pipe_length_sorted(nlp, texts, batch_size=2, buffer_size=4, transform=lambda d: d.text)]
    assert lengths == [len(t) for t in texts]
    assert seen == [[1, 3], [5, 9], [2, 3], [7, 8], [4, 6]]
    assert [[len(t) for t in b] for b in length_sorted_batches(texts[:4], 2)] == [[1, 3], [5, 9]]


# -------------------------------------------------------------------- inputs
def test_inputs_text_jsonl_parquet_and_bad_lines(tmp_path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("Angela Merkel visited Paris .\n\n  \nSiemens in Berlin .\r\n", encoding="utf8")
    (tmp_path / "in" / "b.jsonl").write_bytes(
        b'{"text": "John Smith works for Google .", "id": 7}\n'
        b'{"text": "half a line\n'
        b'{"id": "x"}\n'
        b'["a list"]\n'
        b'{"text": 3}\n'
        b'{"text": "caf\xe9 Paris"}\n'  # Latin-1, not UTF-8
        b'{"text": "no id, Berlin ."}\n'
    )
    pq.write_table(pyarrow.table({"text": ["Paris .", None], "id": ["p1", "p2"]}), tmp_path / "in" / "c.parquet")
    (tmp_path / "in" / "_ignored.txt").write_text("not read\n", encoding="utf8")
    files = input_files(tmp_path / "in")
    assert [(f.name, f.format) for f in files] == [("a.txt", "text"), ("b.jsonl", "jsonl"), ("c.parquet", "parquet")]
    parts = list(iter_partitions(iter_units(files), 4))
    assert [p.n_lines for p in parts] == [4, 4, 4, 1]  # every line counts, blank and bad ones too
    records, bad = [], []
    for part in parts:
        r, b = parse_partition(part)
        records += r
        bad += b
    assert [(r[0], r[1]) for r in records] == [
        ("a.txt:1", "Angela Merkel visited Paris ."), ("a.txt:4", "Siemens in Berlin ."),
        ("7", "John Smith works for Google ."), ("b.jsonl:7", "no id, Berlin ."), ("p1", "Paris ."),
    ]
    assert [(b.file, b.line) for b in bad] == [("b.jsonl", n) for n in range(2, 7)] + [("c.parquet", 2)]
    reasons = [b.reason for b in bad]
    assert "invalid JSON" in reasons[0] and "no 'text' field" in reasons[1] and "not a JSON object" in reasons[2]
    assert "not a string" in reasons[3] and "UTF-8" in reasons[4] and "null" in reasons[5]
    # the one line decoder of the corpora: the byte and how to re-encode the file
    assert "byte 0xe9" in reasons[4] and "iconv -f latin1" in reasons[4]
    assert str(bad[0]).startswith("b.jsonl, line 2: ") and str(bad[5]).startswith("c.parquet, row 2: ")


# ---------------------------------------------------------------- one id, one document
def _parquet(path: Path, ids, texts) -> None:
    pq.write_table(pyarrow.table({"id": ids, "text": texts}), path, row_group_size=2)


REPEATED_IDS = {
    # case: (files, the repeating line, the line it repeats)
    "same string": ({"a.jsonl": ['{"id": "d", "text": "Paris ."}', '{"id": "d", "text": "Berlin ."}']},
                    "a.jsonl, line 2", "a.jsonl, line 1"),
    "1 and '1'": ({"a.jsonl": ['{"id": 1, "text": "Paris ."}', '{"id": "2", "text": "x"}', '{"id": "1", "text": "Berlin ."}']},
                  "a.jsonl, line 3", "a.jsonl, line 1"),
    "two files": ({"a.jsonl": ['{"id": "d", "text": "Paris ."}'], "b/c.jsonl": ['', '{"id": "d", "text": "Berlin ."}']},
                  "b/c.jsonl, line 2", "a.jsonl, line 1"),
    "a default id": ({"a.txt": ["Paris .", "Berlin ."], "b.jsonl": ['{"id": "a.txt:2", "text": "Madrid ."}']},
                     "b.jsonl, line 1", "a.txt, line 2"),
    "parquet rows": ({"p.parquet": (["r1", "r2", "r3", "r1"], ["Paris .", "x", "y", "Berlin ."])}, "p.parquet, row 4", "p.parquet, row 1"),
    "parquet and jsonl": ({"a.jsonl": ['{"id": 5, "text": "Paris ."}'], "p.parquet": ([None, 5], ["x", "Berlin ."])},
                          "p.parquet, row 2", "a.jsonl, line 1"),
}


@pytest.mark.parametrize("case", sorted(REPEATED_IDS))
@pytest.mark.parametrize("partition_size", [1, 100])
def test_two_documents_with_one_id_are_refused_before_work(ruler_dir, tmp_path, case, partition_size) -> None:
    """The output is keyed by id: two documents of one id (in one file, across files or
    formats, across partitions; the id as written: 1 and "1" are one) would mix their
    entities. The run is refused before any partition, naming both lines."""
    files, again, first = REPEATED_IDS[case]
    for name, content in files.items():
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".parquet"):
            _parquet(tmp_path / "in" / name, *content)
        else:
            (tmp_path / "in" / name).write_text("\n".join(content) + "\n", encoding="utf8")
    with pytest.raises(ValueError, match=rf"{again}: the id .* is already the id of {first} \(1 line"):
        run_annotate(ruler_dir, tmp_path / "in", tmp_path / "out", partition_size=partition_size)
    assert not list((tmp_path / "out").glob("*.parquet")) and not (tmp_path / "out" / "_manifest.json").exists()


def test_lines_that_are_no_document_need_no_own_id(ruler_dir, tmp_path) -> None:
    """An id is a document's: a bad line or a null Parquet text shares its id with nobody's
    entities, so it does not count as a repeat."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"id": "d", "text": 3}\n{"id": "d", "text": "Paris ."}\n', encoding="utf8")
    _parquet(tmp_path / "in" / "p.parquet", ["e", "e", "f"], [None, "Berlin .", "x"])
    stats = run_annotate(ruler_dir, tmp_path / "in", tmp_path / "out")
    assert stats.documents == 3 and stats.bad_lines == 2


@pytest.mark.parametrize("content", ["", "  \n\t\n"])
def test_an_input_without_a_document_is_an_error_before_any_output(ruler_dir, tmp_path, content) -> None:
    (tmp_path / "empty.txt").write_text(content, encoding="utf8")
    with pytest.raises(ValueError, match=r"no document to annotate: the input \(empty.txt\) has \d lines, none of them a document"):
        run_annotate(ruler_dir, tmp_path / "empty.txt", tmp_path / "out")
    assert not list((tmp_path / "out").glob("part-*")) and not (tmp_path / "out" / "_manifest.json").exists()


def test_a_corpus_file_given_as_text_is_refused_naming_it(tmp_path) -> None:
    """A CoNLL-style file was annotated a token line a document (2031 documents from a
    test set); a .spacy or compressed file was said to be "all blank"."""
    from spacy_maral.inference.annotate.inputs import input_files

    conll = tmp_path / "test.txt"
    conll.write_text("-DOCSTART- O\n\nParis B-LOC\nis O\nbig O\n", encoding="utf8")
    tagged = tmp_path / "de.conll"
    tagged.write_text("Paris B-LOC\n", encoding="utf8")
    for path, message in ((conll, "test.txt, line 1: a CoNLL-style file"), (tagged, r"de.conll: a \.conll file is CoNLL-style"),
                          (tmp_path / "c.spacy", "not .spacy"), (tmp_path / "c.txt.gz", "not .gz")):
        if not path.exists():
            path.write_bytes(b"\x1f\x8b binary")
        with pytest.raises(ValueError, match=message):
            input_files(path)
        assert [f.format for f in input_files(path, "text")] == ["text"]  # --format text: read as given
    prose = tmp_path / "prose.txt"
    prose.write_text("Paris is big.\nRome is old.\n", encoding="utf8")
    assert [f.format for f in input_files(prose)] == ["text"]


def test_the_command_checks_local_input_before_the_model_loads(tmp_path) -> None:
    """A repeated id or an input without a document is refused before anything loads:
    here the model is a folder with a config.cfg that would not load, and its error does not come first."""
    (tmp_path / "empty-model").mkdir()
    (tmp_path / "empty-model" / "config.cfg").write_text("[nlp]\n", encoding="utf8")
    repeated = '{"id": 1, "text": "Paris ."}\n{"id": 1, "text": "Rome ."}\n'
    for name, content, message in (("corpus.jsonl", repeated, "the id '1' is already the id of"),
                                   ("corpus.txt", "\n  \n", "no document to annotate")):
        corpus = tmp_path / name
        corpus.write_text(content, encoding="utf8")
        result = run_cli("annotate", tmp_path / "empty-model", corpus, tmp_path / "out", "--no-progress")
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert not (tmp_path / "out").exists()


def test_an_output_inside_the_input_folder_is_refused_at_once(ruler_dir, tmp_path) -> None:
    """A rerun would read its own partitions as input (a repeated id, or double work)."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("Paris .\n", encoding="utf8")
    result = run_cli("annotate", ruler_dir, tmp_path / "corpus", tmp_path / "corpus" / "out", "--no-progress")
    assert result.returncode == 1 and "is inside the input folder" in result.stderr
    assert not (tmp_path / "corpus" / "out").exists()
    with pytest.raises(ValueError, match="is inside the input folder"):
        run_annotate(ruler_dir, tmp_path / "corpus", tmp_path / "corpus" / "out")
    for _ in range(2):  # under a folder whose name starts with "_", which the input leaves out: allowed
        assert run_annotate(ruler_dir, tmp_path / "corpus", tmp_path / "corpus" / "_runs" / "out").documents == 1
    # a file where the output folder (or one of its folders) would go: named at once, not an OS error
    (tmp_path / "notes.md").write_text("mine", encoding="utf8")
    for out in (tmp_path / "notes.md", tmp_path / "notes.md" / "out"):
        result = run_cli("annotate", tmp_path / "no-model", tmp_path / "corpus", out, "--no-progress")
        assert result.returncode == 1 and f"{tmp_path / 'notes.md'} is a file, not a folder" in " ".join(result.stderr.split())
    assert (tmp_path / "notes.md").read_text(encoding="utf8") == "mine"


def test_repeated_id_is_a_clear_error_of_the_command(ruler_dir, tmp_path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": 1, "text": "Paris ."}\n{"id": "1", "text": "Berlin ."}\n', encoding="utf8")
    proc = subprocess.run(annotate_cmd(ruler_dir, corpus, tmp_path / "out"), env=ENV, capture_output=True, text=True)
    assert proc.returncode == 1 and "corpus.jsonl, line 2: the id '1' is already the id of corpus.jsonl, line 1" in proc.stderr
    assert "Traceback" not in proc.stderr


# -------------------------------------------------------- a pipeline without scores
def test_plain_pipeline_rows_and_null_scores(ruler_dir, tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
    stats = run_annotate(ruler_dir, corpus, tmp_path / "out", partition_size=7)
    assert stats.documents == len(CORPUS) and stats.partitions_written == 6 and stats.bad_lines == 0
    table = table_of(tmp_path / "out")
    assert table.schema.remove_metadata() == OUTPUT_SCHEMA
    nlp = spacy.load(ruler_dir)
    expected = [
        {"id": f"doc{i}", "start": e.start_char, "end": e.end_char, "text": e.text, "label": e.label_, "score": None}
        for i, doc in enumerate(nlp.pipe(CORPUS)) for e in doc.ents
    ]
    assert table.to_pylist() == expected and len(expected) > 20
    # the same corpus as text and as Parquet: the same entities
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(CORPUS) + "\n", encoding="utf8")
    run_annotate(ruler_dir, text, tmp_path / "out-text", partition_size=100)
    pq.write_table(pyarrow.table({"id": [f"doc{i}" for i in range(len(CORPUS))], "text": CORPUS}), tmp_path / "corpus.parquet")
    run_annotate(ruler_dir, tmp_path / "corpus.parquet", tmp_path / "out-parquet", partition_size=9)
    assert table_of(tmp_path / "out-parquet").to_pylist() == expected
    from_text = table_of(tmp_path / "out-text").to_pylist()
    assert [r["id"] for r in from_text][:2] == ["corpus.txt:1", "corpus.txt:1"]
    assert [{**r, "id": None} for r in from_text] == [{**r, "id": None} for r in expected]


# ------------------------------------------------------------ a maral pipeline
def test_maral_pipeline_rows_with_scores(trained_dir, tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
    run_annotate(trained_dir, corpus, tmp_path / "out", partition_size=16, batch_size=4)
    rows = table_of(tmp_path / "out").to_pylist()
    nlp = spacy.load(trained_dir)
    expected = []
    for i, doc in enumerate(nlp.pipe(CORPUS, batch_size=4)):
        group = doc.spans["maral"]
        scores = {(s.start_char, s.end_char, s.label_): float(p) for s, p in zip(group, group.attrs["scores"])}
        expected += [
            (f"doc{i}", e.start_char, e.end_char, e.text, e.label_, scores[(e.start_char, e.end_char, e.label_)]) for e in doc.ents
        ]
    assert len(rows) == len(expected) > 20
    for row, (doc_id, start, end, text, label, score) in zip(rows, expected):
        # batches differ (length-sorted vs arrival order): scores agree to float precision
        assert (row["id"], row["start"], row["end"], row["text"], row["label"]) == (doc_id, start, end, text, label)
        assert row["score"] == pytest.approx(score, rel=1e-4, abs=1e-6) and 0.0 < row["score"] <= 1.0
        assert CORPUS[int(doc_id[3:])][start:end] == text


def test_a_partition_made_at_another_precision_is_written_again(trained_dir, tmp_path, monkeypatch) -> None:
    """`auto` runs bf16 on one CPU and fp32 on another: a run resumed elsewhere rewrites
    the partitions the other precision made, and the summary names what made the output."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS[:12])
    out = tmp_path / "out"
    first = run_annotate(trained_dir, corpus, out, partition_size=6, precision="fp32")
    assert first.precisions == ["fp32"] and first.partitions_written == 2
    assert run_annotate(trained_dir, corpus, out, partition_size=6, precision="fp32").partitions_kept == 2
    # what "fp32" there and "auto" on a CPU with bfloat16 give (its manifest has the same "precision")
    monkeypatch.setattr("spacy_maral.inference.annotate.task.encoder_runtime_of", lambda nlp: {"running": "bf16"})
    again = run_annotate(trained_dir, corpus, out, partition_size=6, precision="fp32")
    assert (again.partitions_kept, again.partitions_written, again.precisions) == (0, 2, ["bf16"])
    summary = json.loads((out / "_summary.json").read_text(encoding="utf8"))
    assert summary["precisions"] == ["bf16"]
    # partitions of a version that recorded no precision are kept, not made again
    from spacy_maral.inference.annotate.output import META_KEY

    for part in out.glob("part-*.parquet"):
        table = pq.read_table(part)
        meta = json.loads(table.schema.metadata[META_KEY])
        del meta["precision"]
        pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(meta)}), part)
    assert run_annotate(trained_dir, corpus, out, partition_size=6, precision="fp32").partitions_kept == 2  # bf16 still patched in


# ------------------------------------------------------------- the engines agree
@pytest.mark.slow
def test_ray_and_local_processes_equal_the_local_engine(trained_dir, tmp_path, ray_instance) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
    settings = dict(partition_size=7, batch_size=4)
    local = run_annotate(trained_dir, corpus, tmp_path / "local", **settings)
    # the Ray run's input is a URI (pyarrow's filesystem: what s3:// and gs:// go through),
    # read by the actors; a plain path on Ray is test_killed_ray_run_resumes's input
    import ray.data

    context = ray.data.DataContext.get_current()
    before = (context.enable_progress_bars, context.wait_for_min_actors_s, logging.getLogger("ray.data").level)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_ray = run_annotate(trained_dir, corpus.resolve().as_uri(), tmp_path / "ray", engine="ray", num_actors=2, **settings)
    assert not [w for w in caught if "ray_remote_args" in str(w.message)]  # the engine's own call warns nothing
    after = (context.enable_progress_bars, context.wait_for_min_actors_s, logging.getLogger("ray.data").level)
    assert after == before  # a user's Ray Data settings put back
    assert on_ray.engine == "ray" and on_ray.n_workers == 2 and len(on_ray.workers) == 2  # both actors worked
    assert local.documents == on_ray.documents == len(CORPUS) and local.entities == on_ray.entities
    reference = table_of(tmp_path / "local")
    assert table_of(tmp_path / "ray").equals(reference)  # row for row, scores bit for bit
    parts = sorted(p.name for p in (tmp_path / "local").glob("part-*.parquet"))
    assert parts == sorted(p.name for p in (tmp_path / "ray").glob("part-*.parquet")) and len(parts) == 6
    for name in parts:
        assert pq.read_table(tmp_path / "ray" / name).equals(pq.read_table(tmp_path / "local" / name))
    # two local worker processes: the same rows
    two = run_annotate(trained_dir, corpus, tmp_path / "two", n_process=2, **settings)
    assert two.n_workers == 2 and table_of(tmp_path / "two").equals(reference)


def test_bad_input_counted_on_ray_is_the_local_error(tmp_path, ray_instance) -> None:
    """A file that the Ray tasks counting lines cannot read fails with the message the
    local engines give (the file and what is wrong), not Ray's traceback."""
    from types import SimpleNamespace

    from spacy_maral.inference.annotate.driver import index_files

    good, bad = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pyarrow.table({"text": ["Angela Merkel ."]}), good)
    pq.write_table(pyarrow.table({"body": ["Paris ."]}), bad)
    files = input_files(tmp_path)
    with pytest.raises(ValueError) as local:
        index_files(SimpleNamespace(name="local"), files, "text", "id")
    with pytest.raises(ValueError) as on_ray:
        index_files(SimpleNamespace(name="ray", ray=ray_instance), files, "text", "id")
    assert str(local.value).startswith("b.parquet: no column 'text'")
    assert str(on_ray.value) == str(local.value)


def test_missing_ray_is_a_clear_error(trained_dir, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ImportError, match=r"\[ray\] extra \(pip install '\.\[ray\]'"):
        with make_engine("ray", trained_dir):
            pass


# -------------------------------------------------------------- resume, bad lines
def annotate_args(model: Path, corpus: Path, out: Path, *extra: str) -> List[str]:
    """The arguments of `python -m spacy_maral annotate` (for run_cli, in this process)."""
    return ["annotate", str(model), str(corpus), str(out), "--no-progress", *extra]


def annotate_cmd(model: Path, corpus: Path, out: Path, *extra: str) -> List[str]:
    """The same command as a new process."""
    return [sys.executable, "-m", "spacy_maral", *annotate_args(model, corpus, out, *extra)]


def test_rerun_keeps_partitions_and_refuses_other_settings(ruler_dir, tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
    out = tmp_path / "out"
    run_annotate(ruler_dir, corpus, out, partition_size=10)
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    reference = table_of(out)
    (out / "part-000002.parquet").unlink()  # as if killed before its rename
    again = run_annotate(ruler_dir, corpus, out, partition_size=10)
    assert again.partitions_kept == 3 and again.partitions_written == 1 and again.documents == len(CORPUS)
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    assert {k: v for k, v in after.items() if k != "part-000002.parquet"} == {k: v for k, v in before.items() if k != "part-000002.parquet"}
    assert table_of(out).equals(reference)
    with pytest.raises(ValueError, match="partition_size"):
        run_annotate(ruler_dir, corpus, out, partition_size=5)
    write_jsonl(corpus, CORPUS[:-1])
    with pytest.raises(ValueError, match="inputs"):
        run_annotate(ruler_dir, corpus, out, partition_size=10)


def test_rerun_refuses_a_model_changed_in_place(ruler_dir, tmp_path) -> None:
    """A model retrained or recalibrated into the same folder is another model: its
    partitions are not mixed with the old one's."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(ruler_dir, model)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
    out = tmp_path / "out"
    run_annotate(model, corpus, out, partition_size=10)
    assert run_annotate(model, corpus, out, partition_size=10).partitions_kept == 4  # unchanged: resumed
    nlp = spacy.load(model)
    nlp.get_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Bonn"}])
    nlp.to_disk(model)
    with pytest.raises(ValueError, match="another annotate run.*model_files"):
        run_annotate(model, corpus, out, partition_size=10)


@pytest.mark.slow
def test_bad_lines_are_reported_and_do_not_stop_the_run(ruler_dir, tmp_path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"id": i, "text": t}) for i, t in enumerate(CORPUS[:6])]
    lines[2] = '{"id": 2, "text": "Angela Merkel'  # cut short
    lines[4] = json.dumps({"id": 4, "body": "Paris"})  # no "text"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf8")
    out = tmp_path / "out"
    proc = subprocess.run(annotate_cmd(ruler_dir, corpus, out, "--partition-size", "2"), env=ENV, capture_output=True, text=True)
    assert proc.returncode == EXIT_BAD_LINES, proc.stderr
    assert "corpus.jsonl, line 3: invalid JSON" in proc.stderr and "corpus.jsonl, line 5: no 'text' field" in proc.stderr
    errors = [json.loads(line) for line in (out / "_errors.jsonl").read_text(encoding="utf8").splitlines()]
    assert [(e["file"], e["line"]) for e in errors] == [("corpus.jsonl", 3), ("corpus.jsonl", 5)]
    ids = sorted({r["id"] for r in table_of(out).to_pylist()})
    nlp = spacy.load(ruler_dir)
    assert ids == sorted(str(i) for i in (0, 1, 3, 5) if nlp(CORPUS[i]).ents)  # the others were annotated
    summary = json.loads((out / "_summary.json").read_text(encoding="utf8"))
    assert summary["bad_lines"] == 2 and summary["documents"] == 4 and summary["lines"] == 6
    # tolerated: exit 0, same report
    tolerant = subprocess.run(annotate_cmd(ruler_dir, corpus, tmp_path / "out2", "--partition-size", "2", "--max-bad-lines", "2"),
                              env=ENV, capture_output=True, text=True)
    assert tolerant.returncode == 0, tolerant.stderr
    assert "2 bad input line(s) skipped" in tolerant.stderr


@spacy.Language.component("fails_on_boom")
def fails_on_boom(doc):
    if "BOOM" in doc.text:
        raise RuntimeError("boom on purpose")
    return doc


@spacy.Language.component("always_fails")
def always_fails(doc):
    raise RuntimeError("broken pipeline")


def test_a_partition_of_one_bad_document_does_not_stop_the_run(tmp_path) -> None:
    """A document the pipeline fails on is a bad line even when it is its partition's only
    document; a pipeline that fails on everything still stops the run."""
    nlp = spacy.blank("en")
    nlp.add_pipe("fails_on_boom")
    model = tmp_path / "pipeline"
    nlp.to_disk(model)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello Paris\n\nBOOM alone\n\nBerlin again\n", encoding="utf8")
    stats = run_annotate(model, corpus, tmp_path / "out", partition_size=2)
    assert stats.bad_lines == 1 and stats.documents == 2
    errors = [json.loads(line) for line in (tmp_path / "out" / "_errors.jsonl").read_text(encoding="utf8").splitlines()]
    assert [(e["file"], e["line"]) for e in errors] == [("corpus.txt", 3)]
    broken = spacy.blank("en")
    broken.add_pipe("always_fails")
    broken.to_disk(tmp_path / "broken")
    with pytest.raises(RuntimeError, match="broken pipeline"):
        run_annotate(tmp_path / "broken", corpus, tmp_path / "out2", partition_size=2)


@pytest.mark.slow
def test_killed_ray_run_resumes(trained_dir, tmp_path) -> None:
    """SIGKILL a Ray run (driver, its local Ray instance and actors) after its first
    partition; the rerun keeps the finished partitions and ends with exactly the rows
    of an uninterrupted local run, with no temporary files left."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS * 5)  # 200 documents
    common = ["--partition-size", "10", "--batch-size", "4"]
    reference = tmp_path / "reference"
    assert run_cli(*annotate_args(trained_dir, corpus, reference, *common)).returncode == 0  # in this process
    out = tmp_path / "out"
    ray_args = [*common, "--engine", "ray", "--num-actors", "2"]
    proc = subprocess.Popen(annotate_cmd(trained_dir, corpus, out, *ray_args), env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not list(out.glob("part-*.parquet")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and what it started in its session
        proc.wait()
    finished = sorted(p.name for p in out.glob("part-*.parquet"))
    assert finished and len(finished) < 20, finished  # killed part-way
    assert not (out / "_summary.json").exists()
    for name in finished:
        pq.read_table(out / name)  # complete and readable
    rerun = run_cli(*annotate_args(trained_dir, corpus, out, *ray_args))  # in this process
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads((out / "_summary.json").read_text(encoding="utf8"))
    assert summary["partitions_kept"] >= len(finished) and summary["documents"] == 200
    assert f"{summary['partitions_kept']} kept from an earlier run" in rerun.stdout and "engine ray, 2 worker(s)" in rerun.stdout
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temporary files left behind"
    assert table_of(out).equals(table_of(reference))


# ------------------------------------------------------- pseudo-label on Ray
@pytest.mark.slow
def test_pseudo_label_on_ray_is_bit_identical(trained_dir, tmp_path, ray_instance) -> None:
    """`pseudo-label --engine ray` (the command, two actors) writes the bytes of the
    local engine's shards and summary, in the corpus order."""
    text = tmp_path / "target.txt"
    text.write_text("\n".join(CORPUS) + "\n", encoding="utf8")
    teacher = spacy.load(trained_dir)
    local = pseudo_label(teacher, text, tmp_path / "local", batch_size=4, shard_size=12, progress=False)
    proc = run_cli("pseudo-label", trained_dir, text, tmp_path / "ray", "--batch-size", "4", "--shard-size", "12",
                   "--engine", "ray", "--num-actors", "2")
    assert proc.returncode == 0, proc.stderr
    assert "40 sentences (4 shards written" in proc.stdout and "engine: ray, 2 actors" in proc.stdout
    per_actor = re.search(r"shards labelled per worker process: ([\d, ]+)\)", proc.stdout)
    assert per_actor, proc.stdout
    counts = [int(n) for n in per_actor.group(1).split(",")]
    assert len(counts) == 2 and sum(counts) == 4 and min(counts) >= 1  # both actors labelled shards
    assert local.shards_written == 4
    # the counts of the teacher's own entities, found here in one batched pipe
    expected = Counter(span.label_ for doc in teacher.pipe(CORPUS, batch_size=8) for span in doc.spans["maral"])
    assert local.entities == expected and len(expected) == 4  # PER, LOC, ORG and MISC
    for label, n in expected.items():
        assert f"  {label:<10} {n:>8} pseudo-labelled entity spans" in proc.stdout
    shards = sorted(p.name for p in (tmp_path / "local").glob("shard-*.spacy"))
    assert shards == sorted(p.name for p in (tmp_path / "ray").glob("shard-*.spacy"))
    for name in shards:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    # the summary holds the entity counts and the shards written: equal files, equal counts
    assert (tmp_path / "ray" / "summary.json").read_text() == (tmp_path / "local" / "summary.json").read_text()
    docs = [d for name in shards for d in DocBin().from_disk(tmp_path / "local" / name).get_docs(teacher.vocab)]
    assert [d.text for d in docs] == CORPUS  # the corpus order, whatever the batches
