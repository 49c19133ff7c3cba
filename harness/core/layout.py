"""The on-disk layout of a run — the one place that knows where things live under `runs/<experiment>/`.

```
runs/<experiment>/
  run.json                          the resolved config, git commit, package versions (recipes/orchestration/pipeline.py)
  data/<dataset>/                   rows.jsonl + manifest.json (synthetic_data/)
  models/<NAME>/                    the final model at the root, checkpoint-<step>/ dirs, provenance.json last,
                                    train_log.jsonl (every logged training step; tensorboard/ when asked)
  audit/                            NED rows, summary, utility, losses/, mia/, epsilon/, cache/ (audit.out_dir
                                    overrides it)
  cache/rl_reward_eval/             the initial policy's fixed-prompt RL rewards (recipes/stages/rl_eval.py)
  report/                           report.md/html, summary.json, figures/ (report.out_dir overrides it)
  stale/                            what a retrained stage replaced: <model>-<time>/ (with its audit/ rows and
                                    the report/ that showed them), audit-<time>/ (rows of replaced models)
  .memlens.lock                    held by the command writing the run (harness/core/lock.py; also in audit/,
                                    report/ and any audit.out_dir while a command writes them); shared by the
                                    `memlens train` commands of one run, each holding its model exclusively
  .locks/models/<NAME>/             that model's lock (a training holds it exclusively, a training that starts
                                    from the model holds it shared)
```

A stage directory with `provenance.json` is finished; anything else is resumable work. Checkpoints are the
directories transformers' Trainer names `checkpoint-<step>` (our PPO trainer writes the same names).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json

RUN_RECORD = "run.json"
PROVENANCE_FILE = "provenance.json"      # written last by every stage: the finished marker
TRAINER_STATE = "trainer_state.json"     # written last into a checkpoint by the Trainer: a whole checkpoint
TRAIN_LOG = "train_log.jsonl"            # a stage's logged training steps (memlens.recipes.stages.training_log.TrainLog)
TENSORBOARD_DIR = "tensorboard"          # a stage's TensorBoard event files, only with `tensorboard=true`
CHECKPOINT_PREFIX = "checkpoint-"
STALE = "stale"                          # <run_dir>/stale/: what a retrained stage replaced (recipes/orchestration/pipeline.py)
NAME_RULE = "no /, \\ or .., not empty, no control characters"


def stale_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / STALE


# --- names that become path parts ------------------------------------------------------------------------
# Model, dataset and stage names are joined into paths below a run or an audit out_dir; a name holding a
# separator or `..` would write elsewhere, so each is checked where it enters (config key, plan entry).

def is_name(text: str) -> bool:
    """One file or directory name: not empty, not `.` or `..`, no separator, no control character."""
    return (bool(text) and text not in (".", "..") and "/" not in text and "\\" not in text
            and not any(ord(c) < 32 or ord(c) == 127 for c in text))


def check_name(value: Any, key: str) -> str:
    """`value` of config key `key` as a name; a UserError naming the key otherwise."""
    text = str(value)
    if not is_name(text):
        raise UserError(f"{key}={text!r}: must be a name ({NAME_RULE}), since it becomes a directory or file "
                        f"name of the results; pass {key}=<a plain name>")
    return text


def check_listed_name(value: Any, where: str) -> str:
    """A name listed under `where` (e.g. `audit_plan[0].datasets`)."""
    text = str(value)
    if not is_name(text):
        raise UserError(f"{where}: {text!r} is not a name ({NAME_RULE}); it names a directory of the run, "
                        "so give the plain name (e.g. sd_base)")
    return text


def check_model_name(value: Any, where: str) -> str:
    """A model name under models/: names joined by `/` (a sweep point, `RLFT.1/beta=0.1`), each a name."""
    text = str(value)
    if not text or not all(is_name(part) for part in text.split("/")):
        raise UserError(f"{where}: model directory {text} (from the stage name and its sweep values) is not a "
                        f"name: each part between / must be a name ({NAME_RULE}); change that name or value")
    return text


def require_inside(path: str | Path, root: str | Path, key: str) -> Path:
    """`path` if it lies inside `root` (symlinks resolved): every path a command writes is proven so."""
    path, base = Path(path), Path(root)
    real, real_base = Path(os.path.realpath(path)), Path(os.path.realpath(base))
    if real != real_base and real_base not in real.parents:
        raise UserError(f"{path}: would be written outside {key}={base}; check the names that form it")
    return path


def models_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "models"


LOCKS = ".locks"     # <run_dir>/.locks/models/<NAME>/, .locks/data/<NAME>/: a model's, a dataset's lock (core/lock.py)


def model_lock_dir(run_dir: str | Path, model_name: str) -> Path:
    """Where `memlens train` locks one model: outside its directory, which a retraining moves to stale/."""
    return Path(run_dir) / LOCKS / "models" / model_name


def dataset_lock_dir(run_dir: str | Path, dataset: str) -> Path:
    """Where a launcher's driver locks one dataset it builds while jobs read the others (the late data)."""
    return Path(run_dir) / LOCKS / "data" / dataset


