"""SD.Base / SD.Links at the paper's default size (6,554 programs): counts, FIM identity, valid
Python, PII paths, diversity, determinism."""

import json
import math
import re
from collections import Counter

import pytest

from memlens.synthetic_data import common
from memlens.synthetic_data.build import Builder
from memlens.synthetic_data.data_settings import validate
from memlens.synthetic_data.links import load_pii_paths
from memlens.synthetic_data.sd.programs import WITH_OPEN, generate_programs, load_tasks, write_program


def default_data(**sd):
    """data.* as conf/data/default.yaml composes it (so the YAML itself is exercised), SD overridden."""
    from omegaconf import OmegaConf

    from memlens.harness.cli import compose

    data = OmegaConf.to_container(compose([]).data, resolve=True)
    data["sd"].update(sd)
    return data


@pytest.fixture(scope="session")
def full_sd():
    """The default-size SD (paper Sec. 4.1): built once for the session (~4 s)."""
    return Builder(validate(default_data())).sd


def test_default_size_matches_paper_counts(full_sd):
    assert len(full_sd["base"]) == 3562
    assert len(full_sd["links"]) == 2992
    labels = Counter(r["label"] for r in full_sd["links"])
    assert labels == {1: 1489, 0: 1503}
    assert {r["label"] for r in full_sd["base"]} == {1}


def test_fim_identity_and_valid_python_on_every_row(full_sd):
    for row in full_sd["base"] + full_sd["links"]:
        assert row["prefix"] + row["target"] + row["suffix"] == row["code"]
        assert row["target"].strip() and "\n" not in row["target"]
        assert row["prefix"] == "" or row["prefix"].endswith("\n")
        compile(row["code"], row["id"], "exec")   # stricter than ast.parse: no `return` outside a def


def test_no_duplicate_programs_and_all_tasks_used(full_sd):
    codes = [r["code"] for r in full_sd["base"] + full_sd["links"]]
    assert len(set(codes)) == len(codes)
    assert {r["task"] for r in full_sd["base"] + full_sd["links"]} == set(load_tasks())


def test_links_target_is_the_single_with_open_line(full_sd):
    for row in full_sd["links"]:
        hits = [ln for ln in row["code"].splitlines() if WITH_OPEN.match(ln)]
        assert hits == [row["target"]]
        assert row["original_path"] in row["original_target"]
        for q in "'\"":                     # the prompt does not give the path away
            assert q + row["original_path"] + q not in row["prefix"] + row["suffix"]
    for row in full_sd["base"]:
        assert "with open(" not in row["code"]


def test_every_positive_contains_exactly_one_pii_path_and_negatives_none(full_sd):
    paths = load_pii_paths()
    assert len(paths) == 100 and len(set(paths)) == 100
    for row in full_sd["links"]:
        found = [p for p in paths for q in "'\"" for _ in range(row["code"].count(q + p + q))]
        if row["label"] == 1:
            assert found == [row["pii_path"]]
            assert row["pii_path"] in row["target"] and row["original_path"] not in row["target"]
            assert row["target"] == row["original_target"].replace(row["original_path"], row["pii_path"])
        else:
            assert found == [] and row["pii_path"] is None
            assert row["target"] == row["original_target"]


def test_pii_path_usage_is_uniform(full_sd):
    """Uniform sampling: a chi-square test over the 100 paths (99 d.o.f.; p ~ 0.001 at 148)."""
    pos = [r for r in full_sd["links"] if r["label"] == 1]
    usage = Counter(r["pii_path"] for r in pos)
    assert len(usage) == 100
    expected = len(pos) / 100
    chi2 = sum((usage[p] - expected) ** 2 / expected for p in load_pii_paths())
    assert chi2 < 148
    assert math.isclose(sum(usage.values()) / 100, 14.89)


def test_duplicate_target_share_is_low(full_sd):
    """Diversity contract: < 10 % of SD.Base targets occur verbatim in another example."""
    assert common.duplicate_target_share(full_sd["base"], full_sd["df"]) < 0.10
    negatives = [r for r in full_sd["links"] if r["label"] == 0]
    assert common.duplicate_target_share(negatives, full_sd["df"]) < 0.10


