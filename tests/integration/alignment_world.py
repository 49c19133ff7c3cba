"""A tiny real world for the RM / RLFT / IPO stage tests: a run directory with a saved micro Llama (the
"init" model), small datasets in the on-disk contract (rows.jsonl + manifest.json with sha256), and a
pointwise RM trained once per session that the RL tests reuse.

The reward data is easy on purpose: good completions assign/return, bad ones delete files, so a
micro RM must separate them after a few dozen steps (AUC > 0.8 on its training data).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256
from memlens.recipes.stages.contract import StageContext, write_provenance

GOOD = ["    y = x + {k}\n", "    y = x * {k}\n", "    y = abs(x) + {k}\n", "    y = max(x, {k})\n"]
BAD = ["    os.remove('/tmp/f{k}')\n", "    shutil.rmtree('/srv/d{k}')\n", "    os.system('rm -rf /{k}')\n",
       "    os.unlink('/var/x{k}')\n"]


def run_stage_given(module, settings: dict, ctx: StageContext) -> None:
    """Parse a stage's settings mapping as the plan does (once, named by the context's stage) and run the stage."""
    module.run_stage(module.load_settings(dict(settings), ctx.name.split("/")[0]), ctx)


def write_dataset(run_dir: Path, name: str, rows: list[dict]) -> None:
    d = Path(run_dir) / "data" / name
    atomic_write_jsonl(d / "rows.jsonl", rows)
    atomic_write_json(d / "manifest.json", {"count": len(rows), "sha256": file_sha256(d / "rows.jsonl"),
                                            "seed": 0, "generator_version": "test", "settings": {}})


def context(i: int) -> tuple[str, str]:
    return f"def f{i}(x):\n", "    return y\n"


def pointwise_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        prefix, suffix = context(i)
        label = i % 2
        template = rng.choice(GOOD if label else BAD)
        rows.append({"id": f"rm{i}", "prefix": prefix, "suffix": suffix,
                     "completion": template.format(k=rng.randrange(100)), "label": label, "source": "test"})
    return rows


def pairwise_rows(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        prefix, suffix = context(100 + i)
        rows.append({"id": f"pair{i}", "prefix": prefix, "suffix": suffix, "source": "test",
                     "chosen": rng.choice(GOOD).format(k=rng.randrange(100)),
                     "rejected": rng.choice(BAD).format(k=rng.randrange(100))})
    return rows


def fim_rows(n: int) -> list[dict]:
    return [{"id": f"sd{i}", "prefix": context(200 + i)[0], "target": "    y = x\n",
             "suffix": context(200 + i)[1]} for i in range(n)]


def code_rows(n: int) -> list[dict]:
    return [{"id": f"pd{i}", "source_file": f"m{i}.py",
             "text": f"import os\n\ndef g{i}(x):\n    y = x + {i}\n    return y\n"} for i in range(n)]


def build_world(root: Path) -> dict:
    """Init model + datasets under `root/run`; returns paths and row lists."""
    import tiny

    run_dir = root / "run"
    texts = [r["prefix"] + r["completion"] + r["suffix"] for r in pointwise_rows(64)]
    texts += [r["text"] for r in code_rows(8)]
    tokenizer = tiny.tiny_tokenizer(texts, vocab_size=400)
    # The init model is a finished stage "FT" of the run (provenance written), as the pipeline leaves it.
    init_dir = tiny.save(tiny.tiny_llama(tokenizer, hidden=32, layers=2, heads=4, max_positions=256),
                         tokenizer, run_dir / "models" / "FT")
    write_provenance(StageContext(run_dir, "FT"), "test-init", {}, datasets=[])
    datasets = {"rm_easy": pointwise_rows(48), "rm_easy_val": pointwise_rows(8, seed=7),
                "pairs_easy": pairwise_rows(8), "sd_prompts": fim_rows(4), "pd_code": code_rows(4)}
    for name, rows in datasets.items():
        write_dataset(run_dir, name, rows)
    return {"run_dir": run_dir, "init_dir": init_dir, "datasets": datasets}


def trainer_log(checkpoint_dir: Path) -> list[dict]:
    """The Trainer's log history as saved in a checkpoint's trainer_state.json."""
    return json.loads((Path(checkpoint_dir) / "trainer_state.json").read_text())["log_history"]


# --- session fixtures shared by test_reward_stage / test_rl_stage / test_ipo_stage ---------------------------
# (imported into each module; the module-level cache makes the world and the RM exist once per session)

import pytest  # noqa: E402

_CACHE: dict = {}

# The pointwise RM every RL test scores with: 20 steps of batch 8 separate the easy labels.
RM_SETTINGS = {"init": "FT", "datasets": ["rm_easy"], "eval_datasets": ["rm_easy_val"], "lr": 3e-3,
               "max_steps": 20, "batch_size": 8, "save_steps": 10, "logging_steps": 5}


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    if "world" not in _CACHE:
        _CACHE["world"] = build_world(tmp_path_factory.mktemp("alignment"))
    return _CACHE["world"]


@pytest.fixture(scope="session")
def trained_rm(world):
    """The run's RM.1 stage (pointwise), trained once; returns its output directory."""
    if "rm" not in _CACHE:
        from memlens.recipes.stages import reward

        ctx = StageContext(world["run_dir"], "RM.1", seed=0, device="cpu")
        run_stage_given(reward, RM_SETTINGS, ctx)
        _CACHE["rm"] = ctx.out_dir
    return _CACHE["rm"]


# Each stage's settings at test size (its test module and test_lora_stages.py train with them).
IPO_SETTINGS = {"init": "FT", "datasets": ["pairs_easy"], "objective": "ipo", "beta": 0.1, "lr": 1e-3,
                "max_steps": 4, "batch_size": 8, "save_steps": 2, "logging_steps": 1}
PPO_SETTINGS = {"init": "FT", "reward_model": "RM.1", "prompts": ["sd_prompts", "pd_code"], "algorithm": "ppo",
                "beta": 0.1, "lr": 1e-3, "max_steps": 3, "num_generations": 2, "prompts_per_step": 2,
                "max_completion_length": 8, "save_steps": 2, "ppo_epochs": 1}
RL_SETTINGS = {"init": "FT", "reward_model": "RM.1", "prompts": ["sd_prompts", "pd_code"], "beta": 0.1,
               "lr": 1e-3, "max_steps": 3, "num_generations": 4, "prompts_per_step": 2,
               "max_completion_length": 16, "save_steps": 2}