def datasets_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "data"


def data_dir(run_dir: str | Path, dataset: str) -> Path:
    return datasets_dir(run_dir) / dataset


DATASET_ROWS = "rows.jsonl"              # <run_dir>/data/<dataset>/rows.jsonl: what the stages train on and the audit scores
DATASET_MANIFEST = "manifest.json"       # ... its manifest: count, sha256 of rows.jsonl, seed, generator version


MIA_SUBDIR = "mia"                       # <audit dir>/mia/<model>/<checkpoint>/<dataset>.jsonl + summaries
MIA_SUMMARY = "summary.json"
DISCOVERABLE_SUBDIR = "discoverable"     # <audit dir>/discoverable/<model>/<checkpoint>/<dataset>.jsonl + summary
CANARIES = "canaries"   # memlens.AuditCallback: the planted canaries' dataset name, and <out_dir>/canaries/ (manifest)
CANARY_EXPOSURE_SUBDIR = "exposure"      # <audit dir>/exposure/<model>/<checkpoint>.jsonl + summary (the training callback)
REWARD_RANKING_SUBDIR = "reward"         # <audit dir>/reward/<model>/summary.json (the training callback, a reward model)
EPSILON_SUBDIR = "epsilon"               # <audit dir>/epsilon/<model>/summary.json (harness/audit/epsilon.py)
HELDOUT_SUFFIX = "_heldout"              # <dataset>_heldout: the never-trained-on partner of a canary dataset
HELDOUT_BUILT = ("sd_base_heldout", "sd_links_heldout", "sd_links_pos_heldout")   # what synthetic_data builds
# The never-trained-on partners of the SD preference pairs: pairs built the same way from the held-out programs
# (harness/audit/preference_mia.py scores a preference stage's pairs against them)
PAIR_HELDOUT_BUILT = ("pairs_sd_base_heldout", "pairs_sd_links_heldout")


def heldout_dataset(dataset: str) -> str:
    """The held-out (non-member) partner of a canary dataset: sd_base -> sd_base_heldout."""
    return f"{dataset}{HELDOUT_SUFFIX}"


# The RL-prompt split (paper 003 Sec. 5.3) counts its 50 + 50 tokens in the tokenizer the pre-training stage trains,
# so it and its held-out twin are the late data: built once that stage has trained (synthetic_data/rl_prompts.py).
RL_PROMPTS = "sd_rl_prompts"
RL_PROMPTS_HELDOUT = heldout_dataset(RL_PROMPTS)
LATE_DATASETS = (RL_PROMPTS, RL_PROMPTS_HELDOUT)


def mia_dir(audit_dir: str | Path, model_name: str | None = None) -> Path:
    """Membership-inference results below an audit dir (one model's when `model_name` is given)."""
    root = Path(audit_dir) / MIA_SUBDIR
    return root / model_name if model_name else root


PAIR_MIA_SUBDIR = "pair_mia"             # <audit dir>/pair_mia/<model>/<checkpoint>/<dataset>.jsonl + summaries


def pair_mia_dir(audit_dir: str | Path, model_name: str | None = None) -> Path:
    """Preference-pair membership results below an audit dir (one model's when `model_name` is given)."""
    root = Path(audit_dir) / PAIR_MIA_SUBDIR
    return root / model_name if model_name else root


