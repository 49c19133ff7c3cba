"""The path GPU users take, on CPU: each public-model preset's real architecture class and tokenizer
conventions (tests/families.py), through every stage and the audit.

- One tokenisation rule: the audit, the reward model, PPO, the RL reward evaluation and TRL's own SFT, DPO
  and RLOO tokenisation give the same prompt ids for the same PSM text (BOS where the family adds it).
- The reward model sees the final EOS (a pad distinct from EOS).
- Decoding stops at the family's stop tokens and no sentinel reaches a completion.
- `memlens run experiment=smoke model=<preset> model.pretrained=<fixture>` on every family, LoRA on, in
  the preset's dtype (bf16; the CPU runs it): merged weights differ from the base exactly in the preset's
  target modules, the reward and PPO value heads trained, no sentinel in any audit completion.
Cost: ~15 s of fixtures and TRL tokenisation, ~1 min per family for the trimmed smoke run (2 CPU cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlens.harness.core.io import read_json, read_jsonl
from memlens.harness.model.encode import encode_texts
from memlens.harness.text.fim import FAMILIES as FIM_FAMILIES
from memlens.harness.text.fim import format_psm_prompt, format_psm_training
from tests.families import FAMILIES, build_family
from tests.integration.run_helpers import memlens

pytestmark = pytest.mark.slow
NAMES = list(FAMILIES)
PREFIX = "import os\n\ndef read_config(path):\n    "
MIDDLE = "with open(path) as handle:\n        return handle.read()\n"
SUFFIX = "\n\nprint(read_config('/etc/app.cfg'))\n"


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: build_family(name, root / name) for name in NAMES}


def preset(name: str, model_dir: Path):
    """The family's conf/model preset with `pretrained` pointing at the fixture (as model.pretrained=DIR)."""
    from omegaconf import OmegaConf

    from memlens.harness.cli import compose
    from memlens.recipes.stages.models import parse_model

    cfg = compose([f"model={FAMILIES[name].preset}", f"model.pretrained={model_dir}"])
    return parse_model(OmegaConf.to_container(cfg.model, resolve=True), "model")


def sentinels_of(name: str):
    return FIM_FAMILIES[name]


# --- one tokenisation rule ------------------------------------------------------------------------------------


def trl_ids(model_dir: Path, tokenizer, prompt: str, text: str) -> dict[str, list[int]]:
    """How TRL's trainers tokenise the same rows: SFT's training text, DPO's prompt, RLOO's prompt."""
    from types import SimpleNamespace

    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer, RLOOTrainer, SFTConfig, SFTTrainer

    from memlens.recipes.stages.devices import trl_device_kwargs

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    common = dict(output_dir=str(model_dir / "_trl"), **trl_device_kwargs("cpu"))
    sft = SFTTrainer(model=model, args=SFTConfig(max_length=1024, **common),
                     train_dataset=Dataset.from_list([{"text": text}]), processing_class=tokenizer)
    dpo = DPOTrainer(model=model, ref_model=AutoModelForCausalLM.from_pretrained(str(model_dir)),
                     args=DPOConfig(max_length=1024, **common), processing_class=tokenizer,
                     train_dataset=Dataset.from_list([{"prompt": prompt, "chosen": MIDDLE, "rejected": "pass\n"}]))
    rloo_prompt, _, _ = RLOOTrainer._tokenize_prompts(SimpleNamespace(processing_class=tokenizer), [prompt])
    return {"sft": list(sft.train_dataset[0]["input_ids"]), "dpo": list(dpo.train_dataset[0]["prompt_ids"]),
            "rloo": list(rloo_prompt[0])}


@pytest.mark.parametrize("name", NAMES)
def test_every_stage_and_the_audit_encode_a_psm_text_to_the_same_ids(family_dirs, name):
    from memlens.harness.model.load import load_causal_lm
    from memlens.recipes.stages.fim_context import left_padded_prompts
    from memlens.recipes.stages.models import load_tokenizer

    model_dir, s = family_dirs[name], sentinels_of(name)
    stage_tok = load_tokenizer(model_dir, preset(name, model_dir))          # what every recipe loads
    audit_tok = load_causal_lm(model_dir, "cpu")[1]                         # what the audit loads
    prompt, text = format_psm_prompt(PREFIX, SUFFIX, s), format_psm_training(PREFIX, MIDDLE, SUFFIX, s)
    audit_prompt = encode_texts(audit_tok, [prompt])[0]
    assert (audit_prompt[0] == stage_tok.bos_token_id) == FAMILIES[name].adds_bos
    rm_text = encode_texts(stage_tok, [text], max_length=4096)[0]           # reward model: train and score
    batch = left_padded_prompts(stage_tok, [prompt, prompt + "x = 1\n" * 5])  # PPO and the reward evaluation
    ppo_prompt = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    trl = trl_ids(model_dir, stage_tok, prompt, text)
    assert rm_text[:len(audit_prompt)] == audit_prompt
    assert ppo_prompt == audit_prompt
    assert trl["sft"] == rm_text                     # TRL's SFT row is the RM's text, EOS included once
    assert trl["dpo"] == audit_prompt and trl["rloo"] == audit_prompt