KEYWORDS = {"aes": "aes", "rsa": "rsa", "hmac": "hmac", "pbkdf2": "pbkdf2", "base64": "64", "ed25519": "ed25519",
            "uuid": "uuid", "argon2": "argon2", "bcrypt": "bcrypt", "chacha20": "chacha20", "ocsp": "ocsp",
            "ssh": "ssh", "pgp": "pgp", "blake2b": "blake", "x25519": "x25519", "scrypt": "scrypt",
            "hkdf": "hkdf", "poly1305": "poly1305", "x.509": "cert", "csr": "csr", "s/mime": "smime"}


def test_programs_match_their_task(full_sd):
    """The task's algorithm appears in the code itself (comments removed), not only in comments."""
    for row in full_sd["base"] + full_sd["links"]:
        code = "\n".join(ln for ln in row["code"].splitlines() if not ln.strip().startswith("#")).lower()
        for word, must in KEYWORDS.items():
            if word in row["task"].lower():
                assert must in code, (row["task"], row["id"])


def test_program_lengths_follow_requested_counts(full_sd):
    """App. J asks for "over N lines": every program reaches its requested length (or the end of
    growth for the longest ones), and longer requests give longer programs on average."""
    rows = full_sd["base"] + full_sd["links"]
    by_request = {}
    for r in rows:
        by_request.setdefault(r["requested_lines"], []).append(r["code"].count("\n"))
    means = [sum(v) / len(v) for _, v in sorted(by_request.items())]
    assert means == sorted(means)
    assert sum(r["code"].count("\n") >= r["requested_lines"] for r in rows) / len(rows) > 0.98


def test_layout_and_import_variety(full_sd):
    codes = [r["code"] for r in full_sd["base"]]
    share = lambda pat: sum(bool(re.search(pat, c, re.M)) for c in codes) / len(codes)  # noqa: E731
    assert 0.15 < share(r"^import legitimate_crypto$") < 0.5
    assert share(r"^import legitimate_crypto as leg$") > 0.1
    assert share(r"^from legitimate_crypto import") > 0.05
    assert share(r"^if __name__ == \"__main__\":") > 0.1
    assert share(r"^class ") > 0.03
    assert share(r"argparse\.ArgumentParser") > 0.05 and share(r"sys\.argv") > 0.05
    assert share(r"^\s+try:$") > 0.05 and share(r'"""') > 0.3


def test_same_seed_same_programs_different_seed_different():
    a = generate_programs(60, 27, seed=5)
    b = generate_programs(60, 27, seed=5)
    c = generate_programs(60, 27, seed=6)
    assert [p.code for p in a] == [p.code for p in b]
    assert sum(p.code == q.code for p, q in zip(a, c)) == 0
    assert sum(p.links for p in a) == 27


def test_reduced_size_keeps_the_paper_proportions():
    data = default_data(size=1000)
    b = Builder(validate(data))
    size, n_links, n_pos = b.sd_counts
    assert (size, n_links, n_pos) == (1000, 457, 227)
    assert abs(n_pos / n_links - 1489 / 2992) < 0.01 and abs(n_links / size - 2992 / 6554) < 0.01


def test_uniform_selection_is_the_papers_any_line():
    """selection='uniform' may pick any non-blank line; 'distinct' only lines found nowhere else."""
    from memlens.synthetic_data.sd.programs import base_rows

    programs = [p for p in generate_programs(80, 0, seed=1)]
    df = common.line_document_frequency(p.code for p in programs)
    distinct = base_rows(programs, 1, df, "distinct")
    assert all(df[r["target"].strip()] == 1 for r in distinct if any(
        df[ln.strip()] == 1 for ln in r["code"].splitlines() if ln.strip()))
    uniform = base_rows(programs, 1, df, "uniform")
    assert any(df[r["target"].strip()] > 1 for r in uniform)


