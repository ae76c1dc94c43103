"""Fingerprints of inputs (spacy_maral.fingerprint) and two guards of the atomic writes
(spacy_maral.fileio): what a resumed step compares, and what it must never delete."""
import hashlib
import os
import tempfile

import pytest

from spacy_maral.fileio import remove_stale_temporaries, replace_dir
from spacy_maral.fingerprint import ABSENT, bytes_digest, file_stats, path_digest
from spacy_maral.inference.runner import model_files


def test_a_folder_by_sizes_and_times_is_the_digest_annotate_manifests_recorded(tmp_path) -> None:
    """The stat digest of a folder is byte for byte what runner.model_files recorded
    before it moved here, so annotate folders written then still resume."""
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "meta.json").write_text("{}", encoding="utf8")
    (tmp_path / "m" / "sub" / "w").write_bytes(b"12345")
    expected = hashlib.sha256()
    for rel in ("meta.json", "sub/w"):
        st = (tmp_path / "m" / rel).stat()
        expected.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf8"))
    assert path_digest(tmp_path / "m") == expected.hexdigest() == model_files(tmp_path / "m")
    assert path_digest(tmp_path / "nope") == ABSENT and model_files(tmp_path / "nope") == ""


def test_content_digest_follows_the_bytes_not_the_times(tmp_path) -> None:
    file = tmp_path / "text.txt"
    file.write_bytes(b"one")
    first, by_stat = path_digest(file, content=True), path_digest(file)
    os.utime(file, ns=(1, 1))  # the same bytes, another modification time
    assert path_digest(file, content=True) == first and path_digest(file) != by_stat
    file.write_bytes(b"two")
    assert path_digest(file, content=True) != first


def test_content_digest_of_folders_keeps_names_and_bytes_apart(tmp_path) -> None:
    """'ab' holding 'c' and 'a' holding 'bc' are different folders."""
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "x" / "ab").write_bytes(b"c")
    (tmp_path / "y" / "a").write_bytes(b"bc")
    assert path_digest(tmp_path / "x", content=True) != path_digest(tmp_path / "y", content=True)
    assert bytes_digest([b"ab", b"c"]) != bytes_digest([b"a", b"bc"])


def test_file_stats_name_size_and_time(tmp_path) -> None:
    file = tmp_path / "in.txt"
    file.write_bytes(b"four")
    os.utime(file, ns=(5, 7))
    assert file_stats([file]) == [{"name": "in.txt", "bytes": 4, "mtime_ns": 7}]


def test_a_run_removes_its_own_stale_temporaries_and_keeps_a_users_file(tmp_path) -> None:
    fd, stale = tempfile.mkstemp(prefix=".part-000001.parquet.", suffix=".tmp", dir=tmp_path)  # as atomic_open names it
    os.close(fd)
    users = tmp_path / ".notes.v2.tmp"
    users.write_text("mine", encoding="utf8")
    assert remove_stale_temporaries(tmp_path) == 1
    assert not os.path.exists(stale) and users.read_text(encoding="utf8") == "mine"


def test_replace_dir_refuses_a_file_and_leaves_it(tmp_path) -> None:
    """A checkpoint or snapshot path that is a user's file: an error naming it, the file
    untouched and nothing moved aside."""
    file = tmp_path / "checkpoint"
    file.write_text("mine", encoding="utf8")
    with pytest.raises(ValueError, match="checkpoint is a file, not a folder"):
        with replace_dir(file):
            pass
    assert file.read_text(encoding="utf8") == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
