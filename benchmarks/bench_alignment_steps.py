"""Per-step wall time of the RM, RLFT and IPO stages on the embedded default model size.

    .venv/bin/python benchmarks/bench_alignment_steps.py [--steps 6] [--out /tmp/bench_alignment]

A ≈5 M-parameter Llama (conf/model/tiny.yaml: hidden 256, 5 layers, 4 heads, ffn 688) with a BPE
tokenizer trained on Python standard-library files; data are real stdlib code split at random lines
(labels/pairs are arbitrary: this measures speed, not learning). Each stage runs through its real
`run_stage` for --steps optimizer steps; the time per step is the Trainer's train_runtime / steps
(so the first, slower step is included). Results in benchmarks/alignment_steps.md.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "integration")]


def stdlib_texts(n_files: int, seed: int = 0) -> list[str]:
    files = sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).glob("*.py") if p.stat().st_size < 60_000)
    random.Random(seed).shuffle(files)
    return [p.read_text(encoding="utf-8", errors="replace") for p in files[:n_files]]


def fim_split(text: str, rng: random.Random) -> tuple[str, str, str]:
    lines = text.splitlines(keepends=True)
    i = rng.randrange(len(lines))
    return "".join(lines[max(0, i - 12):i]), lines[i], "".join(lines[i + 1:i + 6])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default="/tmp/bench_alignment")
    args = ap.parse_args()

    import tiny
    from alignment_world import write_dataset

    from memlens.recipes.stages import preference, reward, rl
    from memlens.recipes.stages.contract import StageContext, write_provenance

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    run_dir = out / "run"
    texts = stdlib_texts(120)
    tokenizer = tiny.tiny_tokenizer(texts, vocab_size=4096)
    model = tiny.tiny_llama(tokenizer, hidden=256, layers=5, heads=4, ffn=688, max_positions=1024)
    params = sum(p.numel() for p in model.parameters())
    tiny.save(model, tokenizer, run_dir / "models" / "FT")
    write_provenance(StageContext(run_dir, "FT"), "bench-init", {}, datasets=[])

    rng = random.Random(0)
    splits = [fim_split(t, rng) for t in texts for _ in range(4)]
    write_dataset(run_dir, "rm", [{"id": f"r{i}", "prefix": p, "suffix": s, "completion": m, "label": i % 2}
                                  for i, (p, m, s) in enumerate(splits[:96])])
    write_dataset(run_dir, "pairs", [{"id": f"p{i}", "prefix": p, "suffix": s, "chosen": m, "rejected": "pass\n"}
                                     for i, (p, m, s) in enumerate(splits[:96])])
    write_dataset(run_dir, "prompts", [{"id": f"q{i}", "prefix": p, "target": m, "suffix": s}
                                       for i, (p, m, s) in enumerate(splits[:32])])

    n = args.steps
    runs = {
        "RM pointwise (batch 8, ≤256 tok)": (reward, "RM.point", {
            "init": "FT", "datasets": ["rm"], "lr": 1e-4, "max_steps": n, "batch_size": 8, "max_length": 256,
            "save_steps": 1000}),
        "RM pairwise (batch 8 pairs, ≤256 tok)": (reward, "RM.pair", {
            "init": "FT", "objective": "pairwise", "datasets": ["pairs"], "lr": 1e-4, "max_steps": n,
            "batch_size": 8, "max_length": 256, "save_steps": 1000}),
        "RLOO (2 prompts x 4 completions x 64 tok)": (rl, "RLFT.rloo", {
            "init": "FT", "reward_model": "RM.point", "prompts": ["prompts"], "lr": 1e-5, "max_steps": n,
            "num_generations": 4, "prompts_per_step": 2, "max_completion_length": 64, "save_steps": 1000}),
        "GRPO (2 prompts x 4 completions x 64 tok)": (rl, "RLFT.grpo", {
            "init": "FT", "reward_model": "RM.point", "prompts": ["prompts"], "algorithm": "grpo", "lr": 1e-5,
            "max_steps": n, "num_generations": 4, "prompts_per_step": 2, "max_completion_length": 64,
            "save_steps": 1000}),
        "IPO (batch 4 pairs, ≤256 tok)": (preference, "IPO", {
            "init": "FT", "datasets": ["pairs"], "lr": 1e-5, "max_steps": n, "batch_size": 4, "max_length": 256,
            "save_steps": 1000}),
    }
    results = {"params": params, "steps": n}
    for label, (module, name, settings) in runs.items():
        ctx = StageContext(run_dir, name, seed=0, device="cpu")
        start = time.time()
        module.run_stage(module.load_settings(settings, name), ctx)
        total = time.time() - start
        runtime = _RUNTIMES.get(str(ctx.out_dir))
        results[label] = {"s_per_step": round(runtime / n, 3) if runtime else None,
                          "stage_total_s": round(total, 1)}
        print(f"{label:<45} {results[label]}", flush=True)
    print(json.dumps(results, indent=1))


_RUNTIMES: dict[str, float] = {}   # output_dir -> Trainer train_runtime (s), recorded by the wrapper below


def _capture_runtimes() -> None:
    """Record each Trainer's train_runtime (the final log entry) keyed by its output_dir."""
    from transformers import Trainer

    original = Trainer.train

    def train(self, *a, **kw):
        result = original(self, *a, **kw)
        _RUNTIMES[str(Path(self.args.output_dir))] = result.metrics["train_runtime"]
        return result

    Trainer.train = train


if __name__ == "__main__":
    _capture_runtimes()
    main()
