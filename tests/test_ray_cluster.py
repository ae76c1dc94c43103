"""`annotate --engine ray` on a real two-node cluster: a head and a worker node started
with `ray start` on the loopback address (two raylets on this machine, 1 CPU each), the
command run against it with --address, its output equal row for row (scores bit for
bit) to the local engine's; the nodes are stopped by the test.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import TRAIN_SENTENCES

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs the extra: a missing ray is a failure there)
else:
    pytest.importorskip("ray")

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
# RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S 0: a node stopped by SIGTERM stops at once (by default
# it first drains for 30 s, waiting for work that a test's nodes never have)
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive_nodes(address: str) -> int:
    proc = subprocess.run([RAY, "status", "--address", address], env=ENV, capture_output=True, text=True, timeout=60)
    active = proc.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0]
    return sum(line.strip().startswith("1 node_") for line in active.splitlines())


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head and a worker node on 127.0.0.1, 1 CPU each; stopped at the end."""
    address = f"127.0.0.1:{free_port()}"
    logs = tmp_path_factory.mktemp("ray-nodes")
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--block"]
    head = subprocess.Popen([RAY, "start", "--head", "--port", address.split(":")[1], "--include-dashboard", "false", *common],
                            env=ENV, stdout=open(logs / "head.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    nodes = [head]
    try:
        deadline = time.time() + 120
        while alive_nodes(address) < 1:
            assert head.poll() is None and time.time() < deadline, (logs / "head.log").read_text()
            time.sleep(2)
        worker = subprocess.Popen([RAY, "start", "--address", address, *common], env=ENV, stdout=open(logs / "worker.log", "w"),
                                  stderr=subprocess.STDOUT, start_new_session=True)
        nodes.append(worker)
        while alive_nodes(address) < 2:
            assert worker.poll() is None and time.time() < deadline, (logs / "worker.log").read_text()
            time.sleep(2)
        yield address
    finally:
        for node in reversed(nodes):
            node.terminate()
        for node in reversed(nodes):
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, 9)


def annotate_cmd(model: Path, corpus: Path, out: Path, *extra: str):
    return [sys.executable, "-m", "spacy_maral", "annotate", str(model), str(corpus), str(out), "--partition-size", "7",
            "--batch-size", "4", "--no-progress", *extra]


@pytest.mark.slow
def test_annotate_on_a_two_node_cluster_equals_the_local_engine(trained_dir, tmp_path, two_nodes) -> None:
    sentences = [s for s, _ in TRAIN_SENTENCES]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": sentences[i % len(sentences)] * (1 + i % 3)}) + "\n"
                              for i in range(30)), encoding="utf8")
    local = subprocess.run(annotate_cmd(trained_dir, corpus, tmp_path / "local"), env=ENV, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    on_cluster = subprocess.run(annotate_cmd(trained_dir, corpus, tmp_path / "cluster", "--engine", "ray", "--address",
                                             two_nodes, "--num-actors", "2"), env=ENV, capture_output=True, text=True,
                                timeout=900)
    assert on_cluster.returncode == 0, on_cluster.stderr[-3000:]
    summary = json.loads((tmp_path / "cluster" / "_summary.json").read_text(encoding="utf8"))
    assert summary["engine"] == "ray" and summary["n_workers"] == 2
    assert len(summary["workers"]) == 2  # an actor of 1 CPU on each node, both worked
    reference = pq.read_table(tmp_path / "local")
    assert reference.num_rows > 0 and pq.read_table(tmp_path / "cluster").equals(reference)
    names = sorted(p.name for p in (tmp_path / "local").glob("part-*.parquet"))
    assert names == sorted(p.name for p in (tmp_path / "cluster").glob("part-*.parquet")) and len(names) == 5
