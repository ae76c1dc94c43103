"""Nothing lost, nothing mixed, nothing hangs (issue 24).

One owner per output folder (two real processes against one folder), kept partitions and
shards checked against the input they came from, `export` and `calibrate --output` never
deleting a user's folder, `pseudo-label --overwrite` checking its input before it
removes anything, Ray failures that end, words the encoder gave no subword counted and
listed, and options refused before work starts.
"""
import json
import os
import random
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pyarrow.parquet as pq
import pytest
import spacy

from helpers import TRAIN_SENTENCES, build_nlp, make_examples, make_tiny_encoder, run_cli
from spacy_maral.inference.annotate import annotate
from spacy_maral.inference.engines import make_engine
from spacy_maral.inference.lock import FolderInUseError, folder_lock

ENV = {**os.environ, "COLUMNS": "300", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
SENTENCES = [s for s, _ in TRAIN_SENTENCES]

# a pipeline component that sleeps on documents with "SLOW" where SLEEPY=1 (so that a run is
# still going when a second one starts); a child process registers it before calling the CLI
SLEEPY = """
import os, sys, time
import spacy
from spacy.language import Language

@Language.component("sleepy")
def sleepy(doc):
    if "SLOW" in doc.text and os.environ.get("SLEEPY") == "1":  # only the run that must be slow
        time.sleep(1.0)  # 5 s a partition: run A outlasts run B's start on a loaded machine
    return doc

from spacy_maral.cli import app
sys.argv = ["spacy_maral", *sys.argv[1:]]
app()
"""


@spacy.Language.component("sleepy")
def sleepy(doc):
    return doc


def cli(*args: str) -> List[str]:
    return [sys.executable, "-m", "spacy_maral", *args]


@pytest.fixture(scope="module")
def ruler_dir(tmp_path_factory) -> Path:
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}, {"label": "LOC", "pattern": "Berlin"}])
    path = tmp_path_factory.mktemp("ruler") / "pipeline"
    nlp.to_disk(path)
    return path


def run_annotate(model, corpus, out, **kwargs):
    with make_engine("local", model) as workers:
        return annotate(workers, corpus, out, progress=False, **kwargs)


# ------------------------------------------------------------ 1. one owner per folder
def test_folder_lock_names_the_holder_and_is_released(tmp_path) -> None:
    with folder_lock(tmp_path / "out", "annotate"):
        with pytest.raises(FolderInUseError, match=rf"{tmp_path / 'out'} is in use by another run \(pid {os.getpid()}"):
            with folder_lock(tmp_path / "out", "annotate"):
                pass
    with folder_lock(tmp_path / "out", "annotate"):  # released at the end of the block
        pass


