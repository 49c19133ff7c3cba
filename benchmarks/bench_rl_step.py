"""Seconds per RL step, PPO (recipes/stages/ppo.py) against RLOO (TRL), on the embedded default's RL workload shape.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_rl_step.py [--steps 6] [--out /tmp/bench_rl_step]

Run it on an otherwise idle machine: both algorithms share the CPU with nothing else, or the numbers mean
nothing. The shape is RLFT.1 of conf/experiment/findings.yaml: the ≈5 M-parameter embedded model
(conf/model/tiny.yaml), 2 prompts x 4 completions x 48 sampled tokens per step, FIM contexts of up to 600
characters per side, scored by a pointwise RM trained for a few steps on the same model (its values are
irrelevant: this measures speed, not learning). Each algorithm runs through the real `rl.run_stage` for
--steps optimizer steps. RLOO's time per step is its Trainer's train_runtime / steps; PPO's is the wall
time of its training loop / steps (both exclude loading the models and include the first, slower step).
PPO runs at its defaults (4 PPO epochs of one minibatch per rollout), so a step is one rollout plus four
policy and value updates, against RLOO's one rollout and one update.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT / "tests" / "integration")]

RL_SHAPE = {"init": "FT", "reward_model": "RM", "prompts": ["prompts"], "beta": 0.1, "lr": 3e-5,
            "num_generations": 4, "prompts_per_step": 2, "max_completion_length": 48, "context_chars": 600,
            "save_steps": 1000}


def build_run(run_dir: Path) -> None:
    """The embedded model size as FT, a quick pointwise RM on it, and FIM prompt rows from stdlib code."""
    import tiny
    from alignment_world import write_dataset
    from bench_alignment_steps import fim_split, stdlib_texts

    from memlens.recipes.stages import reward
    from memlens.recipes.stages.contract import StageContext, write_provenance

    texts = stdlib_texts(120)
    tokenizer = tiny.tiny_tokenizer(texts, vocab_size=4096)
    model = tiny.tiny_llama(tokenizer, hidden=256, layers=5, heads=4, ffn=688, max_positions=1024)
    tiny.save(model, tokenizer, run_dir / "models" / "FT")
    write_provenance(StageContext(run_dir, "FT"), "bench-init", {}, datasets=[])
    rng = random.Random(0)
    splits = [fim_split(t, rng) for t in texts for _ in range(4)]
    write_dataset(run_dir, "rm", [{"id": f"r{i}", "prefix": p, "suffix": s, "completion": m, "label": i % 2}
                                  for i, (p, m, s) in enumerate(splits[:64])])
    write_dataset(run_dir, "prompts", [{"id": f"q{i}", "prefix": p, "target": m, "suffix": s}
                                       for i, (p, m, s) in enumerate(splits[:32])])
    rm = reward.load_settings({"init": "FT", "datasets": ["rm"], "lr": 1e-4, "max_steps": 4, "batch_size": 8,
                               "max_length": 256, "save_steps": 1000}, "RM")
    reward.run_stage(rm, StageContext(run_dir, "RM", seed=0, device="cpu"))


def seconds_per_step(run_dir: Path, algorithm: str, steps: int) -> float:
    from memlens.recipes.stages import rl
    from memlens.recipes.stages.contract import StageContext

    ctx = StageContext(run_dir, f"RLFT.{algorithm}", seed=0, device="cpu")
    recipe = rl.RLRecipe(rl.load_settings({**RL_SHAPE, "algorithm": algorithm, "max_steps": steps}, "RLFT"), ctx)
    recipe.setup()
    recipe.train()
    if algorithm == "ppo":
        return recipe.trainer.train_seconds / steps
    runtime = next(h["train_runtime"] for h in reversed(recipe.trainer.state.log_history) if "train_runtime" in h)
    return runtime / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default="/tmp/bench_rl_step")
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    build_run(out / "run")
    results = {"steps": args.steps, "shape": "2 prompts x 4 completions x 48 tokens, 5 M-parameter Llama"}
    for algorithm in ("rloo", "ppo"):
        results[f"{algorithm}_s_per_step"] = round(seconds_per_step(out / "run", algorithm, args.steps), 3)
        print(algorithm, results[f"{algorithm}_s_per_step"], "s/step", flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
