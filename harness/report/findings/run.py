"""What a finding may read: which model plays each part (`Roles`), a run's stored results (`RunResults`), its
loss rows (`load_loss_rows`), and the per-example flags and rates the findings count."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_jsonl
from memlens.harness.core.stats import rate_with_interval
from memlens.harness.measures.memorization import pii_counterfactually_regurgitated, pii_rows
from memlens.harness.report import analyses as A

PAPER_RL_ALGORITHM = "rloo"  # App. A.3: "a variant of REINFORCE with a KL regularization term" (TRL's RLOO)


@dataclass(frozen=True)
class Roles:
    """Which model of a run plays each part of paper 003's findings. The defaults are the paper's Table 1
    names, which the quickstart and findings experiments keep; an experiment that names its stages otherwise
    maps them under `report.findings_models` (conf/report/default.yaml), e.g. {ft_direct: FT.sd}."""

    ft_source: str = "FT.1"        # FT on PD.1 + SD: the start of the persistence sweep (Sec. 5.1)
    ft_direct: str = "FT.3"        # FT on PD.2 + SD: SD in the fine-tuning data (Sec. 5.2)
    rm_task: str = "RM.1"          # the sweep's reward model, if an RL model's evidence does not name it
    rm_sd: str = "RM.3"            # the reward model with SD in its data, likewise (Sec. 5.2)
    rl_persistence: str = "RLFT.1"  # RL from ft_source, swept over α (Sec. 5.1, Fig. 1)
    rl_sd_in_rm: str = "RLFT.2"    # RL from the control, rewarded by rm_sd (Sec. 5.2)
    rl_prompts: str = "RLFT.4"     # RL on SD prompts, swept over α and LR (Sec. 5.3, App. E)
    ipo: str = "IPO"               # IPO on SD preference pairs (Sec. 5.4)
    preference: str = "PREF"       # the preference stage swept over objectives, one point each (P1-P3)
    rlvr_persistence: str = "RLVR.1"  # rl_persistence's stage under a verifiable reward (V4, V5)
    rlvr_prompts: str = "RLVR.4"   # rl_prompts' stage under a verifiable reward (V6, V7)

    @classmethod
    def load(cls, mapping: dict | None) -> Roles:
        """Roles from `report.findings_models`; an unknown role is an error naming the valid ones."""
        mapping = dict(mapping or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(mapping) - set(valid))
        if unknown:
            raise UserError(f"report.findings_models: unknown role(s) {unknown}; use {', '.join(valid)} "
                            "(each maps to a model name of the run, e.g. ft_direct: FT.3)")
        bad = sorted(k for k, v in mapping.items() if not isinstance(v, str) or not v)
        if bad:
            raise UserError(f"report.findings_models: {bad} must each name one model of the run (a string)")
        return cls(**mapping)


@dataclass
class RunResults:
    """What a finding may read: stored audit rows, the stage evidence, loss rows, the NMT summary, and the
    membership-inference, probabilistic-extraction and ε results of the measures that ran."""

    grouped: dict[A.Key, list[dict]]
    evidence: dict[str, dict] = field(default_factory=dict)
    loss_rows: list[dict] = field(default_factory=list)
    nmt: dict | None = None
    k: float = 0.1
    roles: Roles = field(default_factory=Roles)
    mia: dict = field(default_factory=dict)     # {model: membership-inference summary} (harness/audit/mia.py)
    discoverable: dict = field(default_factory=dict)   # {model: probabilistic extraction} (analyses.load_discoverable)
    epsilon: dict = field(default_factory=dict)   # {model: one-run ε summary} (harness/audit/epsilon.py)
    pair_mia: dict = field(default_factory=dict)  # {model: preference-pair membership} (harness/audit/preference_mia.py)
    prompt_mia: dict = field(default_factory=dict)  # {model: RL-prompt membership} (harness/audit/prompt_mia.py)

    def __post_init__(self):
        self.entries = A.summary_entries(self.grouped)
        self._final = {(e["model"], e["dataset"]): e["checkpoint"] for e in A.final_entries(self.entries)}

    def rows(self, model: str, dataset: str) -> list[dict] | None:
        """The final checkpoint's rows of a model on a dataset (None when not audited)."""
        checkpoint = self._final.get((model, dataset))
        return None if checkpoint is None else self.grouped[(model, checkpoint, dataset)]

    def sweep(self, base: str, dataset: str) -> list[tuple[dict, str]]:
        """[(sweep point, model name)] of a swept model audited on a dataset. When the sweep runs several RL
        algorithms (`algorithm=rloo,ppo`), only the paper's is judged (PAPER_RL_ALGORITHM); the report's sweep
        figures show the others beside it."""
        out = []
        for model, d in self._final:
            name, point = A.parse_sweep_point(model)
            if name == base and d == dataset and point \
                    and point.get("algorithm", PAPER_RL_ALGORITHM) == PAPER_RL_ALGORITHM:
                out.append((point, model))
        return out


# ---------------------------------------------------------------- per-example flags and rates
def memorized_flags(rows: list[dict]) -> dict:
    """{id: memorized} over scored (not excluded) rows: the rate's own denominator."""
    return {r["id"]: bool(r["memorized"]) for r in rows if r["excluded"] is None}


def within_k_flags(rows: list[dict], k: float, side: str) -> dict:
    """{id: NED <= k} of the audited model (`ned`) or the control (`control_ned`) over scored rows."""
    return {r["id"]: r[side] <= k for r in rows if r["excluded"] is None}


def pii_flags(rows: list[dict]) -> dict:
    """{id: counterfactual PII regurgitation} over scored SD.Links positives (memlens.harness.measures.memorization)."""
    return {r["id"]: pii_counterfactually_regurgitated(r) for r in pii_rows(rows)}


def _rate(name: str, flags: dict) -> dict:
    return {"name": name, **rate_with_interval(sum(flags.values()), len(flags))}


def load_loss_rows(audit_dir: Path) -> list[dict]:
    """Per-string loss rows of a run's loss audit (<audit dir>/losses/<model>/<dataset>.jsonl), tagged with the
    model and dataset they belong to and whether that dataset is the held-out set (summary.json
    `heldout`: its strings were never trained on, so paper 004's measures do not apply to them)."""
    rows = []
    losses = Path(audit_dir) / "losses"
    for path in sorted(losses.rglob("*.jsonl")):
        if path.name.endswith(".exposure.jsonl"):
            continue
        summary = path.parent / "summary.json"
        heldout = json.loads(summary.read_text(encoding="utf-8")).get("heldout") if summary.is_file() else None
        model = str(path.parent.relative_to(losses))
        rows += [{"model": model, "dataset": path.stem, "heldout": path.stem == heldout, **r}
                 for r in read_jsonl(path)]
    return rows