@pytest.mark.slow
def test_two_annotate_processes_into_one_folder(tmp_path) -> None:
    """Run A (slow) holds the folder: run B into it fails at once, naming A's pid, and
    writes nothing; A killed, its successor takes the folder over and resumes it."""
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}])
    nlp.add_pipe("sleepy")
    model = tmp_path / "model"
    nlp.to_disk(model)
    (tmp_path / "sleepy.py").write_text(SLEEPY, encoding="utf8")
    a_input = tmp_path / "a.txt"
    a_input.write_text("".join(f"SLOW Paris {i}\n" for i in range(60)), encoding="utf8")
    b_input = tmp_path / "b.txt"
    b_input.write_text("".join(f"Berlin {i}\n" for i in range(60)), encoding="utf8")
    out = tmp_path / "out"
    run_a = [sys.executable, str(tmp_path / "sleepy.py"), "annotate", str(model), str(a_input), str(out),
             "--partition-size", "5", "--no-progress"]
    slow = {**ENV, "SLEEPY": "1"}
    proc = subprocess.Popen(run_a, env=slow, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not list(out.glob("part-*.parquet")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()
        started = time.time()
        b = subprocess.run([*run_a[:4], str(b_input), *run_a[5:]], env=ENV, capture_output=True, text=True)
        assert b.returncode == 1, b.stdout + b.stderr
        assert f"{out} is in use by another run (pid {proc.pid}" in b.stderr
        assert proc.poll() is None and time.time() - started < 60  # refused at once, A still running
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    kept = len(list(out.glob("part-*.parquet")))
    assert 0 < kept < 12
    rerun = subprocess.run(run_a, env=ENV, capture_output=True, text=True)  # the kernel released the killed run's lock; not slow
    assert rerun.returncode == 0, rerun.stderr
    assert f"{kept} kept from an earlier run" in rerun.stdout
    ids = {row["id"] for row in pq.read_table(out).to_pylist()}
    assert ids == {f"a.txt:{i}" for i in range(1, 61)}  # only A's documents


def test_a_kept_partition_of_other_input_is_not_reused(ruler_dir, tmp_path) -> None:
    """Same file name, size and mtime (the manifest matches), other lines: every
    partition whose lines differ is annotated again."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Paris one\nBerlin two\nParis three\nBerlin four\n", encoding="utf8")
    stamp = corpus.stat().st_mtime_ns
    out = tmp_path / "out"
    run_annotate(ruler_dir, corpus, out, partition_size=2)
    corpus.write_text("Berlin one\nParis two\nParis three\nBerlin four\n", encoding="utf8")  # same size
    os.utime(corpus, ns=(stamp, stamp))
    again = run_annotate(ruler_dir, corpus, out, partition_size=2)
    assert again.partitions_written == 1 and again.partitions_kept == 1
    rows = [(r["id"], r["text"]) for r in pq.read_table(out).to_pylist()]
    assert rows == [("corpus.txt:1", "Berlin"), ("corpus.txt:2", "Paris"), ("corpus.txt:3", "Paris"), ("corpus.txt:4", "Berlin")]


@pytest.mark.slow
def test_pseudo_label_shards_checked_against_their_input(trained_dir, tmp_path) -> None:
    """A shard whose sentences changed (manifest unchanged) is labelled again, a shard
    without its sidecar too; `--overwrite` with an undecodable or empty input removes nothing."""
    from spacy_maral.inference.pseudo_label import pseudo_label

    teacher = spacy.load(trained_dir)
    text = tmp_path / "target.txt"
    text.write_text("\n".join(SENTENCES) + "\n", encoding="utf8")
    stamp = text.stat().st_mtime_ns
    out = tmp_path / "out"
    first = pseudo_label(teacher, text, out, shard_size=3, progress=False)
    assert first.shards_written == 2 and (out / "shard-00000.spacy.json").exists()
    text.write_text("\n".join(SENTENCES[:3] + [s.replace("Madrid", "Berlin") for s in SENTENCES[3:]]) + "\n", encoding="utf8")
    os.utime(text, ns=(stamp, stamp))  # other text, same name, size and mtime
    second = pseudo_label(teacher, text, out, shard_size=3, progress=False)
    assert (second.shards_kept, second.shards_written) == (1, 1)
    (out / "shard-00000.spacy.json").unlink()  # e.g. killed between the shard and its sidecar
    third = pseudo_label(teacher, text, out, shard_size=3, progress=False)
    assert (third.shards_kept, third.shards_written) == (1, 1)
    before = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Grüße aus Köln\n".encode("latin1"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf8")
    for new_input in (bad, empty):
        with pytest.raises(ValueError):
            pseudo_label(teacher, new_input, out, shard_size=3, progress=False, overwrite=True)
        assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")} == before


# ------------------------------------------------------ 2. a user's folder is never deleted
@pytest.mark.slow
def test_export_never_replaces_a_users_folder(ruler_dir, tmp_path) -> None:
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "notes.txt").write_text("important", encoding="utf8")
    proc = run_cli("export", ruler_dir, user)
    assert proc.returncode == 1 and "is not empty and was not written by spacy_maral" in proc.stderr, proc.stderr
    assert (user / "notes.txt").read_text(encoding="utf8") == "important" and sorted(os.listdir(user)) == ["notes.txt"]
    out = tmp_path / "export"
    for _ in range(2):  # a new folder, then its own earlier export
        proc = run_cli("export", ruler_dir, out)
        assert proc.returncode == 0, proc.stderr
    assert spacy.load(out).pipe_names == ["entity_ruler"]
    guard = tmp_path / "guard.json"
    for text in ("{not json", json.dumps({"chosen": "student"})):
        guard.write_text(text, encoding="utf8")
        proc = run_cli("export", ruler_dir, tmp_path / "g", "--guard", guard)
        assert proc.returncode == 1 and "is not a verdict of `spacy_maral guard`" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_calibrate_output_never_replaces_a_users_folder(tmp_path) -> None:
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "notes.txt").write_text("important", encoding="utf8")
    proc = run_cli("calibrate", tmp_path / "no-model", tmp_path / "dev.spacy", "--output", user)
    assert proc.returncode == 1 and "is not empty and was not written by spacy_maral" in " ".join((proc.stdout + proc.stderr).split())
    assert sorted(os.listdir(user)) == ["notes.txt"]


# ------------------------------------------------------------- 5. truncation counted
@pytest.fixture(scope="module")
def limited_pipeline(tmp_path_factory) -> Path:
    """A maral pipeline on the tiny encoder, whose tokenizer declares its real limit (128)."""
    encoder = make_tiny_encoder(tmp_path_factory.mktemp("enc128") / "tiny-bert")
    cfg_path = encoder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf8"))
    cfg["model_max_length"] = 128
    cfg_path.write_text(json.dumps(cfg), encoding="utf8")
    nlp = build_nlp(encoder)
    nlp.initialize(lambda: make_examples(nlp))
    path = tmp_path_factory.mktemp("limited") / "pipeline"
    nlp.to_disk(path)
    return path


def token_dense_texts() -> List[str]:
    rng = random.Random(0)
    return [
        " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(12)) for _ in range(40)),
        " ".join(f"https://example.com/path/{i}/index.html?q={i}" for i in range(30)),
    ]


def test_token_dense_text_keeps_every_word(limited_pipeline) -> None:
    from spacy_maral.pipeline.subwords import words_without_subwords

    nlp = spacy.load(limited_pipeline)
    docs = list(nlp.pipe(token_dense_texts()))
    assert [len(d) for d in docs] == [40, 30]
    assert words_without_subwords(docs) == 0
    assert [d.text for d in nlp.pipe(SENTENCES)] == SENTENCES  # ordinary text: as before


@pytest.mark.slow
def test_words_without_subwords_are_counted_and_listed(limited_pipeline, tmp_path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    # a lone combining accent: text, but the uncased encoder strips it
    texts = token_dense_texts() + ["Paris \u0300 Berlin", "Angela Merkel visited Paris ."]
    corpus.write_text("".join(json.dumps({"id": f"doc{i}", "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf8")
    out = tmp_path / "out"
    proc = run_cli("annotate", limited_pipeline, corpus, out, "--no-progress")
    assert proc.returncode == 3, proc.stderr  # --max-bad-lines 0 covers it
    summary = json.loads((out / "_summary.json").read_text(encoding="utf8"))
    assert summary["truncated_documents"] == 1 and summary["words_without_subwords"] == 1
    assert summary["bad_lines"] == 0 and summary["documents"] == 4
    errors = [json.loads(line) for line in (out / "_errors.jsonl").read_text(encoding="utf8").splitlines()]
    assert [(e["id"], e["line"], e["words"]) for e in errors] == [("doc2", 3, 1)]
    assert "1 document(s) with 1 word(s) the encoder gave no subword" in proc.stderr
    tolerant = run_cli("annotate", limited_pipeline, corpus, out, "--no-progress", "--max-bad-lines", "1")
    assert tolerant.returncode == 0, tolerant.stderr  # and the kept partition keeps its count
    assert json.loads((out / "_summary.json").read_text(encoding="utf8"))["truncated_documents"] == 1


# --------------------------------------------------------------- 4. Ray failures end
@pytest.mark.slow
def test_ray_address_that_does_not_answer_fails_fast(ruler_dir, monkeypatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    started = time.time()
    with pytest.raises(RuntimeError, match="does not answer"):
        with make_engine("ray", ruler_dir, address="127.0.0.1:1", connect_timeout=5):
            pass
    assert time.time() - started < 30
    assert "RAY_USAGE_STATS_ENABLED" not in os.environ  # what the engine set is gone with it


def die_on_payload(nlp, payload, **kwargs):
    """A task that kills its worker process (an actor that dies)."""
    if payload == "die":
        os._exit(1)
    return {"ok": payload}


@pytest.mark.slow
def test_ray_resources_no_node_has_and_dead_actors_end(ruler_dir) -> None:
    ray = pytest.importorskip("ray")
    from spacy_maral.inference.engines.base import WorkerSpec
    from spacy_maral.inference.engines.ray import RayEngine

    spec = WorkerSpec(model=str(ruler_dir))
    started = time.time()
    with pytest.raises(RuntimeError, match="no node of the Ray cluster can hold an actor of 1 CPU"):
        with RayEngine(spec, num_actors=1, gpus_per_actor=1, num_cpus=1):
            pass
    assert time.time() - started < 60 and not ray.is_initialized()
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors can't import this test module
    with RayEngine(spec, num_actors=1, num_cpus=1, max_retries=0) as engine:
        [(key, done)] = list(engine.map(die_on_payload, [(0, "fine")]))
        assert key == 0 and done.result["ok"] == "fine"
        with pytest.raises(RuntimeError, match="a Ray actor died"):
            list(engine.map(die_on_payload, [(1, "die")]))


# ------------------------------------------------------- 6. options refused up front
@pytest.mark.parametrize("option", [["-b", "0"], ["-b", "-5"], ["-n", "0"], ["-n", "-2"], ["--threads", "-1"],
                                    ["--partition-size", "0"]])
def test_annotate_refuses_bad_numbers(ruler_dir, tmp_path, option) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("Paris\n", encoding="utf8")
    proc = subprocess.run(cli("annotate", str(ruler_dir), str(corpus), str(tmp_path / "out"), *option), env=ENV,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Invalid value" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tau", ["nan", "inf", "-1"])
def test_pseudo_label_refuses_a_meaningless_inference_tau(tmp_path, tau) -> None:
    proc = subprocess.run(cli("pseudo-label", str(tmp_path / "teacher"), str(tmp_path / "t.txt"), str(tmp_path / "out"),
                              "--inference-tau", tau), env=ENV, capture_output=True, text=True)
    assert proc.returncode == 2 and "inference_tau must be a finite number >= 0" in proc.stderr, proc.stderr


def test_pseudo_label_refuses_an_inference_tau_before_importing_torch(tmp_path) -> None:
    """The refusal answers at once: torch (seconds to import) is never imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "spacy_maral", "pseudo-label",
                           str(tmp_path / "teacher"), str(tmp_path / "t.txt"), str(tmp_path / "out"),
                           "--inference-tau", "nan"], env=ENV, capture_output=True, text=True)
    assert proc.returncode == 2 and "inference_tau must be a finite number >= 0" in proc.stderr, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "spacy_maral.ml.decoding" in imported
    assert "torch" not in imported and "spacy" not in imported


