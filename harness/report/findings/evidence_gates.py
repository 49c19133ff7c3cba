"""The training evidence a finding gates on: what "the stage trained" means, as thresholds, and the checks that
compare a run's evidence (harness/report/evidence.py) with them. A failed or missing check makes a finding
`inconclusive` (verdict.finding_result)."""

from __future__ import annotations

from memlens.harness.core.objectives import PREFERENCE_STAGE
from memlens.harness.report.findings.run import RunResults
from memlens.harness.report.findings.verdict import P_MAX, _check

# Training-evidence thresholds (what "the stage trained" means; stated so a reader can disagree).
RM_SD_AUC_MIN = 0.8          # the reward model learned SD: AUC on its SD training rows (Fig. 2 premise)
RM_HELDOUT_AUC_MIN = 0.75    # the reward model behind an RL sweep ranks held-out rows of its task (its
                             # eval_datasets) well enough that rising reward means better code, not noise
RL_REWARD_RISE_MIN = 0.5     # RL optimised: on fixed prompts (recipes/stages/rl_eval.py) the trained policy's mean RM
                             # score exceeds the initial policy's by >= 0.5 x the initial spread across prompts,
                             # and more prompts rise than fall (sign test p < P_MAX). Not the training log's
                             # first vs last steps: those draw different prompts, and the reward follows them
RL_UTILITY_LOSS_MAX = 0.5    # RL kept its init model's code: held-out public-code loss (pd_eval, audit utility) rises
                             # by at most 0.5 nats/token (paper 003 Table 2: the RLHF models keep their utility). A
                             # policy that collapsed onto one string the reward model likes (measured: greedy "eg"
                             # for every SD prompt, loss 4.44 -> 6.75) memorizes nothing, and that says nothing
RL_DISTINCT_SHARE_MIN = 0.5  # ... nor onto a few completions: on the rows a finding scores, the RL policy's distinct
                             # greedy completions number at least half its control's. Measured on RLFT.2 probes
                             # (quickstart seeds 0-3): RL points that kept their code 0.74-1.7, collapsed ones
                             # 0.03-0.42, one of them (1 distinct completion of 41) within RL_UTILITY_LOSS_MAX
RL_KL_MIN = 0.01             # RL moved: final mean per-token KL to the reference (nats) at the smallest α
IPO_ACCURACY_MIN = 0.9       # IPO fit its pairs: training preference accuracy over the last 10 % of steps
PAIR_ACCURACY_MIN = 0.9      # a preference objective fit its pairs: after training, the share of its training pairs
                             # whose chosen completion gained more summed log-probability over the initial model than
                             # the rejected one (recipes/stages/preference_eval.py; DPOTrainer's accuracy with the initial
                             # model as the reference), measured the same way for every objective; IPO's threshold
MIA_DETECTABLE_AUC = 0.6     # "detectable": the best attack's AUC on members vs held-out canaries above this (a
                             # common bar for a weak but real attack; 0.5 is chance)
NOT_EXTRACTABLE_MAX = 0.05   # "not extractable": the final extraction (memorization) rate below 5 %
SOURCE_MEMORIZED_MIN = 5     # a persistence share needs at least this many examples memorized before RL
SD_REWARD_DATASETS = ("rm_sd", "rm_sd_links")   # the reward sets built from SD (synthetic_data/build.py)


# ---------------------------------------------------------------- evidence checks
def rl_checks(run: RunResults, models: list[str], dataset: str) -> list[dict]:
    """Every RL point's reward rose on fixed prompts (by RL_REWARD_RISE_MIN of the initial spread, beyond noise)
    and its policy did not collapse to get there (RL_UTILITY_LOSS_MAX, RL_DISTINCT_SHARE_MIN on `dataset`, the
    rows the finding scores)."""
    checks = []
    for model in models:
        ev = run.evidence.get(model, {})
        rise, p = ev.get("eval_change_in_sd"), ev.get("eval_p_value")
        checks.append(_check(f"{model}: reward rise on fixed prompts (in initial sd)", rise,
                             f">= {RL_REWARD_RISE_MIN}", rise is not None and rise >= RL_REWARD_RISE_MIN))
        checks.append(_check(f"{model}: prompts whose reward rose vs fell (sign test p)", p, f"< {P_MAX}",
                             p is not None and p < P_MAX and (ev.get("eval_up") or 0) > (ev.get("eval_down") or 0)))
        checks.append(rl_utility_check(run, model))
        checks.append(rl_diversity_check(run, model, dataset))
    return checks


def rl_utility_check(run: RunResults, model: str) -> dict:
    """The RL policy still writes code: its held-out code loss is within RL_UTILITY_LOSS_MAX of its init's."""
    ev = run.evidence.get(model, {})
    loss, init_loss = ev.get("pd_eval_loss"), ev.get("init_pd_eval_loss")
    rise = None if loss is None or init_loss is None else loss - init_loss
    return _check(f"{model}: held-out code loss rise over {ev.get('init_model') or 'its init'} (nats/token)", rise,
                  f"<= {RL_UTILITY_LOSS_MAX}", rise is not None and rise <= RL_UTILITY_LOSS_MAX)