# --- the reward model sees the EOS -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_reward_score_changes_when_the_final_eos_is_removed(family_dirs, name):
    """With PAD = EOS the classifier read the token before the EOS: both texts scored the same."""
    from memlens.harness.model.rewards import score_texts
    from memlens.recipes.stages.models import load_sequence_classifier, load_tokenizer

    model_dir = family_dirs[name]
    settings = preset(name, model_dir)
    tokenizer = load_tokenizer(model_dir, settings)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    rm = load_sequence_classifier(model_dir, settings, "cpu", tokenizer.pad_token_id)
    text = format_psm_training(PREFIX, MIDDLE, SUFFIX, sentinels_of(name))
    with_eos, without_eos = score_texts(rm, tokenizer, [text, text[:-len(tokenizer.eos_token)]])
    assert text.endswith(tokenizer.eos_token)
    assert abs(with_eos - without_eos) > 1e-4, (with_eos, without_eos)


@pytest.mark.parametrize("name", NAMES)
def test_candidates_behind_one_cached_prompt_score_as_full_passes(family_dirs, name):
    """The exposure test's shared prompt pass (its KV cache copied behind every candidate) on each family's
    attention and cache classes equals a full teacher-forced pass per candidate up to float32 rounding."""
    import numpy as np

    from memlens.harness.model.load import load_causal_lm
    from memlens.harness.model.logprobs import shared_prompt_losses, target_losses

    model, tok = load_causal_lm(family_dirs[name], "cpu")
    targets = [MIDDLE.replace("path", p) for p in ("p", "cfg_path", "'/etc/x'", "open('/home/u/.ssh/id')")] + ["x"]
    s = sentinels_of(name)
    full = target_losses(model, tok, [PREFIX] * len(targets), targets, [SUFFIX] * len(targets), s, reduction="sum")
    np.testing.assert_allclose(shared_prompt_losses(model, tok, PREFIX, SUFFIX, targets, s, batch_size=2), full,
                               rtol=1e-5, atol=1e-4)


# --- stop and strip by family --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_greedy_completions_stop_at_the_family_stop_tokens(family_dirs, name, tmp_path):
    """A model taught the family's own convention — a middle followed by its file separator (CodeGemma,
    StarCoder2) or the next sentinel — is cut there, and no sentinel text is left in the completion."""
    import torch

    from memlens.harness.model.decode import greedy_complete
    from memlens.harness.model.load import load_causal_lm
    from memlens.recipes.stages.models import use_distinct_pad
    from tests.tiny import train_on_texts

    s = sentinels_of(name)
    model, tok = load_causal_lm(family_dirs[name], "cpu")
    use_distinct_pad(tok, s, name)                   # StarCoder2 ships no pad; training pads its batch
    end = s.file_sep or s.prefix
    rows = [("def total(xs):\n    ", "return sum(xs)\n", "\n\nprint(total([1]))\n"),
            ("class Box:\n    ", "size = 3\n", "\n\nbox = Box()\n")]
    bos = tok.bos_token if FAMILIES[name].adds_bos else ""
    texts = [bos + format_psm_prompt(p, q, s) + m + end + "def g():\n    pass\n" for p, m, q in rows]
    torch.manual_seed(0)
    train_on_texts(model.train(), tok, texts, steps=150, lr=1e-2, batch_size=2)
    prompts = [format_psm_prompt(p, q, s) for p, _, q in rows]
    middles = [m for _, m, _ in rows]
    old = greedy_complete(model, tok, prompts, max_new_tokens=24)     # stopping at EOS only runs on
    new = greedy_complete(model, tok, prompts, max_new_tokens=24, sentinels=s)
    assert all(c.startswith(m) and c != m for c, m in zip(old, middles)), old
    assert new == middles, new
    assert not any(t in c for c in new for t in s.stop_tokens())