@pytest.mark.parametrize("command", [
    ["annotate", "no_such_model", "{tmp}/missing.jsonl", "{tmp}/out"],
    ["pseudo-label", "no_such_model", "{tmp}/missing.txt", "{tmp}/out"],
    ["pseudo-label", "no_such_model", "{tmp}/corpus.jsonl", "{tmp}/out"],
    ["guard", "no_such_model", "no_such_model", "{tmp}/dev.spacy", "{tmp}/t.txt", "--output", "{tmp}/g.json",
     "--package-choice", "both"],
    ["guard", "no_such_model", "no_such_model", "{tmp}/missing.spacy", "{tmp}/t.txt", "--output", "{tmp}/g.json"],
])
def test_bad_input_is_named_before_any_model_loads(tmp_path, command) -> None:
    """A missing or refused input and a wrong --package-choice are reported at once: the
    message names them, not the model that does not exist (which would load first)."""
    from typer.testing import CliRunner

    from spacy_maral.cli import app

    (tmp_path / "dev.spacy").write_bytes(b"")
    (tmp_path / "t.txt").write_text("Paris\n", encoding="utf8")
    (tmp_path / "corpus.jsonl").write_text('{"text": "Paris"}\n', encoding="utf8")
    args = [a.format(tmp=tmp_path) for a in command]
    result = CliRunner().invoke(app, args)
    output = result.output + str(result.stderr_bytes or b"", "utf8", "replace")
    assert result.exit_code == (2 if "both" in args else 1), output  # a bad option is a usage error
    named = {"annotate": "missing.jsonl", "pseudo-label": Path(args[2]).name,
             "guard": "both" if "both" in args else "missing.spacy"}[args[0]]
    assert named in output and "no_such_model" not in output, output
    assert not (tmp_path / "out").exists() and not (tmp_path / "g.json").exists()