def distinct_completion_share(rows: list[dict]) -> float | None:
    """Distinct greedy completions of the audited model over those of its control, on the same scored rows
    (None without rows or control completions): 1 when the model varies its answers as much as the control."""
    scored = [r for r in rows if r["excluded"] is None]
    control = {r.get("control_completion") for r in scored} - {None}
    return len({r.get("completion") for r in scored}) / len(control) if control else None


def rl_diversity_check(run: RunResults, model: str, dataset: str) -> dict:
    """The RL policy still answers each prompt its own way: a policy that says the same thing to every prompt
    memorizes nothing, whatever SD it saw."""
    rows = run.rows(model, dataset)
    share = None if rows is None else distinct_completion_share(rows)
    return _check(f"{model}: distinct greedy completions on {dataset} / its control's", share,
                  f">= {RL_DISTINCT_SHARE_MIN}", share is not None and share >= RL_DISTINCT_SHARE_MIN)


def kl_check(run: RunResults, model: str) -> dict:
    kl = run.evidence.get(model, {}).get("kl_final")
    return _check(f"{model}: final KL to the reference (nats/token)", kl, f">= {RL_KL_MIN}",
                  kl is not None and kl >= RL_KL_MIN)


def rm_sd_check(run: RunResults, rl_model: str) -> dict:
    """The reward model behind an RL model learned SD: AUC on its SD training rows."""
    rm = run.evidence.get(rl_model, {}).get("reward_model") or run.roles.rm_sd
    aucs = [v["auc"] for name, v in run.evidence.get(rm, {}).get("auc", {}).items()
            if name in SD_REWARD_DATASETS and v.get("split") == "train" and v.get("auc") is not None]
    auc = min(aucs) if aucs else None
    return _check(f"{rm}: AUC on its SD training rows", auc, f">= {RM_SD_AUC_MIN}",
                  auc is not None and auc >= RM_SD_AUC_MIN)


def rm_heldout_check(run: RunResults, rl_model: str) -> dict:
    """The reward behind an RL model generalises: its AUC on held-out (eval) rows. The reward model's, or, for a
    verifiable reward (`reward_function` in the RL model's evidence), the function's ranking of the held-out rows
    the RL stage scored with it: it plays the reward model's part, so it gets the same check."""
    ev = run.evidence.get(rl_model, {})
    if ev.get("reward_function"):
        source, scored = f"{rl_model}'s reward function {ev['reward_function']}", ev.get("reward_auc") or {}
    else:
        source = ev.get("reward_model") or run.roles.rm_task
        scored = run.evidence.get(source, {}).get("auc", {})
    aucs = [v["auc"] for v in scored.values() if v.get("split") == "eval" and v.get("auc") is not None]
    auc = min(aucs) if aucs else None
    return _check(f"{source}: AUC on its held-out rows", auc, f">= {RM_HELDOUT_AUC_MIN}",
                  auc is not None and auc >= RM_HELDOUT_AUC_MIN)


def ipo_check(run: RunResults) -> dict:
    model = run.roles.ipo
    acc = run.evidence.get(model, {}).get("accuracy_final")
    return _check(f"{model}: training preference accuracy", acc, f">= {IPO_ACCURACY_MIN}",
                  acc is not None and acc >= IPO_ACCURACY_MIN)


def pair_check(run: RunResults, model: str) -> dict:
    """A preference model fit its pairs (PAIR_ACCURACY_MIN), whatever its objective."""
    ev = run.evidence.get(model, {})
    acc = ev.get("pair_accuracy")
    return _check(f"{model} ({ev.get('objective') or 'objective?'}): preference accuracy on its pairs vs the initial "
                  "model", acc, f">= {PAIR_ACCURACY_MIN}", acc is not None and acc >= PAIR_ACCURACY_MIN)


def method_checks(run: RunResults, model: str, dataset: str) -> list[dict]:
    """The training evidence of any one model, by its stage, for the report's comparison of methods: an RL point's
    reward rose without collapse (rl_checks; under a verifiable reward also the function's held-out ranking), a
    preference model fit its pairs (pair_check, or for a run made before that measurement IPO's training accuracy).
    [] for a stage without such a check (fine-tuning: its memorization is the measurement)."""
    ev = run.evidence.get(model, {})
    if ev.get("stage") == "rl":
        return ([rm_heldout_check(run, model)] if ev.get("reward_function") else []) + rl_checks(run, [model], dataset)
    if ev.get("stage") == PREFERENCE_STAGE:
        if "pair_accuracy" in ev or "accuracy_final" not in ev:
            return [pair_check(run, model)]
        acc = ev["accuracy_final"]
        return [_check(f"{model}: training preference accuracy", acc, f">= {IPO_ACCURACY_MIN}",
                       acc is not None and acc >= IPO_ACCURACY_MIN)]
    return []


def count_check(check: str, count: int, minimum: int) -> dict:
    return _check(check, count, f">= {minimum}", count >= minimum)


# The evidence of the RL stage rewarded by the reward model with SD in its data (role rl_sd_in_rm): F2, F3, F8, M1.
def _rlft2_evidence(run: RunResults, dataset: str = "sd_base") -> list[dict]:
    rl = run.roles.rl_sd_in_rm
    return [rm_sd_check(run, rl), *rl_checks(run, [rl], dataset), kl_check(run, rl)]
