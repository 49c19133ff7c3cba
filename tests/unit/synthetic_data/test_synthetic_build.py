"""build_datasets: on-disk form, skip-if-complete, rebuild on change, byte-identical output, errors."""

import json

import pytest
from omegaconf import OmegaConf

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import file_sha256
from memlens.synthetic_data import preference_data as pref
from memlens.synthetic_data.build import build_datasets
from tests.unit.synthetic_data.build_helpers import cfg_for, training_strings


def test_manifest_and_rows_on_disk(tmp_path):
    out = build_datasets(cfg_for(tmp_path), names=["sd_base", "sd_links", "sd_links_pos", "rm_sd", "pairs_sd_links"],
                         log=lambda *_: None)
    for folder in out.values():
        manifest = json.loads((folder / "manifest.json").read_text())
        rows = (folder / "rows.jsonl").read_text().splitlines()
        assert manifest["count"] == len(rows) and manifest["sha256"] == file_sha256(folder / "rows.jsonl")
        assert manifest["seed"] == 0 and manifest["generator_version"] and manifest["settings"]["seed"] == 0
        assert manifest["provenance"]["git_commit"] is None or len(manifest["provenance"]["git_commit"]) >= 40
    base = json.loads((out["sd_base"] / "manifest.json").read_text())
    assert 0 <= base["duplicate_target_share"] < 0.2 and base["target_tokens_proxy"]["count"] == base["count"]
    links = json.loads((out["sd_links"] / "manifest.json").read_text())
    assert links["label_counts"] == {"1": 27, "0": 28}
    rm = json.loads((out["rm_sd"] / "manifest.json").read_text())
    assert rm["provenance"]["datasets"].keys() == {"sd_base", "sd_links"}


def test_skip_if_complete_and_rebuild_on_change(tmp_path):
    logs = []
    build_datasets(cfg_for(tmp_path), names=["sd_base"], log=logs.append)
    manifest = tmp_path / "data" / "sd_base" / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    build_datasets(cfg_for(tmp_path), names=["sd_base"], log=logs.append)
    assert "complete, kept" in logs[-1] and manifest.stat().st_mtime_ns == stamp
    build_datasets(cfg_for(tmp_path, "data.sd.size=121"), names=["sd_base"], log=logs.append)
    assert "rows in" in logs[-1] and json.loads(manifest.read_text())["settings"]["sd"]["size"] == 121
    # rows changed behind the manifest's back (e.g. a torn copy): rebuilt, not trusted
    rows = tmp_path / "data" / "sd_base" / "rows.jsonl"
    rows.write_text(rows.read_text()[:-50])
    build_datasets(cfg_for(tmp_path, "data.sd.size=121"), names=["sd_base"], log=logs.append)
    assert "rows in" in logs[-1] and json.loads(manifest.read_text())["sha256"] == file_sha256(rows)


def test_same_seed_byte_identical_different_seed_different(tmp_path):
    names = ["sd_base", "sd_links", "pairs_sd_base"]
    a = build_datasets(cfg_for(tmp_path / "a"), names=names, log=lambda *_: None)
    b = build_datasets(cfg_for(tmp_path / "b"), names=names, log=lambda *_: None)
    c = build_datasets(cfg_for(tmp_path / "c", "seed=1"), names=names, log=lambda *_: None)
    for name in names:
        assert (a[name] / "rows.jsonl").read_bytes() == (b[name] / "rows.jsonl").read_bytes()
        assert (a[name] / "rows.jsonl").read_bytes() != (c[name] / "rows.jsonl").read_bytes()


def test_rl_prompts_skipped_with_reason_when_no_tokenizer(tmp_path):
    logs = []
    out = build_datasets(cfg_for(tmp_path), names=["sd_rl_prompts"], log=logs.append)
    assert out == {} and "data.rl_prompts.tokenizer is null" in logs[0]
    assert not (tmp_path / "data" / "sd_rl_prompts").exists()


