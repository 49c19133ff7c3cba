"""Paper 003's contrasts at a size two cores cannot train: one prepared GPU run (`bash scripts/gpu_ladder.sh`).

    python benchmarks/gpu_ladder.py --out runs/gpu_ladder              # on a GPU: the ~60 M base and the chain
    python benchmarks/gpu_ladder.py --toy --out /tmp/ladder            # the same steps at toy size on the CPU
    (run it again with the same --out to continue where a run stopped)

In one run of at most `--budget` seconds (9 minutes by default) it
 1. measures the device's training throughput on the ladder model (hidden 768, 8 layers, ~60 M parameters with
    the shipped tokenizer) and chooses every count from it, before anything trains: plan.json;
 2. pre-trains that base with the PT recipe on the shipped base's corpus (the standard library's base pool,
    FIM-formatted, conf/experiment/base.yaml), in bf16 on a GPU, with the shipped tokenizer;
 3. builds the quickstart's data at the 175-program settings of experiment=findings ("More canaries") and trains
    FT.2, FT.3, RM.3 -> RLFT.2 and IPO from that base (`memlens run experiment=quickstart`, the base imported as PT);
 4. audits every checkpoint (NED and membership inference) and writes the findings table with every evidence
    gate, as the CPU run does; then the held-out code loss of this base beside the shipped base's.
Outputs under --out: plan.json, timings.json (seconds per step, per invocation), done.json (the steps finished),
ladder.json (model size, throughput, held-out losses, F1/F2/F3/F8 with their intervals and gates), findings.json,
summary.json and report/ (copied from the run's report), and the two run directories base/ and run/. Counts are
chosen once: a second invocation reads plan.json and never re-chooses after a verdict was seen; it skips the steps
done.json lists, and `memlens run` continues a killed step from its last finished stage and checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The ladder model: ~15x the shipped base (hidden 256, 5 layers, ~5 M parameters), same tokenizer.
LADDER_MODEL = {"hidden_size": 768, "num_layers": 8, "num_heads": 12, "intermediate_size": 2048}
TOY_MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 176}
SHIPPED_BASE = "assets/base_tiny"
SHIPPED_HIDDEN = 256          # assets/base_tiny/config.json hidden_size

# The chain at the findings experiment's 175-program settings (conf/experiment/findings.yaml, "More canaries":
# FT.3 save_steps 235, RM.3 150 steps, IPO 175 steps), audited with NED and membership inference. No NMT summary is
# read: this run's report holds this run only.
CHAIN = {"data.sd.size": 175, "stages.FT.3.save_steps": 235, "stages.RM.3.max_steps": 150,
         "stages.IPO.max_steps": 175, "audit.measures": "[ned,mia]", "report.nmt_summary": "null"}
# At toy size: the smoke run's data and every stage cut to a few steps (tests/integration/run_helpers.py TOY_STAGE).
TOY_CHAIN = {"data.sd.size": 12, "data.sd.line_counts": "[10]", "data.pd.max_files": 60,
             "stages.FT.2.max_steps": 4, "stages.FT.3.max_steps": 4, "stages.FT.2.save_steps": 2,
             "stages.FT.3.save_steps": 2, "stages.FT.2.batch_size": 8, "stages.FT.3.batch_size": 8,
             "stages.FT.3.max_seq_len": 256, "stages.FT.2.max_seq_len": 256,
             "stages.RM.3.max_steps": 4, "stages.RM.3.save_steps": 2, "stages.RM.3.max_length": 256,
             "stages.RLFT.2.max_steps": 2, "stages.RLFT.2.save_steps": 1, "stages.RLFT.2.num_generations": 2,
             "stages.RLFT.2.max_completion_length": 8, "stages.RLFT.2.eval_prompts": 4,
             "stages.RLFT.2.eval_samples": 2, "stages.IPO.max_steps": 2, "stages.IPO.save_steps": 1,
             "stages.IPO.max_length": 256, "audit.measures": "[ned,mia]", "audit.max_new_tokens": 16,
             "audit.target_tokens": 16, "audit.min_target_tokens": 4, "audit.utility_examples": 8,
             "audit.mia_spans": "[target]", "audit.mia_bootstrap": 50, "report.figures": "false",
             "report.nmt_summary": "null"}
TOY_BASE = {"data.pd.max_files": 30, "stages.PT.save_steps": 8, "stages.PT.logging_steps": 2}

# How the budget is spent, fixed before any run. PT takes what the chain, the audit and the fixed costs leave.
# The chain's stages are estimated in training-token passes at the measured throughput, each times a factor for
# what a stage does beside a plain forward-backward pass (measured shares of the CPU quickstart, benchmarks/README.md
# "Quickstart": RL generates token by token, preference objectives run the policy and the reference on two
# completions, the audit decodes greedily); if they would not fit their share, every chain count is scaled down
# by one factor (never below CHAIN_FLOOR of the settings above).
FIXED_SECONDS = 75           # interpreters, data building, model loading, the report (~8 processes)
AUDIT_SHARE = 0.15           # of the budget, for scoring every checkpoint (NED + MIA) and the held-out losses
CHAIN_SHARE = 0.35           # of the budget, for FT.2, FT.3, RM.3, RLFT.2 and IPO
CHAIN_FLOOR = 0.25
STAGE_FACTORS = {"sft": 1.5, "reward": 1.5, "preference": 4.0, "rl": 40.0}
PROBE_SEQ, PROBE_BATCH = 512, 8   # the PT stage's block length and batch (experiment=base)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="where everything goes (rerun with it to continue)")
    p.add_argument("--toy", action="store_true", help="toy size on the CPU (the test's run)")
    p.add_argument("--device", default=None, help="cuda (default) or cpu (default with --toy)")
    p.add_argument("--budget", type=float, default=None,
                   help="wall seconds the counts are chosen for (default 540; with --toy 100)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


# --- 1. the plan: throughput first, then every count -----------------------------------------------------------


def model_preset(toy: bool) -> dict:
    """The ladder model as conf/model/tiny.yaml's keys, with the shipped tokenizer's vocabulary."""
    return {"name": "ladder", "pretrained": None, "fim_family": "memlens", "dtype": "auto", "vocab_size": 4096,
            "max_position_embeddings": 1024, "tie_embeddings": True, "lora": {"enabled": False},
            **(TOY_MODEL if toy else LADDER_MODEL)}


def measure_throughput(preset: dict, device: str, steps: int, warmup: int) -> dict:
    """Training tokens per second of the ladder model on `device`: AdamW steps on PT-shaped batches (bf16 autocast
    and activation checkpointing on CUDA, as the Trainer runs there), after `warmup` untimed steps."""
    import torch
    from transformers import PreTrainedTokenizerFast

    from memlens.recipes.stages.models import build_llama, parse_model

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(REPO / SHIPPED_BASE), local_files_only=True)
    torch.manual_seed(0)
    model = build_llama(parse_model(preset, "ladder model"), tokenizer).to(device)
    if device == "cuda":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seq = PROBE_SEQ if device == "cuda" else 128
    batch = torch.randint(0, len(tokenizer), (PROBE_BATCH, seq), device=device)
    for i in range(warmup + steps):
        if i == warmup:
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    return {"tokens_per_second": steps * PROBE_BATCH * seq / seconds, "parameters": params, "seq_len": seq,
            "batch": PROBE_BATCH, "steps": steps, "seconds": round(seconds, 3)}


def chain_stages(run_dir: Path, overrides: list[str]) -> list:
    """The chain's stages as `memlens run experiment=quickstart` composes them with these overrides."""
    from memlens.harness.cli import compose
    from memlens.recipes.orchestration.stage_plan import plan

    return plan(compose(["experiment=quickstart", f"run_dir={run_dir}", *overrides]))


