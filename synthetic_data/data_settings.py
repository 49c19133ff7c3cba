"""The `data` config group, validated: which datasets exist, and every data.* key checked and normalised before a
dataset is built (synthetic_data/build.py builds them). Each error names the key and the fix."""

from __future__ import annotations

from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.layout import (
    HELDOUT_BUILT,
    PAIR_HELDOUT_BUILT,
    RL_PROMPTS,
    RL_PROMPTS_HELDOUT,
    heldout_dataset,
)
from memlens.harness.core.user_data import MAX_REPEAT
from memlens.synthetic_data.designs import AS_GIVEN, DESIGNS
from memlens.synthetic_data.public_code import SPLITS as PD_SPLITS
from memlens.synthetic_data.public_code import USE_FILES
from memlens.synthetic_data.user_data import CANARY_DATASETS, PREFERENCE_DATASETS, SOURCE_KEY

SD_DATASETS = ("sd_base", "sd_links", "sd_links_pos")
# Non-members for membership inference: programs of the same generator and seed stream, placed in no stage's
# data (no recipe or experiment reads them), `data.sd.heldout_size` programs (null: as many as SD).
# sd_links_pos_heldout (its positives) partners sd_links_pos, the set the audit plans score.
HELDOUT_DATASETS = HELDOUT_BUILT     # memlens.harness.core.layout: the audit pairs <dataset> with <dataset>_heldout
HELDOUT_OF = {heldout_dataset(name): name for name in ("sd_base", "sd_links", "sd_links_pos")}
RM_DATASETS = ("rm_pd2", "rm_pd2_val", "rm_sd", "rm_sd_links")
PAIR_DATASETS = ("pairs_sd_base", "pairs_sd_links", "pairs_pd2")
# Non-member preference pairs: the SD pairs built by the same functions from the held-out programs (no stage reads
# them; the preference-pair MIA scores a stage's pairs against them, harness/audit/preference_mia.py).
PAIR_HELDOUT_DATASETS = PAIR_HELDOUT_BUILT
PAIR_HELDOUT_OF = {heldout_dataset(name): name for name in ("pairs_sd_base", "pairs_sd_links")}
USER_DATASETS = (*CANARY_DATASETS, *PREFERENCE_DATASETS)   # from data.canaries.file / data.preference.file
# sd_rl_prompts_heldout: the held-out SD programs (sd_base_heldout, sd_links_heldout) cut into RL prompts as
# sd_rl_prompts cuts the members'; no stage reads it (harness/audit/prompt_mia.py samples the policy on both).
ALL_DATASETS = (*SD_DATASETS, *HELDOUT_DATASETS, RL_PROMPTS, RL_PROMPTS_HELDOUT, *PD_SPLITS, *RM_DATASETS, *PAIR_DATASETS,
                *PAIR_HELDOUT_DATASETS, "humaneval_infill", *USER_DATASETS)
SD_SUBSETS = ("SD.Base", "SD.Links")
TARGET_SELECTIONS = ("distinct", "uniform")
# data.sd.membership: which SD.Base programs are trained on. "split": the first data.sd.size programs are members,
# the held-out stream's are not (the default; every dataset as before). "coins": the members' and held-out SD.Base
# programs form one pool and an independent fair coin per program decides (1: sd_base and everything built from
# it, 0: sd_base_heldout), the randomization one-run privacy auditing needs (Steinke, Nasr & Jagielski 2023,
# Algorithm 1; harness/measures/epsilon.py). SD.Links keeps its split under both: its held-out positives get PII
# paths no member has, which a coin per program could not keep.
MEMBERSHIPS = ("split", "coins")


def _get(d: dict, dotted: str) -> Any:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise UserError(f"data.{dotted}: missing from the config; see conf/data/default.yaml")
        node = node[part]
    return node


def _int(d: dict, key: str, minimum: int, allow_none: bool = False) -> int | None:
    value = _get(d, key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"data.{key}={value!r}: must be an integer >= {minimum}"
                        + (" or null" if allow_none else ""))
    return value