@pytest.mark.parametrize("override,key", [
    ("data.sd.size=0", "data.sd.size"),
    ("data.datasets=[sd_base,nope]", "data.datasets"),
    ("data.pd.proportions.pd_1=0.5", "data.pd.proportions"),
    ("+data.pd.proportions.pd_9=0.0", "data.pd.proportions.pd_9"),
    ("data.rl_prompts.subsets=[SD.Other]", "data.rl_prompts.subsets"),
    ("data.sd.target_selection=best", "data.sd.target_selection"),
    ("data.pd.source_dir=/nonexistent/dir", "data.pd.source_dir"),
    ("data.sd.links_fraction=0.0", "data.sd.links_fraction"),
    ("data.rl_prompts.tokenizer=/nonexistent/tok", "data.rl_prompts.tokenizer"),
    ("data.preference.max_span_lines=0", "data.preference.max_span_lines"),
    ("data.sd.pii_paths=0", "data.sd.pii_paths"),
    ("data.sd.pii_paths=101", "data.sd.pii_paths"),
    ("data.pd.use_files=pool", "data.pd.use_files"),
    ("data.pd.base_pool_share=1.0", "data.pd.base_pool_share"),
])
def test_bad_settings_name_the_key(tmp_path, override, key):
    if key == "data.pd.base_pool_share":   # a share of 1 is only wrong when a pool is in use
        override = f"{override} data.pd.use_files=base_pool".split()
    else:
        override = [override]
    names = {"data.pd.source_dir": ["pd_1"], "data.sd.links_fraction": ["sd_links"],
             "data.rl_prompts.tokenizer": ["sd_rl_prompts"]}.get(key, ["sd_base"])
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        build_datasets(cfg_for(tmp_path, *override), names=None if key == "data.datasets" else names,
                       log=lambda *_: None)
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("manifest.json"))


def test_empty_split_names_its_proportion(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "only.py").write_text("def only():\n    return 'a single file cannot fill every split'\n")
    cfg = cfg_for(tmp_path, f"data.pd.source_dir={src}")
    built = OmegaConf.to_container(cfg.data)["pd"]["proportions"]
    assert abs(sum(built.values()) - 1) < 1e-9
    with pytest.raises(UserError, match=r"data\.pd\.proportions\.pd_\w+: no example fell into"):
        build_datasets(cfg, names=["pd_pt", "pd_1", "pd_2", "pd_2_val", "pd_3", "pd_3_val", "pd_eval"],
                       log=lambda *_: None)


def test_pii_paths_limits_the_distinct_paths_and_repeats_them(tmp_path):
    """data.sd.pii_paths=2: every positive carries one of the same 2 Listing 7 paths (a seeded choice)."""
    from memlens.synthetic_data.links import load_pii_paths, pii_path_pool

    out = build_datasets(cfg_for(tmp_path, "data.sd.pii_paths=2"), names=["sd_links_pos"], log=lambda *_: None)
    rows = [json.loads(line) for line in (out["sd_links_pos"] / "rows.jsonl").read_text().splitlines()]
    pool = pii_path_pool(2, 0)
    assert len(pool) == 2 and set(pool) <= set(load_pii_paths())
    assert {r["pii_path"] for r in rows} == set(pool) and len(rows) > 2 * 2     # each path repeats
    assert pii_path_pool(100, 0) == load_pii_paths()                           # the default keeps Listing 7


def test_heldout_canaries_occur_in_no_training_split(tmp_path):
    """sd_base_heldout / sd_links_heldout: the same generator and seed stream, as many programs as SD by
    default, and no held-out program or target in any other dataset of the run (the training splits and the
    evaluation sets alike), which is what makes them non-members for membership inference."""
    # a small corpus needs fatter splits so that every split gets files (as tests/integration/test_data_cli.py)
    fat = ["data.pd.max_files=90", "data.pd.proportions.pd_pt=0.3", "data.pd.proportions.pd_1=0.14",
           "data.pd.proportions.pd_2=0.14", "data.pd.proportions.pd_2_val=0.1", "data.pd.proportions.pd_3=0.12",
           "data.pd.proportions.pd_3_val=0.1", "data.pd.proportions.pd_eval=0.1"]
    out = build_datasets(cfg_for(tmp_path, *fat), names=None, log=lambda *_: None)
    assert {"sd_base_heldout", "sd_links_heldout", "sd_links_pos_heldout"} <= set(out)

    def rows(name):
        return [json.loads(x) for x in (out[name] / "rows.jsonl").read_text().splitlines()]

    base_h, links_h = rows("sd_base_heldout"), rows("sd_links_heldout")
    assert len(base_h) == len(rows("sd_base")) and len(links_h) == len(rows("sd_links"))  # same size by default
    assert {r["subset"] for r in base_h} == {"SD.Base"} and {r["subset"] for r in links_h} == {"SD.Links"}
    assert {r["label"] for r in links_h} == {0, 1}
    assert [r for r in links_h if r["label"] == 1] == rows("sd_links_pos_heldout")
    training = [t for name in out if not name.endswith("_heldout")
                for r in rows(name) for t in training_strings(r)]
    corpus = "\n\x00".join(training)
    member_ids = {r["id"] for name in ("sd_base", "sd_links") for r in rows(name)}
    for r in base_h + links_h:
        assert r["id"] not in member_ids
        assert r["code"] not in corpus, r["id"]
        assert r["target"].strip() not in corpus, (r["id"], r["target"])
    # Members are unchanged by the held-out build (same bytes as a build without it).
    alone = build_datasets(cfg_for(tmp_path / "alone"), names=["sd_base", "sd_links"], log=lambda *_: None)
    for name in ("sd_base", "sd_links"):
        assert (alone[name] / "rows.jsonl").read_bytes() == (out[name] / "rows.jsonl").read_bytes()


