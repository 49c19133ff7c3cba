"""PD: chunking, dedup, disjoint per-file splits, pd_eval FIM rows, corpus sources and errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.core.errors import UserError
from memlens.synthetic_data import public_code as pc

EXCLUDE = ["test/*", "*/test/*", "*/tests/*", "idlelib/*", "site-packages/*"]
PROPS = {"pd_pt": 0.3, "pd_1": 0.15, "pd_2": 0.15, "pd_2_val": 0.1, "pd_3": 0.1, "pd_3_val": 0.1, "pd_eval": 0.1}

MODULE = '''"""Doc."""
import os

X = 1


# helper comment
@decorator
def f(a):
    return a + 1


class C:
    def m(self):
        return 2


async def g():
    await h()
'''


def test_chunks_are_top_level_defs_with_decorators_and_comments():
    chunks = pc.chunk_source(MODULE, max_chars=2000, min_chars=1, window_lines=40)
    assert chunks == ['"""Doc."""\nimport os\n\nX = 1\n',
                      "# helper comment\n@decorator\ndef f(a):\n    return a + 1\n",
                      "class C:\n    def m(self):\n        return 2\n",
                      "async def g():\n    await h()\n"]


def test_min_chars_drops_short_chunks_and_max_chars_caps():
    assert all(len(c.strip()) >= 30 for c in pc.chunk_source(MODULE, 2000, 30, 40))
    long_fn = "def big():\n" + "".join(f"    x{i} = {i}\n" for i in range(200))
    chunks = pc.chunk_source(long_fn, max_chars=300, min_chars=1, window_lines=40)
    assert len(chunks) > 5 and all(len(c) <= 301 for c in chunks)
    # whole lines only: re-joining gives the function back (up to the newline trimming per chunk)
    assert "".join(chunks) == long_fn


def test_unparsable_file_falls_back_to_line_windows():
    text = "def broken(:\n" + "".join(f"line {i}\n" for i in range(95))
    chunks = pc.chunk_source(text, max_chars=10_000, min_chars=1, window_lines=40)
    assert [c.count("\n") for c in chunks] == [40, 40, 16]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=7, max_size=7).filter(lambda v: sum(v) > 0.01),
       st.text(min_size=1, max_size=30), st.integers(0, 1000))
def test_assign_split_only_uses_splits_with_a_share(weights, name, seed):
    total = sum(weights)
    props = dict(zip(pc.SPLITS, [w / total for w in weights]))
    split = pc.assign_split(name, props, seed)
    assert props[split] > 0


def test_assign_split_follows_proportions():
    names = [f"pkg/mod_{i}.py" for i in range(4000)]
    counts = {s: 0 for s in pc.SPLITS}
    for n in names:
        counts[pc.assign_split(n, PROPS, 3)] += 1
    for split, share in PROPS.items():
        assert abs(counts[split] / len(names) - share) < 0.03


@pytest.fixture(scope="module")
def stdlib_pd():
    root = pc.default_source_dir()
    rels = pc.list_source_files(root, ["*.py"], EXCLUDE, max_files=80, seed=0)
    corpus = pc.load_directory(root, rels)
    return pc.build_pd(corpus, PROPS, seed=0, max_chars=2000, min_chars=64, window_lines=40)


def test_stdlib_splits_are_disjoint_by_source_file_and_content(stdlib_pd):
    files_by_split = {s: {r["source_file"] for r in rows} for s, rows in stdlib_pd.splits.items()}
    splits = list(files_by_split)
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            assert not files_by_split[a] & files_by_split[b], (a, b)
    texts = [r["text"] for rows in stdlib_pd.splits.values() for r in rows]
    assert len(texts) == len(set(texts))                       # deduplicated by content
    assert all(len(t) <= 2001 for t in texts)
    assert stdlib_pd.stats["files"] == 80
    assert sum(stdlib_pd.stats["rows_per_split"].values()) == len(texts)
    ids = [r["id"] for rows in stdlib_pd.splits.values() for r in rows]
    assert len(ids) == len(set(ids))


def test_pd_eval_rows_are_line_fim_rows(stdlib_pd):
    code = stdlib_pd.splits["pd_eval"]
    rows = pc.eval_rows(code, seed=0)
    assert len(rows) == len(code)
    for row, src in zip(rows, code):
        assert row["prefix"] + row["target"] + row["suffix"] == src["text"]
        assert row["target"].strip() and "\n" not in row["target"]
    assert pc.eval_rows(code, seed=0) == rows and pc.eval_rows(code, seed=1) != rows


def test_max_files_is_a_seeded_sample():
    root = pc.default_source_dir()
    a = pc.list_source_files(root, ["*.py"], EXCLUDE, 20, seed=0)
    assert a == pc.list_source_files(root, ["*.py"], EXCLUDE, 20, seed=0)
    assert a != pc.list_source_files(root, ["*.py"], EXCLUDE, 20, seed=1)
    assert a == sorted(a) and not any(r.startswith(("test/", "site-packages/")) for r in a)


def test_directory_corpus_records_undecodable_files(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "good.py").write_text("def f():\n    return 'a fine function body'\n")
    (tmp_path / "bad.py").write_bytes(b"x = '\xff\xfe not utf-8'\n")
    (tmp_path / "notes.txt").write_text("not python")
    rels = pc.list_source_files(tmp_path, ["*.py"], [], None, 0)
    assert rels == ["bad.py", "pkg/good.py"]
    corpus = pc.load_directory(tmp_path, rels)
    assert [f for f, _ in corpus.files] == ["pkg/good.py"]
    assert corpus.skipped == [{"file": "bad.py", "reason": "UnicodeDecodeError"}]


def test_unreadable_source_dir_names_the_key(tmp_path):
    with pytest.raises(UserError, match=r"data\.pd\.source_dir"):
        pc.list_source_files(tmp_path / "missing", ["*.py"], [], None, 0)


def test_hf_dataset_from_local_jsonl(tmp_path):
    import json

    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps({"content": f"def f{i}():\n    return {i} * 'padding text here'\n",
                                        "path": f"repo/f{i}.py"}) + "\n" for i in range(6)))
    corpus = pc.load_hf_dataset(str(path), "content", "path", max_files=None, seed=0)
    assert sorted(name for name, _ in corpus.files) == [f"repo/f{i}.py" for i in range(6)]
    with pytest.raises(UserError, match=r"data\.pd\.text_field"):
        pc.load_hf_dataset(str(path), "text", None, max_files=None, seed=0)


def test_base_pool_and_its_complement_partition_the_files_whatever_the_seed(tmp_path):
    # The shipped base's pool ignores the seed: no seed of an experiment that starts from the base may
    # select a file the base was pre-trained on.
    for i in range(60):
        (tmp_path / f"m{i:02d}.py").write_text(f"def f{i}():\n    return {i}\n")
    every = pc.list_source_files(tmp_path, ["*.py"], [], None, 0)
    pool = pc.list_source_files(tmp_path, ["*.py"], [], None, 0, "base_pool", 0.6)
    for seed in (0, 1, 7):
        rest = pc.list_source_files(tmp_path, ["*.py"], [], 20, seed, "outside_base_pool", 0.6)
        assert len(rest) == 20 and not set(rest) & set(pool)
    assert set(pool) | set(pc.list_source_files(tmp_path, ["*.py"], [], None, 3, "outside_base_pool", 0.6)) \
        == set(every)
    assert 20 <= len(pool) <= 52          # ~0.6 of 60 (a hash, not an exact count)
    assert pool == [n for n in every if pc.in_base_pool(n, 0.6)]


def test_base_pool_applies_to_a_local_dataset_too(tmp_path):
    import json

    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps({"content": f"x = {i}\n", "path": f"f{i}.py"}) + "\n" for i in range(40)))
    pool = pc.load_hf_dataset(str(path), "content", "path", None, 0, "base_pool", 0.5)
    rest = pc.load_hf_dataset(str(path), "content", "path", None, 0, "outside_base_pool", 0.5)
    names = lambda corpus: {n for n, _ in corpus.files}  # noqa: E731
    assert names(pool).isdisjoint(names(rest)) and len(names(pool) | names(rest)) == 40
    assert names(pool) == {f"f{i}.py" for i in range(40) if pc.in_base_pool(f"f{i}.py", 0.5)}