def _fraction(d: dict, key: str) -> float:
    value = _get(d, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UserError(f"data.{key}={value!r}: must be a number between 0 and 1")
    return float(value)


def validate(data: dict) -> dict:
    """Check every data.* key; return the normalised settings. Errors name the key and the fix."""
    names = _get(data, "datasets")
    given = {key: (data.get(key) or {}).get("file") not in (None, "") for key in ("canaries", "preference")}
    if names == "all":     # a user dataset only when its file is given
        names = [n for n in ALL_DATASETS if n not in USER_DATASETS or given[SOURCE_KEY[n]]]
    elif isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names:
        raise UserError("data.datasets: give `all` or a list of dataset names")
    for name in names:
        if name not in ALL_DATASETS:
            raise UserError(f"data.datasets: unknown dataset {name!r}; known: {', '.join(ALL_DATASETS)}")
    line_counts = _get(data, "sd.line_counts")
    if not isinstance(line_counts, list) or not line_counts or \
            not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in line_counts):
        raise UserError(f"data.sd.line_counts={line_counts!r}: must be a non-empty list of positive integers")
    selection = _get(data, "sd.target_selection")
    if selection not in TARGET_SELECTIONS:
        raise UserError(f"data.sd.target_selection={selection!r}: use one of {', '.join(TARGET_SELECTIONS)}")
    membership = _membership(data)
    if membership == "coins" and selection != "distinct":
        raise UserError(f"data.sd.target_selection={selection}: data.sd.membership=coins needs target_selection="
                        "distinct (a held-out target must be a line no trained program has); set one of the two back")
    props = _get(data, "pd.proportions")
    if not isinstance(props, dict):
        raise UserError("data.pd.proportions: must map each split to its share")
    for key in props:
        if key not in PD_SPLITS:
            raise UserError(f"data.pd.proportions.{key}: unknown split; the splits are {', '.join(PD_SPLITS)}")
    for key in PD_SPLITS:
        if key not in props:
            raise UserError(f"data.pd.proportions.{key}: missing; give every split a share (0 to leave it empty)")
        _fraction(data, f"pd.proportions.{key}")
    total = sum(float(props[k]) for k in PD_SPLITS)
    if abs(total - 1.0) > 1e-6:
        raise UserError(f"data.pd.proportions: the shares sum to {total:.6g}, not 1; adjust e.g. "
                        f"data.pd.proportions.pd_pt")
    subsets = _get(data, "rl_prompts.subsets")
    if isinstance(subsets, str):
        subsets = [subsets]
    if not isinstance(subsets, list) or not subsets:
        raise UserError("data.rl_prompts.subsets: give a list of SD subsets, e.g. [SD.Base, SD.Links]")
    for subset in subsets:
        if subset not in SD_SUBSETS:
            raise UserError(f"data.rl_prompts.subsets: unknown subset {subset!r}; use {', '.join(SD_SUBSETS)}")
    if _get(data, "pd.source_dir") is not None and _get(data, "pd.hf_dataset") is not None:
        raise UserError("data.pd.source_dir and data.pd.hf_dataset are both set; keep one, set the other to null")
    for key in ("pd.include", "pd.exclude"):
        if not isinstance(_get(data, key), list):
            raise UserError(f"data.{key}: must be a list of fnmatch patterns")
    use_files = _get(data, "pd.use_files")
    if use_files not in USE_FILES:
        raise UserError(f"data.pd.use_files={use_files!r}: use one of {', '.join(USE_FILES)}")
    base_pool_share = _fraction(data, "pd.base_pool_share")
    if use_files != "all" and not 0 < base_pool_share < 1:
        raise UserError(f"data.pd.base_pool_share={base_pool_share}: with use_files={use_files} the pool must be "
                        "a share strictly between 0 and 1, e.g. 0.6")
    seed = _get(data, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UserError(f"data.seed={seed!r}: must be an integer")
    return {
        "datasets": names,
        "seed": seed,
        "sd": {"size": _int(data, "sd.size", 1), "links_fraction": _fraction(data, "sd.links_fraction"),
               "positive_fraction": _fraction(data, "sd.positive_fraction"),
               "line_counts": list(line_counts), "target_selection": selection,
               "pii_paths": _int(data, "sd.pii_paths", 1)},
        "sd_heldout_size": _heldout_size(data),
        "sd_membership": membership,
        "sd_doses": _doses(data),
        "sd_design": _design(data),
        "pd": {"source_dir": _get(data, "pd.source_dir"), "hf_dataset": _get(data, "pd.hf_dataset"),
               "text_field": _get(data, "pd.text_field"), "source_field": _get(data, "pd.source_field"),
               "include": list(_get(data, "pd.include")), "exclude": list(_get(data, "pd.exclude")),
               "max_files": _int(data, "pd.max_files", 1, allow_none=True),
               "use_files": use_files, "base_pool_share": base_pool_share,
               "max_chunk_chars": _int(data, "pd.max_chunk_chars", 1),
               "min_chunk_chars": _int(data, "pd.min_chunk_chars", 0),
               "window_lines": _int(data, "pd.window_lines", 1),
               "proportions": {k: float(props[k]) for k in PD_SPLITS}},
        "preference": {"max_span_lines": _int(data, "preference.max_span_lines", 1),
                       "pd2_positive_fraction": _fraction(data, "preference.pd2_positive_fraction")},
        "rl_prompts": {"tokenizer": _get(data, "rl_prompts.tokenizer"),
                       "prompt_tokens": _int(data, "rl_prompts.prompt_tokens", 1),
                       "target_tokens": _int(data, "rl_prompts.target_tokens", 1),
                       "subsets": list(subsets)},
        "humaneval": {"path": _get(data, "humaneval.path")},
    }


def _heldout_size(data: dict) -> int | None:
    """data.sd.heldout_size (null: as many programs as data.sd.size); absent in older configs = null."""
    sd = data.get("sd") or {}
    if "heldout_size" not in sd:
        return None
    return _int(data, "sd.heldout_size", 1, allow_none=True)


def _doses(data: dict) -> tuple[int, ...] | None:
    """data.sd.doses: null (every trained SD program once, as before) or a list of distinct copy counts, each
    trained program assigned one (memlens.synthetic_data.doses); absent in older configs = null."""
    value = (data.get("sd") or {}).get("doses")
    if value is None:
        return None
    fix = f"give distinct whole numbers from 1 to {MAX_REPEAT}, e.g. [1, 4, 16], or null"
    if not isinstance(value, (list, tuple)) or not value:
        raise UserError(f"data.sd.doses={value!r}: {fix}")
    for dose in value:
        if isinstance(dose, bool) or not isinstance(dose, int) or not 1 <= dose <= MAX_REPEAT:
            raise UserError(f"data.sd.doses: {dose!r} is not a copy count; {fix}")
    if len(set(value)) != len(value):
        raise UserError(f"data.sd.doses={list(value)}: a dose is listed twice; {fix}")
    return tuple(sorted(value))


# bigram gives the rarest x to the first canaries (its pairs are not shuffled): over SD's rows in id order, the trained
# programs (sd-*) would get rarer secrets than the held-out ones (sdh-*), which membership inference would read.
ORDERED_DESIGNS = ("bigram",)


def _design(data: dict) -> dict | None:
    """data.sd.design / design_tokens / design_tokenizer: None for as_given (the programs' own target lines; absent in
    older configs), else the model-free design of synthetic_data/designs.py that puts a secret in place of each SD.Base
    target, its length in tokens and the tokenizer directory it is chosen in."""
    sd = data.get("sd") or {}
    design = sd.get("design", AS_GIVEN)
    if design == AS_GIVEN:
        return None
    usable = [name for name in DESIGNS.names() if not DESIGNS[name].reads_model and not DESIGNS[name].adds_tokens
              and name not in ORDERED_DESIGNS]
    if design not in usable:
        why = ("reads a model, which the data is built before" if design in DESIGNS and DESIGNS[design].reads_model
               else "adds tokens, which every stage's embeddings would need" if design in DESIGNS and
               DESIGNS[design].adds_tokens
               else "hands its rarest secrets out in row order, so trained and held-out programs would differ in "
                    "rarity" if design in ORDERED_DESIGNS else "is unknown")
        raise UserError(f"data.sd.design={design!r} {why}; use {AS_GIVEN} or one of {', '.join(usable)} (a design "
                        "that reads a model or adds tokens: memlens.inject in your own training script)")
    tokenizer = sd.get("design_tokenizer")
    if tokenizer in (None, ""):
        raise UserError(f"data.sd.design_tokenizer: data.sd.design={design} chooses its secrets in the model's "
                        "tokenizer, which must exist before training: give its directory, or use a model preset "
                        "with a pretrained base (model=tiny_base: the shipped base's), not one whose PT trains a "
                        "tokenizer (model=tiny)")
    return {"design": design, "tokens": _int(data, "sd.design_tokens", 1), "tokenizer": str(tokenizer)}


def _membership(data: dict) -> str:
    """data.sd.membership (split | coins); absent in older configs = split."""
    value = (data.get("sd") or {}).get("membership", "split")
    if value not in MEMBERSHIPS:
        raise UserError(f"data.sd.membership={value!r}: use split (the first data.sd.size programs are trained on) "
                        "or coins (an independent fair coin per SD.Base program, for audit.measures=[...,epsilon])")
    return value