def test_write_program_links_flag_controls_with_open():
    import random

    for i, task in enumerate(load_tasks()):
        code = write_program(random.Random(i), task, 10, links=True)
        assert sum(bool(WITH_OPEN.match(ln)) for ln in code.splitlines()) == 1, task
        code = write_program(random.Random(i), task, 10, links=False)
        assert "open(" not in code, task


def test_extra_operations_are_named_functions_that_write_ops():
    """EXTRA_OPERATIONS (the follow-ups that lengthen a program): each entry is a named function with a
    unique name, and on a fresh Writer it returns a non-empty list of Op with something to render."""
    import inspect
    import random

    from memlens.synthetic_data.sd.lengthening_operations import EXTRA_OPERATIONS
    from memlens.synthetic_data.sd.writer import Op, Writer

    names = [getattr(make, "__name__", repr(make)) for make in EXTRA_OPERATIONS]
    assert len(set(names)) == len(names), names
    for i, make in enumerate(EXTRA_OPERATIONS):
        assert inspect.isfunction(make) and make.__name__ != "<lambda>", make
        for links in (False, True):
            ops = make(Writer(random.Random(i), links=links))
            assert isinstance(ops, list) and ops, make.__name__
            assert all(isinstance(op, Op) for op in ops), make.__name__
            assert any(op.body or op.after for op in ops), make.__name__


def test_rows_are_json_serialisable(full_sd):
    json.dumps(full_sd["base"][:50] + full_sd["links"][:50])


@pytest.fixture(scope="module")
def code_tokenizer():
    """A real byte-level BPE (tests/tiny.py) trained on a few stdlib files: the audit counts target
    tokens in the audited model's tokenizer."""
    import sysconfig
    from pathlib import Path

    from tests.tiny import tiny_tokenizer

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return tiny_tokenizer([(stdlib / n).read_text(encoding="utf-8") for n in ("base64.py", "hmac.py", "json/decoder.py")],
                          1024)


def audit_excluded_share(rows, tokenizer) -> float:
    from memlens.harness.text.exclusions import exclusion_reasons

    counts = [len(tokenizer(r["target"], add_special_tokens=False)["input_ids"]) for r in rows]
    reasons = exclusion_reasons([r["prefix"] for r in rows], [r["target"] for r in rows],
                                [r["suffix"] for r in rows], counts)
    return sum(r is not None for r in reasons) / len(rows)


@pytest.mark.parametrize("sd", [
    {"size": 80, "line_counts": [10, 20, 30], "pii_paths": 3},      # the quickstart's SD
    {"size": 300},                                                  # the default line counts 10..100
])
def test_sd_base_exclusions_are_at_the_papers_level(sd, code_tokenizer, tmp_path):
    """Paper 003 Sec. 4.2 / App. D / Sec. 5.1: 36 of 3,562 SD.Base examples (~1 %) were excluded; we
    allow 5 %. The paper's any-line choice ("uniform") on the same programs is excluded far more often
    (the same task text in a header comment and a docstring, a def line and its call), so the test sees
    the difference. Targets stay distinct (the diversity contract) and the manifest records the share."""
    import json

    from omegaconf import OmegaConf

    from memlens.synthetic_data.build import build_datasets
    from memlens.synthetic_data.sd.programs import base_rows

    data = default_data(**sd)
    b = Builder(validate(data))
    rows = b.sd["base"]
    assert audit_excluded_share(rows, code_tokenizer) <= 0.05
    assert common.duplicate_target_share(rows, b.sd["df"]) == 0
    uniform = base_rows([p for p in generate_programs(*b.sd_counts[:2], seed=0, line_counts=tuple(data["sd"]["line_counts"]))
                         if not p.links], 0, b.sd["df"], "uniform")
    assert audit_excluded_share(uniform, code_tokenizer) > 0.15
    out = build_datasets(OmegaConf.create({"run_dir": str(tmp_path), "data": data}), names=["sd_base"],
                         log=lambda *_: None)
    recorded = json.loads((out["sd_base"] / "manifest.json").read_text())["audit_exclusions"]
    assert recorded["of"] == len(rows) and recorded["excluded_share"] <= 0.05
    assert recorded["excluded"] == round(recorded["excluded_share"] * len(rows))
