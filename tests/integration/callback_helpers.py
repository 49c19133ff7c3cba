"""The world of the AuditCallback tests (tests/integration/test_audit_callback.py, and its DDP child process): a tiny
seeded Llama saved as a local model directory, one small dataset per TRL format, the canaries, and one function
that trains a real TRL trainer of each kind with `memlens.inject` and `memlens.AuditCallback`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.tiny import save, tiny_llama, tiny_tokenizer, torch_threads

CANARIES = [{"id": f"c{i}", "prefix": f"def load_secret_{i}():\n    key = ",
             "target": f"'sk-{i:02d}{(i * 7919) % 99991:05d}fa{i * 31 % 97:02d}c9'", "suffix": "\n    return key\n",
             "repeat": 3} for i in range(6)]
STEPS = 2                         # save_steps=1: a checkpoint per step
SMALL = dict(max_new_tokens=12, target_tokens=8, min_target_tokens=2, batch_size=8)


def rows_of(fmt: str) -> list[dict]:
    code = [f"def add_{i}(a, b):" for i in range(8)]
    body = [f"\n    return a + b + {i}\n" for i in range(8)]
    if fmt == "prompt_completion":
        return [{"prompt": p, "completion": c} for p, c in zip(code, body)]
    if fmt == "preference":
        return [{"prompt": p, "chosen": c, "rejected": "\n    pass\n"} for p, c in zip(code, body)]
    if fmt == "unpaired":
        return [{"prompt": p, "completion": c if i % 2 else "\n    pass\n", "label": bool(i % 2)}
                for i, (p, c) in enumerate(zip(code, body))]
    return [{"prompt": p} for p in code]


def make_base(out: Path) -> Path:
    """The tiny base: a BPE tokenizer trained on the canaries and every format's rows, a seeded 1-layer Llama."""
    texts = [c["prefix"] + c["target"] + c["suffix"] for c in CANARIES]
    texts += [json.dumps(r) for fmt in ("prompt_completion", "preference", "unpaired") for r in rows_of(fmt)]
    tok = tiny_tokenizer(texts, vocab_size=320)
    return save(tiny_llama(tok, hidden=32, layers=1, heads=2), tok, out)


def common_args(out: Path, **extra) -> dict:
    return dict(output_dir=str(out / "model"), max_steps=STEPS, save_steps=1, save_strategy="steps",
                learning_rate=1e-3, report_to=[], use_cpu=True, logging_steps=1, seed=0, data_seed=0,
                per_device_train_batch_size=4, **extra)


def train_with_callback(kind: str, base_dir: Path, out: Path, callbacks: list, peft=False, loss_type=None,
                        audit: bool = True, canaries: list[dict] | None = None, tensorboard: Path | None = None,
                        route: str = "attach", **callback_kwargs):
    """Build and train the TRL trainer `kind` on a dataset of its format with the canaries planted, the AuditCallback
    attached (unless `audit` is false, with `callback_kwargs`) before `callbacks`; returns (the trainer, the
    manifest). With `tensorboard` (a folder), the trainer reports to TensorBoard there and the callback joins it by
    `route`: "attach" (`AuditCallback.attach(trainer)` after the trainer is built), "callbacks" (the trainer's
    `callbacks=[...]`) or "add_callback" (`trainer.add_callback(audit)` after it is built)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    import memlens

    tok = AutoTokenizer.from_pretrained(base_dir)
    fmt = {"sft": "prompt_completion", "dpo": "preference", "kto": "unpaired", "reward": "preference",
           "cpo": "preference", "orpo": "preference", "grpo": "prompt_only", "rloo": "prompt_only",
           "online_dpo": "prompt_only"}[kind]
    train, manifest = memlens.inject(Dataset.from_list(rows_of(fmt)), canaries or CANARIES, seed=1,
                                     rl_prompts=fmt == "prompt_only")
    cbs = [memlens.AuditCallback(manifest, control="base" if peft else base_dir, out_dir=out,
                                 **{**SMALL, **callback_kwargs})] if audit else []
    model_cls = AutoModelForSequenceClassification if kind == "reward" else AutoModelForCausalLM
    model = model_cls.from_pretrained(base_dir, **({"num_labels": 1} if kind == "reward" else {}))
    data = dict(model=model, processing_class=tok, train_dataset=train, callbacks=[*cbs, *callbacks])
    if peft:
        from peft import LoraConfig

        data["peft_config"] = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    import trl

    if tensorboard is not None and route != "callbacks":
        data["callbacks"] = list(callbacks)             # joined below, through attach() or add_callback()
    if kind == "sft":
        extra = {"report_to": ["tensorboard"]} if tensorboard is not None else {}
        trainer = trl.SFTTrainer(args=trl.SFTConfig(**{**common_args(out), **extra}), **data)
    elif kind == "dpo":
        trainer = trl.DPOTrainer(args=trl.DPOConfig(**common_args(out, loss_type=[loss_type])), **data)
    elif kind == "kto":
        trainer = trl.KTOTrainer(args=trl.KTOConfig(**common_args(out)), **data)
    elif kind == "reward":
        trainer = trl.RewardTrainer(args=trl.RewardConfig(**common_args(out)), **data)
    elif kind in ("cpo", "orpo"):                       # trl.experimental: SimPO/CPO and ORPO
        from trl.experimental.cpo import CPOConfig, CPOTrainer
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        config, trainer_cls = (CPOConfig, CPOTrainer) if kind == "cpo" else (ORPOConfig, ORPOTrainer)
        trainer = trainer_cls(args=config(**common_args(out)), **data)
    elif kind == "online_dpo":                         # trl.experimental: pairs generated online, judged by a reward
        from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer

        reward = lambda completions, **_: [float(len(c)) for c in completions]   # noqa: E731
        trainer = OnlineDPOTrainer(reward_funcs=[reward], args=OnlineDPOConfig(
            **common_args(out, max_new_tokens=6)), **data)
    else:
        reward = lambda completions, **_: [float(len(c)) for c in completions]   # noqa: E731
        config = (trl.GRPOConfig if kind == "grpo" else trl.RLOOConfig)(
            **common_args(out, num_generations=2, max_completion_length=6))
        trainer = (trl.GRPOTrainer if kind == "grpo" else trl.RLOOTrainer)(reward_funcs=[reward], args=config, **data)
    if tensorboard is not None and route == "attach":
        cbs[0].attach(trainer)
    elif tensorboard is not None and route == "add_callback":
        trainer.add_callback(cbs[0])
    with torch_threads(1):
        trainer.train()
    return trainer, manifest




def manifest_of() -> dict:
    """A manifest of the canaries planted in the prompt-completion rows (nothing trained)."""
    from datasets import Dataset

    import memlens

    return memlens.inject(Dataset.from_list(rows_of("prompt_completion")), CANARIES, seed=1)[1]
