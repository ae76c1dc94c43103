"""annotate's planned partitions: read by their workers from the files, they are the same
lines (numbers, raw bytes, input digests) as the input read whole and cut in order (tests/reference_input.py),
for any partition size, checkpoint spacing, mix of text / JSONL / Parquet files and
line endings; a file that changed after planning is an error naming it.
"""
import json
from pathlib import Path
from typing import List

import pyarrow
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_input import iter_partitions, iter_units
from spacy_maral.inference.annotate import plan as plan_module
from spacy_maral.inference.annotate.inputs import BadLine, input_files, parse_unit, partition_digest
from spacy_maral.inference.annotate.plan import index_file, load_partition, plan_partitions, refuse_repeated_ids

LINE = st.sampled_from([b"Paris is big.\n", b"\n", b"caf\xc3\xa9 Berlin\r\n", b"\xff bad\n", b'{"text": "EU"}\n', b"x"])


def write_inputs(folder: Path, files: List[List[bytes]], parquet_rows: List[int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, lines in enumerate(files):
        body = b"".join(line if line.endswith(b"\n") or j == len(lines) - 1 else line + b"\n" for j, line in enumerate(lines))
        (folder / f"f{i}.{'jsonl' if i % 2 else 'txt'}").write_bytes(body)
    for i, n in enumerate(parquet_rows):
        table = pyarrow.table({"id": [f"r{k}" for k in range(n)], "text": [f"text {k}" if k % 5 else None for k in range(n)]},
                              schema=pyarrow.schema([("id", pyarrow.string()), ("text", pyarrow.string())]))
        pq.write_table(table, folder / f"p{i}.parquet", row_group_size=3)


def same_partitions(folder: Path, partition_size: int) -> None:
    files = input_files(folder)
    expected = list(iter_partitions(iter_units(files), partition_size))
    plans = list(plan_partitions([index_file(f) for f in files], partition_size))
    assert [p.index for p in plans] == [p.index for p in expected]
    for plan, want in zip(plans, expected):
        got = load_partition(plan)
        assert plan.n_lines == want.n_lines
        assert [(f.name, n, raw) for f, n, raw in got.units] == [(f.name, n, raw) for f, n, raw in want.units]
        assert partition_digest(got) == partition_digest(want)
    # the same folder as a URI, read through pyarrow's filesystem: the same partitions
    by_uri = input_files(folder.resolve().as_uri())
    assert [(f.name, f.format) for f in by_uri] == [(f.name, f.format) for f in files] and all(f.fs is not None for f in by_uri)
    for plan, want in zip(plan_partitions([index_file(f) for f in by_uri], partition_size), expected):
        assert partition_digest(load_partition(plan)) == partition_digest(want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.lists(LINE, min_size=0, max_size=30), min_size=1, max_size=4),
    parquet_rows=st.lists(st.integers(0, 11), max_size=2),
    partition_size=st.integers(1, 17),
    checkpoint=st.integers(1, 9),
)
def test_planned_partitions_are_the_input_cut_in_order(tmp_path_factory, monkeypatch, files, parquet_rows,
                                                        partition_size, checkpoint) -> None:
    monkeypatch.setattr(plan_module, "CHECKPOINT_LINES", checkpoint)
    folder = tmp_path_factory.mktemp("inputs")
    write_inputs(folder, files, parquet_rows)
    same_partitions(folder, partition_size)


def test_a_uri_that_is_missing_or_empty_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        input_files((tmp_path / "nothing").as_uri())
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no files"):
        input_files((tmp_path / "empty").as_uri())


def test_a_file_that_shrank_after_planning_is_named(tmp_path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("one\ntwo\nthree\n", encoding="utf8")
    [plan] = plan_partitions([index_file(input_files(path)[0])], 10)
    path.write_text("one\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"a.txt: has 1 lines, not the 3"):
        load_partition(plan)


def test_a_parquet_file_without_the_text_column_fails_when_planned(tmp_path) -> None:
    pq.write_table(pyarrow.table({"body": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(ValueError, match=r"a.parquet: no column 'text'"):
        index_file(input_files(tmp_path / "a.parquet")[0])


def test_checkpoints_let_a_worker_start_near_its_lines(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(plan_module, "CHECKPOINT_LINES", 4)
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(10)), encoding="utf8")
    plans = list(plan_partitions([index_file(input_files(path)[0])], 6))
    second = plans[1].segments[0]
    assert (second.first, second.count, second.offset_line) == (7, 4, 5)
    assert second.offset == len("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(4)).encode())


ID = st.one_of(st.none(), st.integers(0, 4), st.sampled_from(["0", "1", "a", "f0.txt:1", "f1.jsonl:2", "p0.parquet:1"]))
ID_LINE = st.one_of(st.just(b"\n"), st.just(b"{bad\n"),
                    st.tuples(ID, st.sampled_from(["Paris", 3])).map(
                        lambda it: (json.dumps({"text": it[1]} if it[0] is None else {"id": it[0], "text": it[1]}) + "\n").encode()))


def first_repeat(folder: Path):
    """The reference: the first line whose record id an earlier line has, and that line."""
    seen = {}
    for file, line, raw in iter_units(input_files(folder)):
        parsed = parse_unit(file, line, raw)
        if parsed is None or isinstance(parsed, BadLine):
            continue
        if parsed[0] in seen:
            return f"{file.name}, {file.unit} {line}: the id {parsed[0]!r} is already the id of {seen[parsed[0]]} "
        seen[parsed[0]] = f"{file.name}, {file.unit} {line}"
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(ID_LINE, max_size=6), min_size=1, max_size=3), text_lines=st.integers(0, 3),
       parquet_ids=st.lists(st.tuples(ID, st.booleans()), max_size=5), checkpoint=st.integers(1, 3))
def test_repeated_ids_are_found_as_a_full_read_finds_them(tmp_path_factory, monkeypatch, files, text_lines, parquet_ids,
                                                           checkpoint) -> None:
    """Any mix of JSONL ids (numbers and strings), default ids, text files, Parquet ids and
    null texts: the planned check names the same first repeat as reading every record."""
    monkeypatch.setattr(plan_module, "CHECKPOINT_LINES", checkpoint)
    folder = tmp_path_factory.mktemp("ids")
    (folder / "f0.txt").write_text("Paris\n" * text_lines, encoding="utf8")
    for i, lines in enumerate(files, start=1):
        (folder / f"f{i}.jsonl").write_bytes(b"".join(lines))
    pq.write_table(pyarrow.table({"id": [None if d is None else str(d) for d, _ in parquet_ids],
                                  "text": ["Berlin" if there else None for _, there in parquet_ids]},
                                 schema=pyarrow.schema([("id", pyarrow.string()), ("text", pyarrow.string())])),
                   folder / "p0.parquet", row_group_size=2)
    expected = first_repeat(folder)
    indexes = [index_file(f) for f in input_files(folder)]
    if expected is None:
        refuse_repeated_ids(indexes)
    else:
        with pytest.raises(ValueError) as err:
            refuse_repeated_ids(indexes)
        assert str(err.value).startswith(expected)