def test_heldout_size_sets_the_number_of_heldout_programs(tmp_path):
    out = build_datasets(cfg_for(tmp_path, "data.sd.heldout_size=40"), names=["sd_base_heldout", "sd_links_heldout"],
                         log=lambda *_: None)
    counts = [json.loads((out[n] / "manifest.json").read_text())["count"] for n in out]
    assert json.loads((out["sd_links_heldout"] / "manifest.json").read_text())["heldout_of"] == "sd_links"
    assert sum(counts) == 40


def test_heldout_pairs_are_the_member_pairs_construction_on_heldout_programs(tmp_path):
    """pairs_sd_base_heldout / pairs_sd_links_heldout (the preference-pair MIA's non-members): the member pairs'
    builders run on the held-out programs, with manifest and sha like every dataset, deterministic, sharing no id or
    chosen line with the member pairs; the member pairs keep their bytes (the quickstart's IPO data unchanged)."""
    names = ["sd_base", "sd_links", "sd_base_heldout", "sd_links_heldout", "pairs_sd_base", "pairs_sd_links",
             "pairs_sd_base_heldout", "pairs_sd_links_heldout"]
    out = build_datasets(cfg_for(tmp_path / "a"), names=names, log=lambda *_: None)

    def rows(name, where=out):
        return [json.loads(x) for x in (where[name] / "rows.jsonl").read_text().splitlines()]

    assert rows("pairs_sd_base_heldout") == pref.sd_base_pairs(rows("sd_base_heldout"), 0)
    assert rows("pairs_sd_links_heldout") == pref.sd_links_pairs(rows("sd_links_heldout"))
    for member, held in (("pairs_sd_base", "pairs_sd_base_heldout"), ("pairs_sd_links", "pairs_sd_links_heldout")):
        manifest = json.loads((out[held] / "manifest.json").read_text())
        assert manifest["heldout_of"] == member and manifest["members_in_training"] == 0
        assert manifest["sha256"] == file_sha256(out[held] / "rows.jsonl") and manifest["count"] == len(rows(held))
        assert not {r["id"] for r in rows(held)} & {r["id"] for r in rows(member)}
        assert not {r["chosen"] for r in rows(held)} & {r["chosen"] for r in rows(member)}
    again = build_datasets(cfg_for(tmp_path / "b"), names=names, log=lambda *_: None)
    alone = build_datasets(cfg_for(tmp_path / "c"), names=["pairs_sd_base", "pairs_sd_links"], log=lambda *_: None)
    for name in names:
        assert (again[name] / "rows.jsonl").read_bytes() == (out[name] / "rows.jsonl").read_bytes(), name
    for name in ("pairs_sd_base", "pairs_sd_links"):
        assert (alone[name] / "rows.jsonl").read_bytes() == (out[name] / "rows.jsonl").read_bytes(), name


def test_heldout_rl_prompts_are_other_prompts_of_the_same_construction(tmp_path):
    """prompt_mia's non-members (harness/core/layout.py PROMPT_HELDOUT): the RL stage's own FIM contexts
    (memlens.harness.text.rl_contexts) of the held-out programs share no id and no prompt with the members', are the
    same on a rebuild, and building them leaves the member datasets' bytes as they were (the quickstart RLFT.2's
    prompts unchanged). pd_3 -> pd_3_val: disjoint source files (test_synthetic_public_code.py)."""
    from memlens.harness.core.layout import PROMPT_HELDOUT
    from memlens.harness.text.rl_contexts import prompt_contexts

    members = ["sd_base", "sd_links"]
    names = members + [PROMPT_HELDOUT[m] for m in members]
    out = build_datasets(cfg_for(tmp_path / "a"), names=names, log=lambda *_: None)
    alone = build_datasets(cfg_for(tmp_path / "b"), names=members, log=lambda *_: None)
    again = build_datasets(cfg_for(tmp_path / "c"), names=names, log=lambda *_: None)

    def contexts(name, where=out):
        rows = [json.loads(x) for x in (where[name] / "rows.jsonl").read_text().splitlines()]
        return prompt_contexts(rows, name, 0, 2000)

    for member in members:
        held = PROMPT_HELDOUT[member]
        assert (alone[member] / "rows.jsonl").read_bytes() == (out[member] / "rows.jsonl").read_bytes(), member
        assert (again[held] / "rows.jsonl").read_bytes() == (out[held] / "rows.jsonl").read_bytes(), held
        assert contexts(held) and not {r["id"] for r in contexts(held)} & {r["id"] for r in contexts(member)}
        seen = {(r["prefix"], r["suffix"]) for r in contexts(member)}
        assert not {(r["prefix"], r["suffix"]) for r in contexts(held)} & seen