def width_scaled_lrs(stages: list, hidden: int) -> dict[str, float]:
    """Each stage's learning rate times the shipped base's width over the ladder's (never above 1): μP's rule for
    Adam's rate as a model widens (Yang et al. 2022, Tensor Programs V: a hidden weight's rate scales as 1/width).
    Committed before the second GPU run, after the first one (benchmarks/README.md, "GPU ladder"), with no finding
    computed: at the 5 M base's rates FT.3 (2e-3) turned NaN by step 20 and IPO (3e-4) by step 140, and the 60 M
    base pre-trained at 2e-3 plateaued with gradient-norm spikes and a held-out loss worse than the shipped base's
    (4.72 against 3.99). Applied to every stage, PT's too."""
    ratio = min(1.0, SHIPPED_HIDDEN / hidden)
    return {f"stages.{stage.model_name}.lr": float(f"{stage.given['lr'] * ratio:.3g}")
            for stage in stages if stage.given.get("lr")}


def base_stages(out: Path) -> list:
    """The base run's stages (PT alone) as `memlens run experiment=base` composes them."""
    from memlens.harness.cli import compose
    from memlens.recipes.orchestration.stage_plan import plan

    return plan(compose(["experiment=base", f"run_dir={out / 'base'}"]))


def chain_token_passes(run_dir: Path, stages: list) -> dict[str, float]:
    """Training tokens each chain stage processes at the chosen settings (from its composed settings and its
    datasets' rows, counted in characters / 3.36, the shipped tokenizer's bytes per token on code), times the stage's
    factor: the unit the throughput is measured in."""
    from memlens.harness.core.io import read_jsonl

    passes = {}
    for stage in stages:
        if stage.recipe == "pretrain":
            continue
        s = stage.given
        rows = [r for d in s.get("datasets") or s.get("prompts") or []
                if (run_dir / "data" / d / "rows.jsonl").is_file()
                for r in read_jsonl(run_dir / "data" / d / "rows.jsonl")]
        mean_tokens = (sum(len(json.dumps(r)) for r in rows) / len(rows) / 3.36) if rows else 256
        passes[stage.model_name] = STAGE_FACTORS[stage.recipe] * mean_tokens * stage_examples(s, len(rows))
    return passes


