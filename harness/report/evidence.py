"""Training evidence: did each stage of a run actually learn? Read from what the stages stored.

A finding about what RL or IPO does to memorization means nothing if RL or IPO did not move the model
(a persistence of 100 % through an RL stage whose reward stayed flat only says the stage was inert).
The findings (harness/report/findings/evidence_gates.py) gate on these figures; the report's Training section shows
them. Sources, all written by the recipes:
- reward models: `models/<RM>/scores/summary.json`, ROC-AUC per scored dataset with its split
  (`train`, `eval` = held out, `scored`); an RL stage's verifiable reward, `models/<RL>/reward_function/summary.json`
  in the same format (its ranking of held-out labelled rows);
- RL: `models/<RL>/reward_eval.json` (recipes/stages/rl_eval.py): the RM score of the initial and the trained
  policy's completions on the same fixed prompts, paired — the evidence that the reward rose;
- RL and IPO: the Trainer's `log_history` in the most advanced `trainer_state.json` of the model
  directory (its root or a `checkpoint-<step>`); RLOO logs `reward` (the reward model's score),
  `reward_std` (its spread within a step) and `kl` (mean per-token KL to the reference), and so does the
  RL stage's PPO (its own figures under `ppo/`); DPOTrainer with
  loss_type="ipo" logs `rewards/accuracies` and `rewards/margins`, and every preference trainer `logps/chosen`
  and `logps/rejected`;
- preference stages: `models/<PREF>/preference_eval.json` (recipes/stages/preference_eval.py), the fit to its pairs
  measured the same way for every objective.
A run made before a figure existed simply lacks it; a finding then names it as missing evidence.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from memlens.harness.core.layout import TRAINER_STATE, checkpoint_dirs
from memlens.harness.core.objectives import PREFERENCE_STAGE, is_preference_stage, recorded_objective
from memlens.harness.report.analyses import checkpoint_step

EDGE_SHARE = 0.1  # "first" and "last" steps: the first and last 10 % of logged training steps


def log_history(model_dir: str | Path) -> list[dict]:
    """The training log of the most advanced trainer_state.json under a model directory ([] if none)."""
    model_dir = Path(model_dir)
    best: tuple[float, list[dict]] = (-1.0, [])
    for path in [model_dir / TRAINER_STATE, *(p / TRAINER_STATE for p in checkpoint_dirs(model_dir).values())]:
        if not path.is_file():
            continue
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a torn checkpoint: another file carries the log
        step = float(state.get("global_step") or 0)
        if path.parent != model_dir:
            step = max(step, checkpoint_step(path.parent.name))
        if step > best[0]:
            best = (step, list(state.get("log_history") or []))
    return best[1]


def _edges(values: list[float]) -> tuple[list[float], list[float]]:
    width = max(1, math.ceil(EDGE_SHARE * len(values)))
    return values[:width], values[-width:]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def rl_evidence(history: list[dict]) -> dict[str, Any]:
    """Reward change from the first to the last 10 % of logged steps, in units of the first steps'
    within-step reward spread, and the final mean per-token KL to the reference (issue-level goal of the
    embedded default: reward rises by >= 0.5 of that spread; KL grows as α falls)."""
    logged = [h for h in history if "reward" in h and "loss" in h]
    if not logged:
        return {}
    first, last = _edges([float(h["reward"]) for h in logged])
    first_std = _edges([float(h.get("reward_std") or 0.0) for h in logged])[0]
    out = {"steps_logged": len(logged), "reward_first": _mean(first), "reward_last": _mean(last),
           "reward_std_first": _mean(first_std)}
    out["reward_change"] = out["reward_last"] - out["reward_first"]
    out["reward_change_in_std"] = (out["reward_change"] / out["reward_std_first"]
                                   if out["reward_std_first"] > 0 else None)
    kls = [float(h["kl"]) for h in logged if "kl" in h]
    out["kl_final"] = _mean(_edges(kls)[1]) if kls else None
    return out


def rl_eval_evidence(model_dir: str | Path) -> dict[str, Any]:
    """The fixed-prompt reward change of an RL model (recipes/stages/rl_eval.py), {} when it has none."""
    path = Path(model_dir) / "reward_eval.json"
    if not path.is_file():
        return {}
    record = json.loads(path.read_text(encoding="utf-8"))
    return {"eval_prompts": record.get("n_prompts"), "eval_reward_initial": record.get("mean_initial"),
            "eval_reward_final": record.get("mean_final"), "eval_change": record.get("change"),
            "eval_change_ci95": record.get("change_ci95"), "eval_change_in_sd": record.get("change_in_sd"),
            "eval_up": record.get("up"), "eval_down": record.get("down"), "eval_p_value": record.get("p_value")}


def preference_eval_evidence(model_dir: str | Path) -> dict[str, Any]:
    """A preference stage's fit to its pairs, measured the same way for every objective (recipes/stages/preference_eval.py:
    the implicit-reward accuracy with the initial model as the reference, and the mean change of the chosen and the
    rejected completions' summed log-probability), {} when it has none."""
    path = Path(model_dir) / "preference_eval.json"
    if not path.is_file():
        return {}
    record = json.loads(path.read_text(encoding="utf-8"))
    return {"pair_n": record.get("n_pairs"), "pair_accuracy": record.get("accuracy"),
            "pair_accuracy_ci95": record.get("accuracy_ci95"), "pair_chosen_change": record.get("chosen_change"),
            "pair_rejected_change": record.get("rejected_change"), "pair_p_value": record.get("p_value")}


