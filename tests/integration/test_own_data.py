"""Bring your own canaries, preference pairs and models (docs/own-data.md), end to end on the micro model.

`experiment=own_canaries` plants a canary file at every stage kind SD reaches (FT data, reward rows, RL
prompts, preference pairs) and `experiment=own_preference` uses a preference file for IPO and, pointwise, for
the reward model; both at the toy size of test_experiments_at_toy_size.py (~1-2 min each on 2 cores). The
second run starts from a model directory of the user's (`model.pretrained=DIR`) that is also its IPO
control. A finished run's models are then audited in single-model mode on the canary file as the user wrote
it, and the report renders for that. Bad rows of either file are refused before anything is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memlens.harness.cli import main as cli_main
from memlens.harness.core.io import file_sha256, read_json, read_jsonl
from tests.integration.run_helpers import REPO, TOY_RUN, memlens, status_lines, toy_overrides

pytestmark = pytest.mark.slow

CANARIES = REPO / "assets" / "examples" / "canaries.jsonl"      # own_canaries' default file
PAIRS = REPO / "assets" / "examples" / "pairs.jsonl"             # own_preference's default file
MODELS = ["PT", "FT.2", "FT.3", "RM.3", "RLFT.2", "IPO"]


def run_experiment(name: str, run_dir: Path, *extra: str):
    result = memlens("run", f"experiment={name}", f"run_dir={run_dir}", *TOY_RUN, *toy_overrides(name), *extra,
                      timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def canaries_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("own_canaries") / "run"
    return run_dir, run_experiment("own_canaries", run_dir)


def test_canaries_are_planted_at_every_stage_with_their_copies(canaries_run):
    run_dir, result = canaries_run
    assert status_lines(result.stdout) == {m: "trained" for m in MODELS}
    canaries = read_jsonl(CANARIES)
    copies = sum(c.get("repeat", 1) for c in canaries)
    manifest = read_json(run_dir / "data" / "canaries" / "manifest.json")
    assert manifest["settings"]["user_file"]["sha256"] == file_sha256(CANARIES)          # provenance
    assert manifest["source_file"] == {"path": str(CANARIES), "sha256": file_sha256(CANARIES)}
    assert manifest["count"] == len(canaries) and manifest["training_copies"] == copies
    models = run_dir / "models"
    ft3 = read_json(models / "FT.3" / "provenance.json")
    pd_2 = min(50, len(read_jsonl(run_dir / "data" / "pd_2" / "rows.jsonl")))          # quickstart's max_rows
    assert ft3["datasets"].keys() == {"pd_2", "canaries"}
    assert ft3["train_examples"] == pd_2 + copies                                       # `repeat` copies each
    assert ft3["fim_examples"] == copies
    rm_rows = read_jsonl(run_dir / "data" / "rm_canaries" / "rows.jsonl")
    assert {r["label"] for r in rm_rows} == {1} and len(rm_rows) == len(canaries)
    assert len(read_jsonl(models / "RM.3" / "scores" / "rm_canaries.jsonl")) == len(canaries)   # scored once
    assert read_json(models / "RLFT.2" / "provenance.json")["datasets"].keys() == {"canaries"}
    assert read_json(models / "IPO" / "provenance.json")["datasets"].keys() == {"pairs_canaries"}
    pairs = read_jsonl(run_dir / "data" / "pairs_canaries" / "rows.jsonl")
    assert [p["chosen"] for p in pairs] == [c["target"] for c in canaries]
    assert all(p["rejected"] != p["chosen"] for p in pairs)


def test_canaries_are_audited_as_written_and_reported_by_group_and_repeat(canaries_run):
    run_dir, result = canaries_run
    canaries = {c["id"]: c for c in read_jsonl(CANARIES)}
    for model in ("FT.3", "RLFT.2", "IPO"):
        rows = read_jsonl(run_dir / "audit" / model / "final" / "canaries.jsonl")
        assert sorted(r["id"] for r in rows) == sorted(canaries)                          # each canary once
        for row in rows:
            canary = canaries[row["id"]]
            assert row["group"] == canary["group"] and row["repeat"] == canary["repeat"]
            if "text" in canary:                                  # split around its one occurrence
                assert row["prefix"] + canary["target"] + row["suffix"] == canary["text"]
        assert f"[audit] {model} on canaries vs " in result.stdout
    summary = read_json(run_dir / "report" / "summary.json")
    parts = [b for b in summary["breakdowns"] if b["model"] == "FT.3"]
    assert {b["value"] for b in parts if b["by"] == "group"} == {"api_key", "email", "password", "pii"}
    assert [b["value"] for b in parts if b["by"] == "repeat"] == [1, 4, 16]
    for part in parts:
        assert part["n_scored"] + part["n_excluded"] == (3 if part["by"] == "group" else 4)
        assert (part["ci95"] is None) == (part["n_scored"] == 0)
    assert (run_dir / "report" / "figures" / "canaries_by_repeat.png").is_file()
    assert "Memorization by group and by copies in training" in \
        (run_dir / "report" / "report.md").read_text()


def test_preference_pairs_and_a_model_directory_of_ones_own(canaries_run, tmp_path):
    """own_preference from the user's model directory (model.pretrained=DIR, and FT.3's init), which also
    controls IPO."""
    source, _ = canaries_run
    mine = tmp_path / "my_model"                 # a plain HF model directory, as a user would have one
    shutil.copytree(source / "models" / "PT", mine, ignore=shutil.ignore_patterns(
        "checkpoint-*", "provenance.json", "trainer_state.json", "train_log.jsonl", "pending_settings.json"))
    run_dir = tmp_path / "run"
    result = run_experiment("own_preference", run_dir, f"model.pretrained={mine}", f"audit_plan.1.control={mine}",
                            f"stages.FT.3.init={mine}")
    statuses = status_lines(result.stdout)
    assert statuses.pop("PT") == "imported" and set(statuses.values()) == {"trained"}
    assert read_json(run_dir / "models" / "PT" / "provenance.json")["init_model"] == str(mine)
    assert read_json(run_dir / "models" / "FT.3" / "provenance.json")["init_model"] == str(mine)   # a stage's init
    pairs = read_jsonl(PAIRS)
    manifest = read_json(run_dir / "data" / "pairs_preference" / "manifest.json")
    assert manifest["source_file"]["sha256"] == file_sha256(PAIRS)
    assert manifest["settings"]["user_file"]["tokens_counted_in"] == f"tokenizer {mine}"
    rm_rows = read_jsonl(run_dir / "data" / "rm_preference" / "rows.jsonl")
    assert sorted((r["completion"], r["label"]) for r in rm_rows) == sorted(
        [(p["chosen"], 1) for p in pairs] + [(p["rejected"], 0) for p in pairs])          # pointwise
    assert read_json(run_dir / "models" / "IPO" / "provenance.json")["datasets"].keys() == {"pairs_preference"}
    rows = read_jsonl(run_dir / "audit" / "IPO" / "final" / "preference_chosen.jsonl")
    chosen = {p["id"]: p["chosen"] for p in pairs}
    assert sorted(r["id"] for r in rows) == sorted(chosen)
    for row in rows:        # the chosen side, cut to audit.target_tokens (16 at toy size)
        assert chosen[row["id"]].startswith(row["target"]) and row["target_truncated"] == (row["target"] != chosen[row["id"]])
    entry = read_json(run_dir / "audit" / "summary.json")["results"]["IPO"]["final"]["preference_chosen"]
    assert entry["control_dir"] == str(mine)
    assert f"[audit] IPO on preference_chosen vs {mine}" in result.stdout


def test_a_checkpoint_series_is_audited_on_the_canary_file_and_reported(canaries_run, tmp_path):
    """Single-model mode on an aligned model's checkpoints, with the canary file exactly as the user wrote it."""
    source, _ = canaries_run
    out = tmp_path / "audit"
    audited = memlens("audit", f"audit.model_dir={source / 'models' / 'FT.3'}",
                       f"audit.control_dir={source / 'models' / 'FT.2'}", f"audit.examples={CANARIES}",
                       "audit.all_checkpoints=true", f"audit.out_dir={out}", "audit.max_new_tokens=16",
                       "audit.target_tokens=16", "audit.min_target_tokens=4", "device=cpu")
    assert audited.returncode == 0, audited.stdout[-3000:] + audited.stderr[-3000:]
    checkpoints = sorted(p.name for p in (source / "models" / "FT.3").glob("checkpoint-*"))
    assert sorted(p.name for p in (out / "FT.3").iterdir()) == sorted([*checkpoints, "final"])
    rows = read_jsonl(out / "FT.3" / "final" / "canaries.jsonl")
    assert len(rows) == len(read_jsonl(CANARIES)) and all("group" in r and "repeat" in r for r in rows)
    report = memlens("report", f"run_dir={tmp_path / 'single'}", f"audit.out_dir={out}")
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    summary = read_json(tmp_path / "single" / "report" / "summary.json")
    assert {b["by"] for b in summary["breakdowns"]} == {"group", "repeat"}
    assert "Memorization over training" in (tmp_path / "single" / "report" / "report.md").read_text()


