"""EntityPredictor, the callable class for Ray Data's map_batches: its rows equal
annotate's for the same documents; every batch format Ray hands it; error rows for the
documents it can't annotate, the rest of the batch kept; and the example of docs/scale.md run
as written on a local Ray instance.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pyarrow
import pyarrow.parquet as pq
import pytest
from spacy.language import Language

from helpers import TRAIN_SENTENCES
from spacy_maral.inference.annotate.worker import annotate_records
from spacy_maral.inference.predictor import PREDICTION_SCHEMA, EntityPredictor

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [s for s, _ in TRAIN_SENTENCES] + [" ".join(s for s, _ in TRAIN_SENTENCES[:3])]
IDS = [f"doc{i}" for i in range(len(TEXTS))]


@Language.component("spacy_maral_test_fail_on_boom")
def fail_on_boom(doc):
    if "BOOM" in doc.text:
        raise RuntimeError("the test component fails on BOOM")
    return doc


@pytest.fixture(scope="module")
def predictor(trained_dir) -> EntityPredictor:
    return EntityPredictor(str(trained_dir), batch_size=3)


def reference_rows(predictor: EntityPredictor, ids, texts):
    records = [(i, t, "f", n) for n, (i, t) in enumerate(zip(ids, texts))]
    return annotate_records(predictor.worker.nlp, records, batch_size=3).table.to_pylist()


def entity_rows(table: pyarrow.Table):
    return [{k: v for k, v in row.items() if k != "error"} for row in table.to_pylist() if row["error"] is None]


def test_rows_equal_annotate_for_every_batch_format(predictor) -> None:
    expected = reference_rows(predictor, IDS, TEXTS)
    assert len(expected) >= len(TRAIN_SENTENCES)  # the overfitted pipeline finds entities
    batches = {
        "numpy": {"id": numpy.array(IDS), "text": numpy.array(TEXTS, dtype=object)},
        "default": {"id": IDS, "text": TEXTS},
        "pyarrow": pyarrow.table({"id": IDS, "text": TEXTS}),
    }
    try:
        import pandas

        batches["pandas"] = pandas.DataFrame({"id": IDS, "text": TEXTS})
    except ImportError:  # pandas comes with ray[data]
        pass
    for name, batch in batches.items():
        table = predictor(batch)
        assert table.schema.equals(PREDICTION_SCHEMA), name
        assert table.column("error").null_count == table.num_rows, name
        assert entity_rows(table) == expected, name


def test_numeric_ids_are_strings(predictor) -> None:
    table = predictor({"id": numpy.arange(3), "text": numpy.array(TEXTS[:3], dtype=object)})
    assert set(table.column("id").to_pylist()) <= {"0", "1", "2"} and table.num_rows > 0


def test_bad_documents_get_an_error_row_and_the_rest_go_on(trained_dir) -> None:
    predictor = EntityPredictor(str(trained_dir), batch_size=4)
    predictor.worker.nlp.add_pipe("spacy_maral_test_fail_on_boom")
    texts = [TEXTS[0], None, "BOOM goes the text", TEXTS[1], 17]
    ids = ["a", "b", "c", "d", "e"]
    table = predictor({"id": ids, "text": texts})
    errors = {r["id"]: r["error"] for r in table.to_pylist() if r["error"] is not None}
    assert sorted(errors) == ["b", "c", "e"]
    assert "'text' is null" in errors["b"] and "RuntimeError: the test component fails on BOOM" in errors["c"]
    assert "is int, not a string" in errors["e"]
    error_rows = [r for r in table.to_pylist() if r["error"] is not None]
    assert all(r["start"] is None and r["label"] is None for r in error_rows)
    plain = EntityPredictor(str(trained_dir), batch_size=4)
    assert entity_rows(table) == entity_rows(plain({"id": ["a", "d"], "text": [TEXTS[0], TEXTS[1]]}))
    assert [r["id"] for r in table.to_pylist()] == sorted(r["id"] for r in table.to_pylist())  # batch order


def test_the_predictor_runs_the_precision_it_is_given(trained_dir) -> None:
    from spacy_maral.pipeline.loading import encoder_runtime_of

    int8 = EntityPredictor(str(trained_dir), batch_size=4, precision="int8")
    assert encoder_runtime_of(int8.worker.nlp)["running"] == "int8"
    rows = entity_rows(int8({"id": IDS[:2], "text": TEXTS[:2]}))
    fp32 = EntityPredictor(str(trained_dir), batch_size=4, precision="fp32")
    expected = entity_rows(fp32({"id": IDS[:2], "text": TEXTS[:2]}))
    # the overfitted pipeline's entities, from int8 products (their scores are not fp32's)
    assert rows and [{k: r[k] for k in ("id", "start", "end", "label")} for r in rows] == [
        {k: r[k] for k in ("id", "start", "end", "label")} for r in expected]
    assert [r["score"] for r in rows] != [r["score"] for r in expected]


def test_missing_column_names_the_columns(predictor) -> None:
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: \['id', 'body'\]\).*text_column"):
        predictor({"id": IDS, "body": TEXTS})
    with pytest.raises(ValueError, match="batch_size"):
        EntityPredictor("unused", batch_size=0)


def readme_example() -> str:
    readme = (ROOT / "docs" / "scale.md").read_text(encoding="utf8")
    match = re.search(r"<!-- the example below is run by tests/test_predictor.py -->\n```python\n(.*?)```", readme, re.S)
    assert match, "docs/scale.md: the EntityPredictor example is missing"
    return match.group(1)


@pytest.mark.slow
def test_readme_example_runs_on_a_local_ray(trained_dir, tmp_path, predictor) -> None:
    if os.environ.get("CI"):
        import ray  # noqa: F401  (CI installs the extra)
    else:
        pytest.importorskip("ray.data")
    corpus = [{"id": i, "text": t} for i, t in zip(IDS * 5, TEXTS * 5)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus), encoding="utf8")
    code = readme_example().replace('"xx_maral_ner"', repr(str(trained_dir)))
    script = "import ray\nray.init(address='local', num_cpus=3, include_dashboard=False, logging_level='WARNING')\n" + code
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    written = pq.read_table(tmp_path / "entities").to_pylist()
    expected = entity_rows(predictor({"id": [r["id"] for r in corpus], "text": [r["text"] for r in corpus]}))
    key = lambda r: (r["id"], r["start"], r["end"], r["label"])  # noqa: E731  (blocks may come in any order)
    got = sorted(written, key=key)
    expected = sorted(expected, key=key)
    assert [key(r) + (r["text"],) for r in got] == [key(r) + (r["text"],) for r in expected]
    # the batches differ (Ray's blocks of 256 documents, nlp.pipe batches of 64 against 3):
    # under bfloat16 that moves a score in its fourth decimal
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in expected], abs=1e-3)
    assert all(r["error"] is None for r in written)


def test_an_error_row_stays_in_its_place_beside_a_row_of_the_same_id(predictor) -> None:
    """A failed row followed by a row of the same id: its error row came after the next
    row's entities."""
    table = predictor({"id": ["x", "x"], "text": [None, TEXTS[0]]})
    rows = table.to_pylist()
    assert rows[0]["error"] is not None and rows[0]["start"] is None, rows
    assert len(rows) > 1 and all(r["error"] is None for r in rows[1:]), rows