def ipo_evidence(history: list[dict]) -> dict[str, Any]:
    """IPO's preference accuracy and reward margin over the last 10 % of logged steps (and the first)."""
    logged = [h for h in history if ("rewards/accuracies" in h or "rewards/margins" in h) and "loss" in h]
    if not logged:
        return {}
    out: dict[str, Any] = {"steps_logged": len(logged)}
    accuracies = [float(h["rewards/accuracies"]) for h in logged if "rewards/accuracies" in h]
    if accuracies:      # KTOTrainer logs none: its rows are unpaired
        first, last = _edges(accuracies)
        out.update(accuracy_first=_mean(first), accuracy_final=_mean(last))
    margins = _edges([float(h.get("rewards/margins") or 0.0) for h in logged])
    losses = _edges([float(h["loss"]) for h in logged])
    out.update(margin_final=_mean(margins[1]), loss_first=_mean(losses[0]), loss_final=_mean(losses[1]))
    # The likelihood trajectory every preference trainer logs (DPO and KTO: summed log-probs; CPO's SimPO loss
    # and ORPO: per-token averages), first and last 10 % of steps.
    for side in ("chosen", "rejected"):
        values = [float(h[f"logps/{side}"]) for h in logged if f"logps/{side}" in h]
        if values:
            first, last = _edges(values)
            out[f"logps_{side}_first"], out[f"logps_{side}_final"] = _mean(first), _mean(last)
    return out


def rm_evidence(model_dir: str | Path, scores_dir: str = "scores") -> dict[str, Any]:
    """{dataset: {"auc", "split"}} from the reward model's scores/summary.json ({} if it has none); with
    `scores_dir="reward_function"`, an RL stage's verifiable reward's ranking of its held-out rows (recipes/stages/rl.py)."""
    path = Path(model_dir) / scores_dir / "summary.json"
    if not path.is_file():
        return {}
    summary = json.loads(path.read_text(encoding="utf-8"))
    return {name: {"auc": entry.get("auc"), "split": entry.get("split"), "n": entry.get("n")}
            for name, entry in summary.items()}


def utility_evidence(utility: dict[str, dict], model: str, init: str | None) -> dict[str, Any]:
    """An RL model's held-out public-code loss (pd_eval, harness/measures/utility.py) and its init model's: a policy
    that collapsed onto the reward model's favourite output loses the code it could write."""
    loss = (utility.get(model) or {}).get("pd_eval_loss")
    init_loss = (utility.get(init) or {}).get("pd_eval_loss") if init else None
    return {"pd_eval_loss": loss, "init_pd_eval_loss": init_loss}


def stage_evidence(models_dir: str | Path, provenance: dict[str, dict],
                   utility: dict[str, dict] | None = None) -> dict[str, dict]:
    """{model name: evidence} for every reward, RL and IPO model of a run, by the stage its provenance
    names (`reward`, `rl`, `ipo`); `utility` is the audit's utility record ({model: {pd_eval_loss, ...}})."""
    models_dir = Path(models_dir)
    out: dict[str, dict] = {}
    for name, prov in sorted(provenance.items()):
        stage, model_dir = prov.get("stage"), models_dir / name
        if stage == "reward":
            out[name] = {"stage": stage, "auc": rm_evidence(model_dir)}
        elif stage == "rl":
            init = Path(prov["init_model"]).name if prov.get("init_model") else None
            function = prov.get("reward_function")
            out[name] = {"stage": stage, "beta": (prov.get("settings") or {}).get("beta"),
                         "reward_model": Path(prov["reward_model"]).name if prov.get("reward_model") else None,
                         "reward_function": function,
                         **({"reward_auc": rm_evidence(model_dir, "reward_function")} if function else {}),
                         "init_model": init, **utility_evidence(utility or {}, name, init),
                         **rl_evidence(log_history(model_dir)), **rl_eval_evidence(model_dir)}
        elif is_preference_stage(stage):
            out[name] = {"stage": PREFERENCE_STAGE, "objective": recorded_objective(prov.get("hyperparameters") or {}),
                         **ipo_evidence(log_history(model_dir)), **preference_eval_evidence(model_dir)}
    return out