GOOD = {"id": "ok", "text": "import os\nTOKEN = 'ghp_4Kq9Vz2Tn7Pw1Rb8Yc'\n", "target": "TOKEN = 'ghp_4Kq9Vz2Tn7Pw1Rb8Yc'"}
PAIR = {"id": "p", "prefix": "def f(x):\n", "suffix": "\n", "chosen": "    return x is not None",
        "rejected": "    return x != None"}


@pytest.mark.parametrize("key, second, message", [
    ("canaries", {"id": "b", "text": "x = 1\n"}, r":2: missing field\(s\) target"),
    ("canaries", {"id": "b", "text": "x = 1\n", "target": "y = 2"}, r":2: field target: not found in field text"),
    ("canaries", {"id": "b", "text": "k = 'abcdef'\nk = 'abcdef'\n", "target": "k = 'abcdef'"},
     r":2: field target: occurs 2 times in field text"),
    ("canaries", {"id": "ok", "prefix": "a = ", "target": "'0123456789'", "suffix": ""},
     r":2: duplicate id 'ok' \(first on line 1\)"),
    ("canaries", {"id": "b", "prefix": "a = ", "target": "'x'", "suffix": ""},
     r":2: field target: 3 tokens \(UTF-8 bytes.*audit\.min_target_tokens=4"),
    ("canaries", {**GOOD, "id": "b", "repeat": 0}, r":2: field repeat=0: must be a whole number from 1"),
    ("canaries", {**GOOD, "id": "b", "repeat": "4"}, r":2: field repeat='4': must be a whole number"),
    ("canaries", {**GOOD, "id": "b", "group": 7}, r":2: field group=7: must be a string"),
    ("preference", {**PAIR, "id": "q", "rejected": PAIR["chosen"]}, r":2: field rejected: the same as chosen"),
    ("preference", {k: v for k, v in PAIR.items() if k != "chosen"}, r":2: missing field\(s\) chosen"),
    ("preference", {**PAIR, "chosen": "    return 1"}, r":2: duplicate id 'p'"),
])
def test_bad_rows_are_refused_naming_file_line_and_field_before_anything_is_written(key, second, message, tmp_path,
                                                                                    capsys):
    bad = tmp_path / "mine.jsonl"
    first = GOOD if key == "canaries" else PAIR
    bad.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    experiment = "own_canaries" if key == "canaries" else "own_preference"
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        cli_main(["run", f"experiment={experiment}", f"run_dir={run_dir}", *TOY_RUN, f"data.{key}.file={bad}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memlens: error: {bad}:") and __import__("re").search(message, err), err
    assert not run_dir.exists()                                  # nothing written, not even run.json


def test_memlens_data_refuses_a_bad_file_before_writing_any_dataset(tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "b", "repeat": -1}) + "\n")
    result = memlens("data", "experiment=own_canaries", f"run_dir={tmp_path / 'run'}", *TOY_RUN,
                      f"data.canaries.file={bad}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{bad}:2: field repeat=-1" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_missing_file_and_a_dataset_without_its_file_name_the_key(tmp_path, capsys):
    for args, message in (
            (["data.canaries.file=/nonexistent/mine.jsonl"], "data.canaries.file=/nonexistent/mine.jsonl: no such file"),
            (["data.canaries.file=null"], "data.canaries.file is not set; pass data.canaries.file=my_canaries.jsonl")):
        with pytest.raises(SystemExit) as e:
            cli_main(["run", "experiment=own_canaries", f"run_dir={tmp_path / 'run'}", *TOY_RUN, *args])
        assert e.value.code == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "run").exists()
