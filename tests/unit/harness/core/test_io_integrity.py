"""Storage rules of memlens.harness.core.io a run relies on: rows unique by id whoever appends, results readable like
every other file of the run, storage failures named with their path and fix, and summaries that count
each example once."""

from __future__ import annotations

import errno
import json
import os
import re

import pytest

from memlens.harness.core.errors import StorageError, UserError, storage_error
from memlens.harness.core.io import RowStore, atomic_write_json, atomic_write_text, iter_jsonl_numbered, read_jsonl


def test_two_writers_of_one_rows_file_never_store_an_id_twice(tmp_path):
    """Two stores opened on the same file (two processes that met): each appends what the other already
    stored; the file keeps every id once, in the order they first arrived."""
    path = tmp_path / "rows.jsonl"
    a, b = RowStore(path), RowStore(path)
    a.append([{"id": 1, "v": "a"}, {"id": 2, "v": "a"}])
    b.append([{"id": 2, "v": "b"}, {"id": 3, "v": "b"}, {"id": 3, "v": "b again"}])
    a.append([{"id": 3, "v": "a"}, {"id": 4, "v": "a"}])
    assert [(r["id"], r["v"]) for r in read_jsonl(path)] == [(1, "a"), (2, "a"), (3, "b"), (4, "a")]
    assert a.done == b.done | {4} == {1, 2, 3, 4}


def test_a_torn_line_of_another_writer_is_cut_before_appending(tmp_path):
    path = tmp_path / "rows.jsonl"
    store = RowStore(path)
    store.append([{"id": 1}])
    with path.open("ab") as f:                     # a writer killed mid-line
        f.write(b'{"id": 2, "v": "cut o')
    store.append([{"id": 3}])
    assert read_jsonl(path) == [{"id": 1}, {"id": 3}]


def test_rows_stored_twice_before_are_read_once(tmp_path):
    """Files written by two writers before rows were unique by id (the first copy counts)."""
    from memlens.harness.audit.run import build_summary
    from memlens.harness.report.analyses import load_audit_rows

    rows_file = tmp_path / "FT.1" / "final" / "sd.jsonl"
    rows_file.parent.mkdir(parents=True)
    row = {"model": "FT.1", "checkpoint": "final", "dataset": "sd", "ned": 0.0, "control_ned": 1.0,
           "memorized": True, "excluded": None}
    rows_file.write_text("".join(json.dumps({**row, "id": i}) + "\n" for i in (1, 2, 1, 2, 3)))
    atomic_write_json(rows_file.with_name("sd.meta.json"), {
        "model": "FT.1", "checkpoint": "final", "dataset": "sd", "examples_sha256": "x", "model_fingerprint": "m",
        "control_fingerprint": "c", "control_dir": "c", "settings": {}})
    assert [r["id"] for r in RowStore(rows_file).rows()] == [1, 2, 3]
    entry = build_summary(tmp_path)["FT.1"]["final"]["sd"]
    assert entry["n_total"] == entry["n_scored"] == entry["n_memorized"] == 3
    assert [r["id"] for r in load_audit_rows(tmp_path)[("FT.1", "final", "sd")]] == [1, 2, 3]


def test_atomic_writes_get_the_mode_of_any_new_file(tmp_path):
    """mkstemp makes 0600 files; a summary or report must be as readable as the rows beside it."""
    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "report.html", "x")
        atomic_write_json(tmp_path / "summary.json", {})
        RowStore(tmp_path / "rows.jsonl").append([{"id": 1}])
    finally:
        os.umask(umask)
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == \
        {"report.html": 0o644, "summary.json": 0o644, "rows.jsonl": 0o644}


def test_a_json_array_line_names_the_fix(tmp_path):
    path = tmp_path / "canaries.jsonl"
    path.write_text('[{"id": "a", "prefix": "p", "target": "t"}]\n')
    with pytest.raises(UserError, match=r"canaries\.jsonl:1: expected a JSON object, got a JSON array; .*one "
                                        r"object per line"):
        list(iter_jsonl_numbered(path))


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "free space"), (errno.EROFS, "read-write"),
                                         (errno.EACCES, "permissions"), (errno.EDQUOT, "free space")])
def test_storage_failures_name_the_path_and_the_fix(tmp_path, code, words):
    failure = OSError(code, os.strerror(code), str(tmp_path / "out" / "x.json"))
    error = storage_error(failure)
    assert isinstance(error, StorageError) and error.exit_code == 2
    assert re.search(rf"cannot write {re.escape(str(tmp_path))}/out/x\.json: {re.escape(os.strerror(code))}",
                     str(error))
    assert words in str(error) and "rerun the same command" in str(error)
    assert storage_error(OSError(errno.ENOENT, "No such file")) is None
    assert storage_error(ValueError("x")) is None


def test_a_failed_append_names_its_file(tmp_path):
    """/dev/full answers every write with ENOSPC (a full disk, for real): the error names the rows file."""
    store = RowStore(tmp_path / "rows.jsonl")
    os.symlink("/dev/full", tmp_path / "rows.jsonl")
    with pytest.raises(StorageError, match=rf"cannot write {re.escape(str(tmp_path))}/rows\.jsonl: No space left"):
        store.append([{"id": 1}])
