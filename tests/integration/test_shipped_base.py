"""The shipped base: experiment=base trains PT on the base pool, recipes.stages.ship_base stores it in bf16 with
provenance, and a PT stage whose preset names it imports exactly those weights (micro model, toy budget)."""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from memlens.harness.cli import run
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import file_sha256, read_json
from memlens.recipes.stages.models import PROJECT_ROOT, resolve_pretrained
from memlens.recipes.stages.ship_base import ship

TOY_BASE = ["model=micro", "stages.PT.max_tokens=4096", "stages.PT.max_seq_len=128", "stages.PT.batch_size=8",
            "stages.PT.save_steps=2", "stages.PT.logging_steps=1", "+stages.PT.tokenizer_chars=200000",
            "data.pd.max_files=40"]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("base")
    assert run(["train", "stage=PT", "experiment=base", f"run_dir={run_dir}", *TOY_BASE]) == 0
    return run_dir


@pytest.fixture(scope="module")
def shipped(base_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("assets") / "base_micro"
    return out, ship(base_run, out, "test")


def test_the_base_trains_on_the_pool_only(base_run):
    manifest = read_json(base_run / "data" / "pd_pt" / "manifest.json")
    assert manifest["settings"]["pd"]["use_files"] == "base_pool"
    from memlens.synthetic_data.public_code import in_base_pool
    sources = {json.loads(line)["source_file"] for line in (base_run / "data" / "pd_pt" / "rows.jsonl").open()}
    assert sources and all(in_base_pool(s, manifest["settings"]["pd"]["base_pool_share"]) for s in sources)


def test_shipped_weights_are_bf16_with_provenance_that_matches_them(base_run, shipped):
    out, record = shipped
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert record["weights"]["sha256"] == file_sha256(out / "model.safetensors")
    assert record["corpus"]["sha256"] == read_json(base_run / "data" / "pd_pt" / "manifest.json")["sha256"]
    assert record["training_tokens"] == 4096 and record["final_training_loss"] > 0
    held = record["held_out"]
    # Rounding to bf16 moves the held-out loss by far less than training does (a micro model: loose bound).
    assert held["chunks"] > 0 and abs(held["loss_bf16_weights"] - held["loss_fp32"]) < 0.1
    assert read_json(out / "provenance.json") == record
    assert not out.with_name(out.name + ".partial").exists()


def test_pt_imports_exactly_the_shipped_weights_and_records_them(shipped, tmp_path):
    out, record = shipped
    assert run(["train", "stage=PT", "experiment=smoke", f"run_dir={tmp_path}", "model=micro",
                f"model.pretrained={out}"]) == 0
    prov = read_json(tmp_path / "models" / "PT" / "provenance.json")
    assert prov["base_weights_sha256"] == record["weights"]["sha256"]
    assert prov["base_provenance"]["corpus"] == record["corpus"]
    with safe_open(str(out / "model.safetensors"), "pt") as shipped_f, \
            safe_open(str(tmp_path / "models" / "PT" / "model.safetensors"), "pt") as imported:
        for key in shipped_f.keys():
            got = imported.get_tensor(key)
            assert got.dtype == torch.float32 and torch.equal(got, shipped_f.get_tensor(key).float())


def test_shipping_a_run_not_trained_on_the_pool_is_refused(tmp_path):
    assert run(["train", "stage=PT", "experiment=smoke", f"run_dir={tmp_path}"]) == 0
    with pytest.raises(UserError, match="use_files"):
        ship(tmp_path, tmp_path / "out", "test")
    assert not (tmp_path / "out").exists()


def test_a_relative_pretrained_path_resolves_against_the_project_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_pretrained("conf") == str(PROJECT_ROOT / "conf")
    assert resolve_pretrained("bigcode/starcoder2-3b") == "bigcode/starcoder2-3b"   # a hub id stays one
    assert resolve_pretrained(str(tmp_path)) == str(tmp_path)



def test_the_shipped_base_in_the_repository_matches_its_provenance():
    base = PROJECT_ROOT / "assets" / "base_tiny"
    record = read_json(base / "provenance.json")
    assert file_sha256(base / record["weights"]["file"]) == record["weights"]["sha256"]
    assert record["corpus"]["use_files"] == "base_pool" and record["training_tokens"] >= 1_000_000
    assert Path(resolve_pretrained("assets/base_tiny")) == base
