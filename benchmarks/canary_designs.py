"""Canary designs at doses, through TRL and the AuditCallback: are canaries designed to be found (Panda et al. 2025;
synthetic_data/designs.py) detected at a lower dose than SD's own target lines, after SFT and after IPO?

    python benchmarks/canary_designs.py --out runs/canary_designs --seeds 0 1 2     # 30 short runs (1-4 min each)
    python benchmarks/canary_designs.py --table runs/canary_designs                 # the table and the verdicts

Each run: 48 SD.Base programs (10 or 20 lines, the SD generator at the run's seed) are the hosts, dealt to doses
1 / 4 / 16 (synthetic_data/doses.py, 16 each; a host whose target is its first line is then dropped). The design fills each host's target: `as_given` keeps SD's own target
line; `unigram` and `new_token` put a designed secret of 10 tokens in its place (the rest of the program is the
host's prefix and suffix), and so do the two designs that read a model, both reading the shipped base the run then
fine-tunes: `rare` (Panda et al.'s model-based mode: x y repeated to 10 tokens, y a token of the fine-tuning data and
x the token after which the base finds y least likely, after the host's prefix) and `sampled` (Mitchell, Andrew et
al. 2026: 10 tokens the base samples after the host's prefix at temperature SAMPLED_TEMPERATURE = 1.0, its own
distribution; the authors advise >= 0.8). `memlens.inject` holds out each canary by a fair coin (the non-members) and plants the rest
`repeat` times in 96 other SD programs (the fine-tuning data, whose token counts the unigram design reads). The
shipped base is then fine-tuned from scratch of the run: `sft` with TRL's SFTTrainer (prompt-completion, LR 1e-3 as
examples/audit_trl_sft.py, 2 epochs, batch 8), or `ipo` with DPOTrainer's IPO loss (β 0.5, LR 3e-4 as the
quickstart's IPO, 2 epochs, batch 8; rejected: another program's continuation). The AuditCallback scores the last
checkpoint against the base (for `new_token`, the base with the same tokenizer and resized embeddings, never trained
on them): extraction and membership inference, each dose's members against every held-out twin.

The rule, fixed before any run of this script (`detection_verdict`): for a route and a designed design d (unigram,
new_token; and rare and sampled, added with their runs' settings above in a commit before any run of theirs), the
detection dose of a design is the smallest dose whose LOSS-attack AUC on the target span (members
planted that many times against all held-out canaries of the design; the LOSS attack fixed in advance, never the
best attack; the target, the span a design chooses, not the whole program) has a
95 % bootstrap interval above 0.5, and none when no dose has. The claim "d is detected at a lower dose than SD"
holds in a run when d's detection dose is lower than as_given's (as_given never detected counts as above every
dose); it is not reproduced when d's is the same or higher; it is inconclusive when neither is detected at any dose,
or when a run of the pair did not train (its training loss did not fall). Over seeds it holds (or is not reproduced)
only when at least 3 seeds say so and none says otherwise (harness/report/findings/verdict.py `over_seeds`).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import time
from pathlib import Path

from memlens.harness.report.findings.verdict import DETECTION_ATTACK, DETECTION_SPAN

cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
cli.add_argument("--out", default="runs/canary_designs", help="where the runs go (one folder per route/design/seed)")
cli.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
cli.add_argument("--routes", nargs="+", default=["sft", "ipo"], choices=["sft", "ipo"])
cli.add_argument("--designs", nargs="+", default=["as_given", "unigram", "new_token", "rare", "sampled"])
cli.add_argument("--table", metavar="DIR", help="print the table and verdicts of the runs under DIR, train nothing")
cli.add_argument("--figure", metavar="PNG", help="with --table: also draw LOSS AUC against dose, a panel per design")

DOSES = (1, 4, 16)
HOSTS_PER_DOSE = 16
BACKGROUND = 96
SECRET_TOKENS = 10
EPOCHS, BATCH = 2, 8
ATTACK = DETECTION_ATTACK       # fixed in advance (the rule above), never the best of several
SPAN = DETECTION_SPAN           # the scored span: the secret a design chooses (not the whole program)
DESIGNED = ("unigram", "new_token", "rare", "sampled")
SAMPLED_TEMPERATURE = 1.0       # the base's own distribution (Mitchell, Andrew et al.: T >= 0.8)


# ------------------------------------------------------------------------------------------------ data
def sd_rows(seed: int) -> tuple[list[dict], list[str]]:
    """(hosts: SD.Base FIM rows with a dose each, background: the other programs' code) at `seed`."""
    from memlens.synthetic_data.common import line_document_frequency
    from memlens.synthetic_data.doses import assign_doses
    from memlens.synthetic_data.sd.programs import base_rows, generate_programs

    n_hosts = HOSTS_PER_DOSE * len(DOSES)
    programs = generate_programs(n_hosts + BACKGROUND, 0, seed, line_counts=(10, 20))
    rows = base_rows(programs[:n_hosts], seed, line_document_frequency(p.code for p in programs))
    hosts = [{"id": r["id"], "prefix": r["prefix"], "target": r["target"], "suffix": r["suffix"]} for r in rows]
    # A host whose target is its program's first line has no prefix, so no prompt to score its target after:
    # memlens.inject refuses it. Dropped after the doses are dealt, so every other host keeps its dose (seed 1 drops
    # one host; seeds 0 and 2 have none).
    dosed = assign_doses(hosts, DOSES, seed, "canary-designs")
    return [h for h in dosed if h["prefix"]], [p.code for p in programs[n_hosts:]]


def _halves(code: str) -> tuple[str, str]:
    lines = code.splitlines(keepends=True)
    middle = len(lines) // 2
    return "".join(lines[:middle]), "".join(lines[middle:])


def background(route: str, codes: list[str]):
    from datasets import Dataset

    halves = [_halves(c) for c in codes]
    if route == "sft":
        return Dataset.from_list([{"prompt": p, "completion": c} for p, c in halves])
    return Dataset.from_list([{"prompt": p, "chosen": c, "rejected": halves[(i + 1) % len(halves)][1]}
                              for i, (p, c) in enumerate(halves)])


# ------------------------------------------------------------------------------------------------ one run
def run_one(out: Path, route: str, design: str, seed: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    import memlens
    from memlens.harness.core.shipped import shipped_path
    from memlens.synthetic_data.designs import AS_GIVEN, DESIGNS

    base = shipped_path("assets/base_tiny")
    if out.exists():
        shutil.rmtree(out)                     # a killed run is redone whole: its result is written last
    hosts, codes = sd_rows(seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    sampler = None
    if design != AS_GIVEN and DESIGNS[design].reads_model:     # rare and sampled read the base the run fine-tunes (a copy of it)
        sampler = memlens.ModelSampler(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), tokenizer,
                                       temperature=SAMPLED_TEMPERATURE)
    train, manifest = memlens.inject(background(route, codes), hosts, seed=seed, design=design, tokenizer=tokenizer,
                                     secret_tokens=SECRET_TOKENS, sampler=sampler)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    control = base
    if design == "new_token":                  # the new tokens need rows; the control gets the same, untrained
        model.resize_token_embeddings(len(tokenizer))
        control = out / "control"
        model.save_pretrained(control)
        tokenizer.save_pretrained(control)
    audit = memlens.AuditCallback(manifest, control=control, out_dir=out, max_new_tokens=24, target_tokens=16,
                                  min_target_tokens=4, model_name="model")
    steps = EPOCHS * -(-len(train) // BATCH)      # one checkpoint, at the end: the callback scores it
    common = dict(output_dir=str(out / "model"), max_steps=steps, save_steps=steps, per_device_train_batch_size=BATCH,
                  report_to=[], use_cpu=not torch.cuda.is_available(), seed=seed)
    if route == "sft":
        trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=train, callbacks=[audit],
                             args=SFTConfig(learning_rate=1e-3, **common))
    else:
        # TRL loads its reference from the model's path when none is given: the base on disk, without the new
        # tokens' rows; a new-token run passes the resized base itself (for the others the two are the same model).
        ref = {"ref_model": copy.deepcopy(model)} if design == "new_token" else {}
        trainer = DPOTrainer(model=model, processing_class=tokenizer, train_dataset=train, callbacks=[audit],
                             args=DPOConfig(loss_type="ipo", beta=0.5, learning_rate=3e-4, **common), **ref)
    started = time.perf_counter()
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    result = {"route": route, "design": design, "seed": seed, "seconds": round(time.perf_counter() - started, 1),
              "steps": trainer.state.global_step, "loss_first": losses[0] if losses else None,
              "loss_last": losses[-1] if losses else None, "design_record": manifest.get("design", {}),
              **per_dose(out, manifest)}
    shutil.rmtree(out / "model", ignore_errors=True)                 # weights are not kept, the audit's rows are
    shutil.rmtree(out / "control", ignore_errors=True)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def per_dose(out: Path, manifest: dict) -> dict:
    """Each dose's LOSS-attack AUC (its members against every held-out canary) and extraction k/n, from the
    callback's summary and rows of the last checkpoint; the held-out canaries' extraction beside them."""
    from memlens.harness.core.io import read_jsonl

    summary = json.loads((out / "audit" / "mia" / "model" / "summary.json").read_text())
    checkpoint = summary["checkpoints"][-1]
    entry = summary["results"][checkpoint]["canaries"]
    span = SPAN
    dose_of = {c["id"]: c["repeat"] for c in manifest["canaries"]}
    rows = list(read_jsonl(out / "audit" / "model" / checkpoint / "canaries.jsonl"))
    heldout = list(read_jsonl(out / "audit" / "model" / checkpoint / "canaries_heldout.jsonl"))
    doses = {}
    for dose in DOSES:
        metrics = entry.get("tiers", {}).get(str(dose), {}).get(span, {}).get(ATTACK)
        scored = [r for r in rows if dose_of.get(r["id"]) == dose and r.get("memorized") is not None]
        doses[str(dose)] = {"members": sum(dose_of[i] == dose for i in dose_of),
                            "auc": metrics["auc"]["value"] if metrics else None,
                            "ci95": metrics["auc"]["ci95"] if metrics else None,
                            "extracted": sum(bool(r["memorized"]) for r in scored), "scored": len(scored)}
    return {"checkpoint": checkpoint, "span": span, "heldout": len(manifest["heldout"]),
            "heldout_extracted": sum(bool(r.get("memorized")) for r in heldout), "doses": doses}


# ------------------------------------------------------------------------------------------------ the rule
def by_dose(result: dict) -> dict[int, list | None]:
    """A run's LOSS AUC interval per dose (harness/report/findings/verdict.py reads these)."""
    return {dose: result["doses"][str(dose)]["ci95"] for dose in DOSES}


def detection_dose(result: dict) -> int | None:
    """The smallest dose whose AUC interval lies above 0.5 (None: no dose)."""
    from memlens.harness.report.findings.verdict import detection_dose as smallest

    return smallest(by_dose(result))


def trained(result: dict) -> bool:
    return result["loss_first"] is not None and result["loss_last"] < result["loss_first"]


def detection_verdict(designed: dict | None, sd: dict | None) -> tuple[str, str]:
    """The rule of this module's docstring (harness/report/findings/verdict.py), for one route and seed."""
    from memlens.harness.report.findings.verdict import detection_verdict as verdict

    if designed is None or sd is None:
        return verdict(None, None)
    return verdict(by_dose(designed), by_dose(sd), (trained(designed), trained(sd)),
                   "a run did not train (loss did not fall)")


def epsilon_per_dose(run_dir: Path, result: dict) -> dict[str, float]:
    """Each dose's one-run ε lower bound (Steinke et al. 2023, harness/audit/epsilon.py with the audit's default
    settings: LOSS on the target, δ 1e-5, 95 %, its four guess counts under Bonferroni) over that dose's canaries,
    whose membership the coins decided: members and held-out twins of the same dose (the hosts' doses, redrawn from
    the seed). Descriptive: no rule reads it."""
    from memlens.harness.audit.epsilon import EpsilonSettings, bound_of_rows
    from memlens.harness.core.io import read_jsonl

    dose_of = {h["id"]: h["repeat"] for h in sd_rows(result["seed"])[0]}
    path = run_dir / "audit" / "mia" / "model" / result["checkpoint"] / "canaries.jsonl"
    rows = list(read_jsonl(path))
    out = {}
    for dose in DOSES:
        # Every row, shots included, as the audit's own ε does: which rows are ReCaLL's shots depends on the coins,
        # so leaving them out would make the remaining coins no longer fair.
        tier = [r for r in rows if dose_of.get(r["id"]) == dose]
        out[str(dose)] = bound_of_rows(tier, EpsilonSettings(), path)["epsilon_lower_bound"] if tier else None
    return out


def table(root: Path) -> str:
    from memlens.harness.report.findings.verdict import FindingResult, over_seeds

    results = [json.loads(p.read_text()) | {"dir": p.parent} for p in sorted(root.glob("*/result.json"))]
    by = {(r["route"], r["design"], r["seed"]): r for r in results}
    seeds = sorted({r["seed"] for r in results})
    lines = ["| route | design | seed | LOSS AUC x1 / x4 / x16 [95 % interval] | extracted x1 / x4 / x16 | "
             "ε ≥ x1 / x4 / x16 | held-out extracted | loss first → last | s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["route"], r["design"], r["seed"])):
        aucs = " / ".join("–" if r["doses"][str(d)]["auc"] is None else
                          f"{r['doses'][str(d)]['auc']:.2f} [{r['doses'][str(d)]['ci95'][0]:.2f}, "
                          f"{r['doses'][str(d)]['ci95'][1]:.2f}]" for d in DOSES)
        ext = " / ".join(f"{r['doses'][str(d)]['extracted']}/{r['doses'][str(d)]['scored']}" for d in DOSES)
        eps = " / ".join("–" if e is None else f"{e:.2f}" for e in epsilon_per_dose(r["dir"], r).values())
        lines.append(f"| {r['route']} | {r['design']} | {r['seed']} | {aucs} | {ext} | {eps} | "
                     f"{r['heldout_extracted']}/{r['heldout']} | {r['loss_first']:.3g} → {r['loss_last']:.3g} | "
                     f"{r['seconds']:.0f} |")
    lines += ["", "| route | designed | per seed (detection dose: designed vs SD) | over seeds |", "|---|---|---|---|"]
    for route in sorted({r["route"] for r in results}):
        for design in DESIGNED:
            verdicts = [detection_verdict(by.get((route, design, s)), by.get((route, "as_given", s))) for s in seeds]
            overall = over_seeds([FindingResult(f"designs/{route}/{design}", "detected at a lower dose than SD",
                                                "Panda et al. 2025", "benchmarks/canary_designs.py", [route], v,
                                                reason=why) for v, why in verdicts])
            per_seed = "; ".join(f"seed {s}: {v} ({why})" for s, (v, why) in zip(seeds, verdicts))
            lines.append(f"| {route} | {design} | {per_seed} | {overall['status']} "
                         f"({overall['held']} of {overall['measured']} hold) |")
    return "\n".join(lines)


def figure(root: Path, path: Path) -> Path:
    """LOSS AUC (target span) against dose: a panel per design, a line per route and seed, 95 % intervals drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(p.read_text()) for p in sorted(root.glob("*/result.json"))]
    designs = [d for d in ("as_given", *DESIGNED) if any(r["design"] == d for r in results)]
    fig, axes = plt.subplots(1, len(designs), figsize=(4 * len(designs), 3.6), sharey=True, squeeze=False)
    for ax, design in zip(axes[0], designs):
        for r in sorted((r for r in results if r["design"] == design), key=lambda r: (r["route"], r["seed"])):
            points = [(d, r["doses"][str(d)]) for d in DOSES if r["doses"][str(d)]["auc"] is not None]
            xs = [d * (1.06 if r["route"] == "ipo" else 0.94) for d, _ in points]   # routes side by side
            ys = [p["auc"] for _, p in points]
            errors = [[y - p["ci95"][0] for y, (_, p) in zip(ys, points)],
                      [p["ci95"][1] - y for y, (_, p) in zip(ys, points)]]
            ax.errorbar(xs, ys, yerr=errors, marker="o" if r["route"] == "sft" else "s", capsize=2,
                        color="tab:blue" if r["route"] == "sft" else "tab:orange", alpha=0.75,
                        label=f"{r['route']} seed {r['seed']}")
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.set(xscale="log", xticks=list(DOSES), xticklabels=[f"x{d}" for d in DOSES], title=design,
               xlabel="copies in training (dose)")
    axes[0][0].set_ylabel("LOSS AUC, target (95 % interval)")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    options = cli.parse_args()
    if options.table:
        print(table(Path(options.table)))
        if options.figure:
            print(f"figure: {figure(Path(options.table), Path(options.figure))}")
        return
    for seed in options.seeds:
        for route in options.routes:
            for design in options.designs:
                out = Path(options.out) / f"{route}_{design}_seed{seed}"
                if (out / "result.json").is_file():
                    print(f"{out}: done before, kept")
                    continue
                result = run_one(out, route, design, seed)
                print(json.dumps({k: result[k] for k in ("route", "design", "seed", "seconds", "doses")}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