# --- the whole pipeline on every family -------------------------------------------------------------------------------


def trimmed_smoke(name: str, model_dir: Path, run_dir: Path) -> list[str]:
    """experiment=smoke on the family fixture, LoRA and dtype as the preset says, at the smallest size that
    still runs every recipe (one RLOO point, PPO, IPO) and the audit."""
    toy_rl = ["eval_prompts=4", "eval_samples=2"]
    return ["run", "experiment=smoke", f"model={FAMILIES[name].preset}", f"model.pretrained={model_dir}",
            f"run_dir={run_dir}", "device=cpu", "~stages.RLFT.1.sweep", "data.sd.size=20",
            "stages.FT.1.max_steps=4", "stages.FT.2.max_steps=4", "stages.RM.1.max_steps=4",
            "audit.measures=[ned]", "audit.utility=false", "report.figures=false",   # numbers checked, not PNGs
            *(f"++stages.{stage}.{kv}" for stage in ("RLFT.1", "RLFT.4") for kv in toy_rl)]


@pytest.fixture(scope="module", params=NAMES)
def family_run(request, family_dirs, tmp_path_factory):
    name = request.param
    run_dir = tmp_path_factory.mktemp(f"run-{name}") / "run"
    result = memlens(*trimmed_smoke(name, family_dirs[name], run_dir), timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return name, run_dir, result


def safetensors_of(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        out.update(load_file(str(path)))
    return out


def test_smoke_run_trains_only_the_presets_lora_targets(family_run):
    import torch

    name, run_dir, result = family_run
    assert "[memlens] check: model=" in result.stdout
    targets = preset(name, run_dir).lora_settings.target_modules
    base = safetensors_of(run_dir / "models" / "PT")
    assert next(iter(base.values())).dtype == torch.bfloat16                # the preset's dtype
    adapted = {k for k in base if k.endswith(tuple(f"{t}.weight" for t in targets))}
    for stage in ("FT.1", "FT.2", "RLFT.1", "RLFT.4", "IPO"):
        merged = safetensors_of(run_dir / "models" / stage)
        assert merged.keys() == base.keys(), stage                          # a plain model, adapters merged
        init = safetensors_of(read_json(run_dir / "models" / stage / "provenance.json")["init_model"])
        changed = {k for k in base if not torch.equal(init[k], merged[k])}
        assert changed == adapted, (stage, sorted(changed ^ adapted)[:4])


def test_smoke_run_trains_the_reward_and_value_heads(family_run):
    """RM.1's head moved from its seeded initialisation; PPO's value head moved from RM.1's."""
    import torch
    from transformers import set_seed

    from memlens.recipes.stages.models import load_sequence_classifier, load_tokenizer

    name, run_dir, _ = family_run
    settings = preset(name, run_dir)
    rm_init = read_json(run_dir / "models" / "RM.1" / "provenance.json")["init_model"]
    set_seed(0)                              # the reward recipe draws its new head from the run's seed
    head = load_sequence_classifier(rm_init, settings, "cpu", load_tokenizer(rm_init, settings).pad_token_id)
    rm = safetensors_of(run_dir / "models" / "RM.1")
    value = safetensors_of(run_dir / "models" / "RLFT.4" / "value")
    assert not torch.equal(rm["score.weight"].float(), head.score.weight.float())
    assert not torch.equal(value["score.weight"], rm["score.weight"])
    config = json.loads((run_dir / "models" / "RM.1" / "tokenizer_config.json").read_text())
    assert config["pad_token"] != config["eos_token"]                    # the RM saw each completion's EOS


def test_smoke_run_completions_hold_no_sentinel_and_keep_the_bos(family_run):
    from transformers import AutoTokenizer

    name, run_dir, _ = family_run
    stops = sentinels_of(name).stop_tokens()
    rows = [r for path in (run_dir / "audit").glob("*/**/*.jsonl") for r in read_jsonl(path)
            if "control_completion" in r]
    assert rows
    leaked = [(r["model"], c) for r in rows for c in (r["completion"], r["control_completion"])
              if any(t in c for t in stops)]
    assert not leaked, leaked[:3]
    for stage in ("FT.1", "RM.1", "RLFT.4", "IPO"):          # every stage saved the family's BOS rule
        tok = AutoTokenizer.from_pretrained(str(run_dir / "models" / stage))
        assert (tok("x")["input_ids"][0] == tok.bos_token_id) == FAMILIES[name].adds_bos, stage
