"""Multi-process saves: a LoRA FT stage trained by 2 processes (DDP over gloo, the launcher GPU users run
with `launch/multi_gpu.yaml`) saves the same merged weights as 1 process on the same global batch; under DeepSpeed
ZeRO-3 (its CPU accelerator over gloo) the 2 processes gather the partitioned weights and the first merges them
into a plain model that gives the ZeRO-3 model's logits; and the public model is imported as PT by one process.
~2.5 min on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json
from tests.families import build_family
from tests.integration.run_helpers import DEEPSPEED_OVERLAY, REPO, memlens, two_processes

pytestmark = pytest.mark.slow


def train_ft(run_dir: Path, model_dir: Path, per_process_batch: int, launcher=None, ft_extra=(), with_pt=True, **run):
    # No LoRA dropout: its masks come from each process's own RNG stream, so 1 and 2 processes would draw
    # different ones (measured: 25 % apart in the merged update); everything else is the same computation.
    # `ft_extra`: more FT.2 overrides; `with_pt=False`: FT.2 starts from the model directory itself (no PT import);
    # `run`: memlens()'s keywords (module, env).
    common = ["experiment=smoke", "model=qwen2.5_coder_0.5b", f"model.pretrained={model_dir}", "model.dtype=float32",
              "model.lora.dropout=0.0", f"run_dir={run_dir}", "device=cpu", "data.sd.size=20"]
    ft = ["stages.FT.2.max_steps=2", "stages.FT.2.save_steps=2", f"stages.FT.2.batch_size={per_process_batch}",
          *([] if with_pt else [f"stages.FT.2.init={model_dir}"]), *ft_extra]
    for stage, extra in ((("PT", []),) if with_pt else ()) + (("FT.2", ft),):
        result = memlens("train", f"stage={stage}", *common, *extra, launcher=launcher, **run)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_two_processes_save_the_merged_lora_weights_of_one(tmp_path):
    import torch
    from safetensors.torch import load_file

    model_dir = build_family("qwen2.5-coder", tmp_path / "qwen")
    train_ft(tmp_path / "one", model_dir, per_process_batch=8)
    train_ft(tmp_path / "two", model_dir, per_process_batch=4, launcher=two_processes())
    assert read_json(tmp_path / "two" / "models" / "FT.2" / "provenance.json")["num_processes"] == 2
    one = load_file(str(tmp_path / "one" / "models" / "FT.2" / "model.safetensors"))
    two = load_file(str(tmp_path / "two" / "models" / "FT.2" / "model.safetensors"))
    base = load_file(str(model_dir / "model.safetensors"))
    assert one.keys() == two.keys() == base.keys()          # merged: a plain model, no adapter keys
    trained = [k for k in one if not torch.equal(one[k], base[k])]
    assert trained and all(k.endswith(("proj.weight",)) for k in trained)
    for key in one:                                          # same global batch, same update, to fp32 noise
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-6)


def test_zero3_with_lora_gathers_and_merges_into_the_zero3_models_logits(tmp_path):
    """FT.2 with LoRA under DeepSpeed ZeRO-3 (launch/ds_zero3.json, the file GPU users pass) on 2 CPU processes,
    from the family's model directory (no PT import: ~20 s less): the weights are partitioned while training, and the
    saved model is the plain merged model whose logits are those of the partitioned ZeRO-3 model, taken inside the
    run just before the save (tests/integration/zero3_probe.py)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    if not DEEPSPEED_OVERLAY.is_dir():
        pytest.skip(f"no {DEEPSPEED_OVERLAY}: bash scripts/setup.sh installs DeepSpeed there")
    model_dir = build_family("qwen2.5-coder", tmp_path / "qwen")
    probe = tmp_path / "zero3_logits.safetensors"
    path = os.pathsep.join([str(DEEPSPEED_OVERLAY), *filter(None, [os.environ.get("PYTHONPATH")])])
    train_ft(tmp_path / "run", model_dir, per_process_batch=4, launcher=two_processes(), with_pt=False,
             ft_extra=[f"++stages.FT.2.deepspeed={REPO / 'launch' / 'ds_zero3.json'}"],
             module="tests.integration.zero3_probe", env={**os.environ, "ZERO3_PROBE": str(probe), "PYTHONPATH": path})
    out = tmp_path / "run" / "models" / "FT.2"
    assert read_json(out / "provenance.json")["num_processes"] == 2
    with safe_open(str(probe), "pt") as f:
        meta = f.metadata()
    partitioned = json.loads(meta["partitioned"])
    assert meta["world_size"] == "2"
    # ZeRO-3 was on: every frozen base projection LoRA adapts was held in partitions, not whole
    for layer in range(2):
        for proj in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
            assert f"base_model.model.model.layers.{layer}.{proj}.base_layer.weight" in partitioned, partitioned

    merged = load_file(str(out / "model.safetensors"))
    base = load_file(str(model_dir / "model.safetensors"))
    assert merged.keys() == base.keys()                       # a plain model: no adapter or PEFT-prefixed keys
    assert all(merged[k].shape == base[k].shape and merged[k].numel() > 0 for k in base)   # nothing partial
    trained = {k for k in merged if not torch.equal(merged[k], base[k])}
    targets = {k for k in base if k.endswith("proj.weight")}
    assert trained == targets, sorted(trained ^ targets)      # the merge reached every adapted projection, only them

    reference = load_file(str(probe))
    ids, zero3_logits = reference["input_ids"], reference["logits"]

    def logits(directory):
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
        with torch.no_grad():
            return model(input_ids=ids).logits

    merged_diff = (logits(out) - zero3_logits).abs().max().item()
    base_diff = (logits(model_dir) - zero3_logits).abs().max().item()
    # measured: 4.8e-07 (merged) and 0.17 (the untrained base): a save of unmerged or base weights fails here
    assert merged_diff < 1e-4 < base_diff, (merged_diff, base_diff)


def test_deepspeed_on_cpu_needs_a_launch_and_without_it_cpu_flags_are_unchanged(monkeypatch):
    from memlens.recipes.stages.devices import trl_device_kwargs

    assert trl_device_kwargs("cpu") == trl_device_kwargs("cpu", None) == {
        "use_cpu": True, "bf16": False, "activation_checkpointing": False, "report_to": "none",
        "dataloader_num_workers": 0, "logging_nan_inf_filter": False}
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(UserError, match=r"deepspeed=.*ds_zero3\.json with device=cpu: .*launch/cpu_2proc\.yaml"):
        trl_device_kwargs("cpu", str(REPO / "launch" / "ds_zero3.json"))


def test_only_the_first_process_imports_a_public_model(tmp_path, monkeypatch):
    from memlens.recipes.stages import pretrain
    from memlens.recipes.stages.contract import StageContext

    model_dir = build_family("qwen2.5-coder", tmp_path / "qwen")
    settings = {"model": {"pretrained": str(model_dir), "fim_family": "qwen2.5-coder"}}
    monkeypatch.setenv("RANK", "1")
    pretrain.run_stage(pretrain.load_settings(settings, "PT"), StageContext(tmp_path / "run", "PT"))
    assert not (tmp_path / "run" / "models" / "PT").exists()
    monkeypatch.setenv("RANK", "0")
    pretrain.run_stage(pretrain.load_settings(settings, "PT"), StageContext(tmp_path / "run", "PT"))
    assert (tmp_path / "run" / "models" / "PT" / "provenance.json").is_file()