def stage_examples(settings: dict, n_rows: int) -> float:
    """Examples a stage trains on: max_steps x its batch where it has max_steps, else epochs over its rows (RL: prompts
    per step x generations)."""
    batch = settings.get("batch_size") or settings.get("prompts_per_step", 1) * settings.get("num_generations", 1)
    if settings.get("max_steps"):
        return settings["max_steps"] * batch
    return settings.get("epochs", 1) * n_rows


def choose_counts(throughput: float, passes: dict[str, float], budget: float, toy: bool) -> dict:
    """The chain's scale (1 = the 175-program settings) and PT's token budget, from the measured throughput."""
    chain_seconds = sum(passes.values()) / throughput
    scale = 1.0 if chain_seconds <= CHAIN_SHARE * budget else max(CHAIN_FLOOR, CHAIN_SHARE * budget / chain_seconds)
    pt_seconds = budget - FIXED_SECONDS - AUDIT_SHARE * budget - min(chain_seconds * scale, CHAIN_SHARE * budget)
    pt_tokens = int(max(pt_seconds, 0.05 * budget) * throughput * 0.8)     # 0.8: the Trainer's own overhead
    # at toy size the run proves the wiring, not the base: PT stays within a few seconds on 2 cores
    pt_tokens = min(max(pt_tokens, 16384), 32768) if toy else max(pt_tokens, PROBE_SEQ * PROBE_BATCH * 50)
    # PT checkpoints are for resuming only (save_total_limit 2): about five per run, not one per 100 steps (each one
    # writes the weights and AdamW's state, ~0.7 GB at 60 M parameters)
    pt_steps = math.ceil(pt_tokens / (PROBE_SEQ * PROBE_BATCH))
    return {"chain_scale": round(scale, 3), "chain_seconds_estimate": round(chain_seconds * scale, 1),
            "pt_tokens": pt_tokens, "pt_seconds_estimate": round(pt_tokens / throughput, 1),
            "pt_save_steps": max(100, pt_steps // 5)}


def scaled(overrides: dict, scale: float) -> dict:
    """The chain's step-count overrides times `scale` (epochs of FT.3 too), each at least 1."""
    if scale >= 1.0:
        return dict(overrides)
    out = dict(overrides)
    for key in ("stages.RM.3.max_steps", "stages.IPO.max_steps"):
        if key in out:
            out[key] = max(1, math.floor(int(out[key]) * scale))
    out["stages.FT.3.epochs"] = max(1, math.floor(14 * scale))       # conf/experiment/quickstart.yaml: 14 epochs
    return out


# --- 2-4. the runs ---------------------------------------------------------------------------------------------


def memlens(args: list[str], log: Path) -> None:
    """`python -m memlens ARGS`, its output to the console and to `log`; a failure stops the ladder (rerun it to
    continue where it stopped)."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}    # the CLI sets its offline switches itself
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ memlens {' '.join(args)}\n")
        f.flush()
        proc = subprocess.Popen([sys.executable, "-m", "memlens", *args], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        if proc.wait():
            raise SystemExit(f"gpu_ladder: `memlens {args[0]}` failed (exit {proc.returncode}); its output is in {log}; "
                             "rerun the same command to continue")


def as_overrides(settings: dict) -> list[str]:
    """key=value for the command line; a stage key with `++` (added where the experiment's stage does not set it)."""
    return [f"{'++' if key.startswith('stages.') else ''}{key}={value}" for key, value in settings.items()]


def base_command(out: Path, plan: dict) -> list[str]:
    """`memlens run experiment=base` of the ladder model: PT alone, on the base pool, with the shipped tokenizer."""
    model = [f"model.{k}={v}" for k, v in plan["model"].items() if k in ("hidden_size", "num_layers", "num_heads",
                                                                        "intermediate_size")]
    toy = as_overrides(TOY_BASE) if plan["toy"] else []
    return ["run", "experiment=base", f"run_dir={out / 'base'}", f"seed={plan['seed']}", f"device={plan['device']}",
            *model, f"++stages.PT.max_tokens={plan['counts']['pt_tokens']}", f"++stages.PT.tokenizer={SHIPPED_BASE}",
            *([] if plan["toy"] else [f"++stages.PT.save_steps={plan['counts']['pt_save_steps']}"]), *toy,
            *plan.get("base_overrides", [])]


def chain_command(out: Path, plan: dict) -> list[str]:
    """`memlens run experiment=quickstart` from the ladder base (imported as PT) at the plan's counts."""
    return ["run", "experiment=quickstart", f"run_dir={out / 'run'}", f"seed={plan['seed']}",
            f"device={plan['device']}", "model=tiny_base", f"model.pretrained={out / 'base' / 'models' / 'PT'}",
            *plan["chain_overrides"]]


def heldout_losses(out: Path, plan: dict) -> dict:
    """Mean target loss on the chain's held-out public code (pd_eval, the audit's utility rows) of this base and of
    the shipped one, through the audit's own measure (harness/measures/utility.py)."""
    from memlens.harness.audit.settings import AuditSettings
    from memlens.harness.core.user_data import load_examples
    from memlens.harness.measures.utility import heldout_loss, sample_rows

    rows = sample_rows(load_examples(out / "run" / "data" / "pd_eval" / "rows.jsonl"), 50, plan["seed"])
    settings = AuditSettings(device=plan["device"], batch_size=16, fim_family="memlens")
    cache = out / "run" / "audit" / "cache"
    return {"n": len(rows), "ladder_base": heldout_loss(out / "base" / "models" / "PT", rows, settings, cache),
            "shipped_base": heldout_loss(REPO / SHIPPED_BASE, rows, settings, cache)}


def ladder_record(out: Path, plan: dict, losses: dict) -> dict:
    """ladder.json: the size, the throughput, the two bases' held-out losses, and F1, F2, F3, F8 with their rates,
    intervals, p-values and every evidence gate's value."""
    findings = json.loads((out / "run" / "report" / "findings.json").read_text())["findings"]
    run = json.loads((out / "run" / "run.json").read_text())
    keep = [{k: f.get(k) for k in ("id", "claim", "status", "ours", "rates", "p_value", "reason", "evidence")}
            for f in findings if f["id"] in ("F1", "F2", "F3", "F8")]
    return {"toy": plan["toy"], "device": plan["device"], "parameters": plan["throughput"]["parameters"],
            "throughput_tokens_per_second": round(plan["throughput"]["tokens_per_second"]),
            "pt_tokens": plan["counts"]["pt_tokens"], "chain_scale": plan["counts"]["chain_scale"],
            "heldout_loss": losses, "findings": keep, "git_commit": run.get("git_commit"),
            "computed_on": run.get("compute")}


# --- the driver --------------------------------------------------------------------------------------------------


class Timings:
    """Seconds per step of each invocation, in timings.json, and the steps finished so far, in done.json (each written
    atomically after every step): a step that finished is not run again by a later invocation, and one that was
    killed runs again, where `memlens run` itself continues from the last finished stage and checkpoint."""

    def __init__(self, out: Path):
        self.path, self.done_path = out / "timings.json", out / "done.json"
        self.all = json.loads(self.path.read_text()) if self.path.is_file() else []
        self.done = json.loads(self.done_path.read_text()) if self.done_path.is_file() else {}
        self.this = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": {}}
        self.all.append(self.this)
        write_json(self.path, self.all)

    def step(self, name: str, run) -> object:
        if name in self.done:
            print(f"[ladder] {name}: done in an earlier invocation", flush=True)
            return self.done[name]
        start = time.perf_counter()
        result = run()
        self.this["steps"][name] = round(time.perf_counter() - start, 1)
        self.done[name] = result
        write_json(self.path, self.all)
        write_json(self.done_path, self.done)
        return result


def write_json(path: Path, record) -> None:
    from memlens.harness.core.io import atomic_write_json

    atomic_write_json(path, record)


def make_plan(args: argparse.Namespace, device: str, timings: Timings) -> dict:
    """plan.json: read when it exists (a continued run), else measured and chosen now, before anything trains."""
    path = args.out / "plan.json"
    if path.is_file():
        print(f"[ladder] continuing: counts from {path}", flush=True)
        return json.loads(path.read_text())
    preset = model_preset(args.toy)
    throughput = timings.step("throughput", lambda: measure_throughput(
        preset, device, steps=3 if args.toy else 20, warmup=1 if args.toy else 5))
    chain = dict(TOY_CHAIN if args.toy else CHAIN)
    run_dir = args.out / "run"
    data_args = ["data", "experiment=quickstart", f"run_dir={run_dir}", f"seed={args.seed}", *as_overrides(chain)]
    timings.step("chain_data", lambda: memlens(data_args, args.out / "logs" / "chain.log"))
    stages = chain_stages(run_dir, as_overrides(chain))
    chain.update({k: v for k, v in width_scaled_lrs(stages, preset["hidden_size"]).items() if ".PT." not in k})
    base_lrs = width_scaled_lrs(base_stages(args.out), preset["hidden_size"])
    passes = chain_token_passes(run_dir, stages)
    counts = choose_counts(throughput["tokens_per_second"], passes, args.budget, args.toy)
    plan = {"toy": args.toy, "device": device, "seed": args.seed, "budget_seconds": args.budget, "model": preset,
            "throughput": throughput, "chain_token_passes": {k: round(v) for k, v in passes.items()},
            "counts": counts, "chain_overrides": as_overrides(scaled(chain, counts["chain_scale"])),
            "base_overrides": as_overrides(base_lrs)}
    write_json(path, plan)
    print(f"[ladder] plan: {throughput['parameters'] / 1e6:.1f} M parameters, "
          f"{throughput['tokens_per_second']:.0f} training tokens/s on {device}; PT {counts['pt_tokens']} tokens "
          f"(~{counts['pt_seconds_estimate']:.0f} s), chain at scale {counts['chain_scale']} "
          f"(~{counts['chain_seconds_estimate']:.0f} s)", flush=True)
    return plan


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.budget = args.budget or (100.0 if args.toy else 540.0)
    device = args.device or ("cpu" if args.toy else "cuda")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("gpu_ladder: no CUDA device visible to torch (use --toy on a CPU)")
    args.out.mkdir(parents=True, exist_ok=True)
    timings = Timings(args.out)
    plan = make_plan(args, device, timings)
    logs = args.out / "logs"
    timings.step("base", lambda: memlens(base_command(args.out, plan), logs / "base.log"))
    timings.step("chain", lambda: memlens(chain_command(args.out, plan), logs / "chain.log"))
    losses = timings.step("heldout_loss", lambda: heldout_losses(args.out, plan))
    for name in ("findings.json", "summary.json"):
        shutil.copy2(args.out / "run" / "report" / name, args.out / name)
    shutil.copytree(args.out / "run" / "report", args.out / "report", dirs_exist_ok=True)
    record = ladder_record(args.out, plan, losses)
    write_json(args.out / "ladder.json", record)
    for f in record["findings"]:
        print(f"[ladder] {f['id']} {f['status']:<15} {f['ours']}" + (f" — {f['reason']}" if f["reason"] else ""))
    print(f"[ladder] held-out loss on pd_eval (n={losses['n']}): this base {losses['ladder_base']:.3f}, "
          f"the shipped base {losses['shipped_base']:.3f}; outputs in {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