PROMPT_MIA_SUBDIR = "prompt_mia"         # <audit dir>/prompt_mia/<model>/<checkpoint>/<dataset>.jsonl + summaries
# The never-trained-on partner of each RL prompt dataset (harness/audit/prompt_mia.py): the SD programs' held-out
# twins, and for public code the RL-prompt validation split (pd_3_val: files no stage trains on, split as pd_3 is).
# sd_rl_prompts_heldout: the held-out SD programs cut into RL prompts exactly as sd_rl_prompts cuts the members'.
PROMPT_HELDOUT = {"sd_base": "sd_base_heldout", "sd_links": "sd_links_heldout", "pd_3": "pd_3_val",
                  RL_PROMPTS: RL_PROMPTS_HELDOUT}


def prompt_mia_dir(audit_dir: str | Path, model_name: str | None = None) -> Path:
    """RL-prompt membership results below an audit dir (one model's when `model_name` is given)."""
    root = Path(audit_dir) / PROMPT_MIA_SUBDIR
    return root / model_name if model_name else root


def discoverable_dir(audit_dir: str | Path, model_name: str | None = None) -> Path:
    """Probabilistic-extraction results below an audit dir (one model's when `model_name` is given)."""
    root = Path(audit_dir) / DISCOVERABLE_SUBDIR
    return root / model_name if model_name else root


def epsilon_dir(audit_dir: str | Path, model_name: str | None = None) -> Path:
    """One-run ε lower bounds below an audit dir (one model's when `model_name` is given)."""
    root = Path(audit_dir) / EPSILON_SUBDIR
    return root / model_name if model_name else root


def default_audit_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "audit"


def audit_dir(run_dir: str | Path, cfg: Any = None) -> Path:
    """Where a run's audit results are: `audit.out_dir` of `cfg` (the config in use) when given, else the
    `audit.out_dir` its run.json recorded when that was moved away from `<run_dir>/audit`, else
    `<run_dir>/audit`. A recorded relative path is relative to where that run was started."""
    if cfg is not None:
        out = (cfg.get("audit") or {}).get("out_dir")
        return Path(str(out)) if out else default_audit_dir(run_dir)
    recorded = recorded_audit_dir(run_dir)
    return recorded if recorded is not None else default_audit_dir(run_dir)


def report_dir(cfg: Any) -> Path:
    """Where `memlens report` writes: report.out_dir, else <run_dir>/report."""
    return Path((cfg.get("report") or {}).get("out_dir") or Path(str(cfg.run_dir)) / "report")


def recorded_audit_dir(run_dir: str | Path) -> Path | None:
    """run.json's `audit.out_dir` when it is not `<its run_dir>/audit`, else None."""
    path = Path(run_dir) / RUN_RECORD
    if not path.is_file():
        return None
    config = read_json(path).get("config") or {}
    out, recorded_run = (config.get("audit") or {}).get("out_dir"), config.get("run_dir")
    if not out or not recorded_run or Path(str(out)) == default_audit_dir(str(recorded_run)):
        return None
    return Path(str(out))


def is_complete(stage_dir: str | Path) -> bool:
    return (Path(stage_dir) / PROVENANCE_FILE).is_file()


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{int(step)}"


def checkpoint_step(name: str) -> int | None:
    """`checkpoint-<step>` -> step; None for any other name (e.g. a torn `checkpoint-12-torn`)."""
    if not name.startswith(CHECKPOINT_PREFIX):
        return None
    suffix = name[len(CHECKPOINT_PREFIX):]
    return int(suffix) if suffix.isdigit() else None


def checkpoint_dirs(model_dir: str | Path) -> dict[int, Path]:
    """{step: directory} of a model's `checkpoint-<step>` directories, in step order ({} if none)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return {}
    found = {step: p for p in model_dir.iterdir() if p.is_dir() and (step := checkpoint_step(p.name)) is not None}
    return dict(sorted(found.items()))


def whole_checkpoints(model_dir: str | Path) -> dict[int, Path]:
    """The checkpoints a kill did not cut short (the Trainer writes trainer_state.json into them last)."""
    return {s: p for s, p in checkpoint_dirs(model_dir).items() if (p / TRAINER_STATE).is_file()}
