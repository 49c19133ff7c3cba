"""An example plugin: a lab's training stage, preference objective, verifiable reward, membership-inference attack,
audit measure and finding, each registered as docs/architecture.md says. Name it in the config and every command sees
them, e.g.

    memlens run experiment=smoke plugins=[examples/lab_plugin.py] stages.IPO.objective=hinge_po \
        '+stages.AVG={recipe: average, init: IPO, checkpoints: 2}'

tests/integration/test_plugins.py runs the like of that on the smoke run's PT (IPO with the objective, AVG after it,
an RL stage rewarded by balanced_brackets), then `memlens audit` with `audit.measures=[ned,mia,row_count]` and
`memlens report`, each a fresh process."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, read_json, read_jsonl
from memlens.harness.core.layout import whole_checkpoints
from memlens.harness.core.objectives import OBJECTIVES, Objective
from memlens.harness.measures.mia import ATTACKS, Attack
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.verdict import finding_result
from memlens.recipes.stages.contract import StageContext, StageSettings, run_recipe
from memlens.recipes.stages.registry import STAGES, StageRecipe
from memlens.recipes.stages.verifiable_rewards import REWARD_FUNCTIONS, RewardFunction


# A training stage: the average of a stage's last checkpoints and its final model (checkpoint averaging, as in
# "model soups" and SWA), to ask whether averaging changes what the averaged stage memorized.
@dataclass
class AverageSettings(StageSettings):
    """`stages.<NAME>` keys of a `recipe: average` stage."""

    init: str = ""          # the stage whose checkpoints are averaged (a stage name or a model directory)
    checkpoints: int = 2    # the last N whole checkpoints, averaged with the final model

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        self.require(bool(self.init), "init", "name the stage whose checkpoints to average, e.g. IPO")
        self.require(self.checkpoints >= 1, "checkpoints", "average at least one checkpoint with the final model")
        self.resolve_model(where)


def load_settings(settings: dict, stage: str) -> AverageSettings:
    return AverageSettings.load(settings, stage)


MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.json", "merges.txt")


class AverageRecipe:
    """setup -> train (average) -> save for one `average` stage (run_recipe drives it)."""

    stage = "average"

    def __init__(self, cfg: AverageSettings, ctx: StageContext):
        self.cfg, self.ctx = cfg, ctx

    def setup(self) -> None:
        self.init_dir = self.ctx.model_dir(self.cfg.init)
        whole = whole_checkpoints(self.init_dir)
        self.sources = [whole[step] for step in sorted(whole)[-self.cfg.checkpoints:]] + [self.init_dir]
        missing = [str(d) for d in self.sources if not (d / "model.safetensors").is_file()]
        if missing:
            raise UserError(f"stages.{self.ctx.name}.init={self.cfg.init}: {missing} hold no whole model.safetensors "
                            "(a LoRA stage's checkpoints hold adapters); average a stage trained without LoRA")

    def train(self) -> None:
        from safetensors.torch import load_file  # torch: only when the stage trains

        states = [load_file(str(d / "model.safetensors")) for d in self.sources]
        self.average = {k: (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype)
                        for k in states[0]}

    def save(self) -> None:
        from safetensors.torch import save_file  # torch: only when the stage trains

        out = self.ctx.out_dir
        out.mkdir(parents=True, exist_ok=True)
        for name in MODEL_FILES:
            if (self.init_dir / name).is_file():
                shutil.copy2(self.init_dir / name, out / name)
        save_file(self.average, str(out / "model.safetensors"), metadata={"format": "pt"})

    def evaluate(self) -> None:
        pass

    def provenance(self) -> dict:
        return {"datasets": [], "init_model": str(self.init_dir), "averaged": [str(d) for d in self.sources]}


def run_stage(settings: AverageSettings, ctx: StageContext) -> None:
    run_recipe(AverageRecipe, settings, ctx)


STAGES.register("average", StageRecipe(__name__, "the average of a stage's last checkpoints and its final model"))

# A preference objective on TRL's DPOTrainer: the hinge loss of SLiC (DPOConfig loss_type="hinge").
OBJECTIVES.register("hinge_po", Objective("Hinge-PO", "dpo", reference=True, nll=False, beta=0.1,
                                          loss_type=("hinge",)))


# A verifiable reward: 1 when the filled-in program's brackets balance, else 0 (it reads the text, runs nothing).
PAIRS = {")": "(", "]": "[", "}": "{"}


def balanced_brackets(completion: str, prefix: str, suffix: str, **_) -> float:
    stack = []
    for char in prefix + completion + suffix:
        if char in "([{":
            stack.append(char)
        elif char in PAIRS and (not stack or stack.pop() != PAIRS[char]):
            return 0.0
    return 0.0 if stack else 1.0


REWARD_FUNCTIONS.register("balanced_brackets", RewardFunction(balanced_brackets))

# An attack: shorter targets score higher (a length baseline).
ATTACKS.register("target_length", Attack("target length", lambda x: -float(len(x.text))))


def count_rows(cfg, log=print):
    """The number of rows of every dataset the audit plan names."""
    names = sorted({d for entry in cfg.audit_plan for d in entry.get("datasets") or []})
    counts = {d: len(read_jsonl(Path(cfg.run_dir) / "data" / d / "rows.jsonl")) for d in names}
    atomic_write_json(Path(cfg.audit.out_dir) / "row_count.json", counts)


def row_count_table(audit_dir):
    path = Path(audit_dir) / "row_count.json"
    if not path.is_file():
        return None
    return ["dataset", "rows"], [{"dataset": d, "rows": n} for d, n in read_json(path).items()]


MEASURES.register("row_count", Measure("Rows per dataset", count_rows, report_rows=row_count_table))


def ipo_audited(run):
    rows = run.rows("IPO", "sd_base")
    return finding_result("X1", "the preference model's final checkpoint was audited on SD.Base", "a lab's plugin",
                          "rows > 0", ["IPO"], measured=rows is not None, rule_ok=bool(rows),
                          ours=f"{len(rows or [])} rows")


register(Finding("X1", "a lab's plugin", "the preference model was audited", ipo_audited,
                 measured_by="plugins=[examples/lab_plugin.py]"))