# ------------------------------------------------------ 6. predict --from-file with garbage
@pytest.mark.slow
def test_predict_from_a_garbage_file_is_a_clear_error(ruler_dir, tmp_path) -> None:
    garbage = tmp_path / "garbage.spacy"
    garbage.write_bytes(bytes(random.Random(0).getrandbits(8) for _ in range(3000)))
    proc = subprocess.run(cli("predict", str(ruler_dir), "--from-file", str(garbage)), env=ENV, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "garbage.spacy: not a readable .spacy (DocBin) file" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command,text", [(["pseudo-label"], "pip install '.[ray]'"),
                                          (["benchmark-report"], "NAME=RUN_DIR[@CHECKPOINT]")])
def test_help_keeps_its_brackets(command, text) -> None:
    """--help prints the help texts as written (rich markup would eat '[ray]')."""
    from typer.testing import CliRunner

    from helpers import app_of

    result = CliRunner().invoke(app_of(command[0]), [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0 and text in " ".join(result.output.split()), result.output


def test_the_ray_engine_leaves_the_environment_as_it_found_it(monkeypatch) -> None:
    """What the engine sets for Ray's start-up is removed on exit; what the user set stays."""
    from spacy_maral.inference.engines.base import WorkerSpec
    from spacy_maral.inference.engines.ray import RayEngine

    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "7")
    engine = RayEngine(WorkerSpec(model="x"))
    engine._set_env("RAY_USAGE_STATS_ENABLED", "0")
    engine._set_env("RAY_gcs_server_port_wait_time_s", "60")
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0" and os.environ["RAY_gcs_server_port_wait_time_s"] == "7"
    engine.__exit__(None, None, None)
    assert "RAY_USAGE_STATS_ENABLED" not in os.environ and os.environ["RAY_gcs_server_port_wait_time_s"] == "7"
