"""`memlens data`: build every dataset an experiment needs into <run_dir>/data/<name>/.

Each dataset is `rows.jsonl` + `manifest.json` (count, sha256 of rows.jsonl, seed, generator_version,
settings, figures such as the duplicate-target share and token-length distributions, provenance).
Both files are written atomically, the manifest last: a folder with a manifest whose settings match
is complete and is not rebuilt, anything else is rebuilt from scratch (a kill at any point loses
nothing but the dataset in flight).

Python API for the pipeline: `build_datasets(cfg, names=None) -> {name: folder}`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from memlens.harness.core.errors import UserError
from memlens.harness.core.formal_study import FormalSettings, formal_dir
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256
from memlens.harness.core.layout import LATE_DATASETS, RL_PROMPTS, RL_PROMPTS_HELDOUT, datasets_dir
from memlens.harness.core.provenance import provenance
from memlens.harness.core.user_data import DOSE_IF_MEMBER
from memlens.harness.text.exclusions import exclusion_reasons
from memlens.synthetic_data import common, user_data
from memlens.synthetic_data import preference_data as pref
from memlens.synthetic_data import public_code as pc
from memlens.synthetic_data.common import tokenizer_fingerprint
from memlens.synthetic_data.data_settings import (
    ALL_DATASETS,
    HELDOUT_DATASETS,
    HELDOUT_OF,
    PAIR_HELDOUT_DATASETS,
    PAIR_HELDOUT_OF,
    USER_DATASETS,
    validate,
)
from memlens.synthetic_data.designs import design_secrets, design_tokenizer, design_tokenizer_folder
from memlens.synthetic_data.doses import DOSE_STREAM, assign_doses, dose_figures
from memlens.synthetic_data.formal_data import build_all
from memlens.synthetic_data.humaneval import default_path, infill_rows
from memlens.synthetic_data.links import heldout_pii_path_pool, links_rows, pii_path_pool
from memlens.synthetic_data.preference_data import pd2_examples
from memlens.synthetic_data.public_code import SPLITS as PD_SPLITS
from memlens.synthetic_data.public_code import eval_rows
from memlens.synthetic_data.rl_prompts import OffsetTokenizer, rl_prompt_rows
from memlens.synthetic_data.sd.programs import MIN_TARGET_PIECES, base_rows, generate_programs
from memlens.synthetic_data.user_data import SOURCE_KEY, UserFiles, user_files

# Bump when a builder's output changes for the same settings: complete datasets are then rebuilt.
GENERATOR_VERSION = "1.1.0"     # 1.1.0: SD.Base targets the audit would score; sd_rl_prompts from the full SD prompt

COIN_STREAM = "sd-membership-coins"      # the named seed stream of the coins: seeded_rng(COIN_STREAM, data.seed)
LINKS_SPLIT_NOTE = ("SD.Links keeps its split under data.sd.membership=coins: its held-out positives need PII paths "
                    "no member has; only SD.Base is randomized by coins")


FINE_TUNING_SPLITS = ("pd_1", "pd_2")   # the public code FT.1 and FT.3 train on beside SD (paper 003 Table 1)


# ----------------------------------------------------------------------------- builders

def _held_out_dose(row: dict) -> dict:
    """A held-out program's row under coins with doses: its tier kept as DOSE_IF_MEMBER, not as `repeat` (no stage
    plants a held-out program; the ε audit reads the tier to bound each dose)."""
    if "repeat" not in row:
        return row
    out = {k: v for k, v in row.items() if k != "repeat"}
    return {**out, DOSE_IF_MEMBER: row["repeat"]}


class Builder:
    """Builds datasets lazily: SD, PD and the tokenizer are made once, only if some dataset needs them."""

    def __init__(self, settings: dict, files: UserFiles | None = None):
        self.s = settings
        self.seed = settings["seed"]
        self.files = files
        self._user_rows: dict[str, list[dict]] = {}

    # -- the user's files (data.canaries.file, data.preference.file), each read and checked once
    def user_rows(self, dataset: str) -> list[dict]:
        key = SOURCE_KEY[dataset]
        if key not in self._user_rows:
            self._user_rows[key] = self.files.read(dataset)
        return self._user_rows[key]

    def check_user_files(self, names: list[str]) -> None:
        """Read and check the user's files the named datasets come from, before anything is written."""
        for name in names:
            if name in USER_DATASETS:
                self.user_rows(name)

    # -- SD
    @cached_property
    def sd_counts(self) -> tuple[int, int, int]:
        sd = self.s["sd"]
        n_links = round(sd["size"] * sd["links_fraction"])
        return sd["size"], n_links, round(n_links * sd["positive_fraction"])

    @cached_property
    def sd_programs(self) -> tuple[list, list[dict]]:
        """(SD.Base programs, SD.Links rows) of the first data.sd.size programs of the seed stream."""
        size, n_links, n_pos = self.sd_counts
        programs = generate_programs(size, n_links, self.seed, tuple(self.s["sd"]["line_counts"]))
        links = links_rows([p for p in programs if p.links], n_pos, self.seed,
                           pii_path_pool(self.s["sd"]["pii_paths"], self.seed))
        return [p for p in programs if not p.links], links

    @cached_property
    def sd_as_given(self) -> dict:
        """The trained SD with each SD.Base program's own target line: SD.Base rows, SD.Links rows and the line
        document frequency of their programs."""
        if self.s["sd_membership"] == "coins":
            return self.sd_coins["members"]
        base_programs, links = self.sd_programs
        df = common.line_document_frequency([p.code for p in base_programs] + [r["code"] for r in links])
        return {"base": base_rows(base_programs, self.seed, df, self.s["sd"]["target_selection"]), "links": links,
                "df": df}

    @cached_property
    def sd(self) -> dict:
        """The trained SD: SD.Base rows, SD.Links rows and the line document frequency of their programs; with
        data.sd.design, each SD.Base target a designed secret (`designed`); with data.sd.doses, each trained
        program's rows carry its tier as `repeat` (memlens.synthetic_data.doses)."""
        members = {**self.sd_as_given, "base": self.designed(self.sd_as_given["base"])}
        if not self.s["sd_doses"]:
            return members
        # Under coins SD.Base's tiers were dealt over the pool before the coins (sd_coins): its rows carry them.
        parts = ("links",) if self.s["sd_membership"] == "coins" else ("base", "links")
        return {**members, **{part: assign_doses(members[part], self.s["sd_doses"], self.seed, part)
                              for part in parts}}

    @cached_property
    def sd_heldout_programs(self) -> tuple[list, list[dict], list[str]]:
        """(SD.Base programs, SD.Links rows, the first stream's program texts) of the held-out stream:
        `heldout_size` programs continuing the seed stream (memlens.synthetic_data.sd.programs.generate_programs), the same links
        and positive shares, none equal to a program of the first stream. Positives of SD.Links get PII paths no
        member has (heldout_pii_path_pool)."""
        sd = self.s["sd"]
        size = self.s["sd_heldout_size"] or sd["size"]
        n_links = round(size * sd["links_fraction"])
        n_pos = round(n_links * sd["positive_fraction"])
        first_base, first_links = self.sd_programs
        members = [p.code for p in first_base] + [r["code"] for r in first_links]
        programs = generate_programs(size, n_links, self.seed, tuple(sd["line_counts"]), first_index=sd["size"],
                                     id_prefix="sdh", exclude=frozenset(p for p in members))
        paths = heldout_pii_path_pool(pii_path_pool(sd["pii_paths"], self.seed), self.seed)
        links = links_rows([p for p in programs if p.links], n_pos, self.seed, paths)
        return [p for p in programs if not p.links], links, members

    @cached_property
    def sd_heldout_as_given(self) -> dict:
        """Held-out SD: rows of the held-out stream built by the same functions. Target lines are drawn among lines
        found in no member or other held-out program, so a non-member target is never a line a stage trained on
        (tests/unit/synthetic_data/test_synthetic_build.py checks every other dataset). Under coins: the zeros' SD.Base rows."""
        if self.s["sd_membership"] == "coins":
            return self.sd_coins["heldout"]
        base_programs, links, members = self.sd_heldout_programs
        df = common.line_document_frequency(members + [p.code for p in base_programs] + [r["code"] for r in links])
        return {"base": base_rows(base_programs, self.seed, df, self.s["sd"]["target_selection"]), "links": links}

    @cached_property
    def sd_heldout(self) -> dict:
        """Held-out SD as trained SD is (`sd`): with data.sd.design, its SD.Base targets designed secrets too."""
        return {**self.sd_heldout_as_given, "base": self.designed(self.sd_heldout_as_given["base"])}

    @cached_property
    def secrets_by_id(self) -> dict[str, str]:
        """{SD.Base row id: its designed secret} for the trained and the held-out programs alike (data.sd.design;
        synthetic_data/designs.py), drawn together in id order so that no two secrets share a token, in the model's
        tokenizer from the token counts of the fine-tuning data, as the authors count theirs: the trained SD programs
        (their own lines) and the public code the fine-tuning stages read beside them (PD.1, PD.2; paper 003 Table 1)."""
        spec = self.s["sd_design"]
        rows = sorted(self.sd_as_given["base"] + self.sd_heldout_as_given["base"], key=lambda r: r["id"])
        # Under coins the trained programs are the coins' choice: counting the whole pool keeps every secret
        # independent of the coins, as the one-run ε bound assumes (Steinke et al. 2023, Algorithm 1).
        counted = rows if self.s["sd_membership"] == "coins" else self.sd_as_given["base"]
        texts = [r["code"] for r in counted + self.sd_as_given["links"]]
        texts += [r["text"] for split in FINE_TUNING_SPLITS for r in self.pd.splits[split]]
        secrets, _ = design_secrets(spec["design"], self.design_tokenizer, texts, len(rows),
                                    spec["tokens"], self.seed)
        return {r["id"]: secret for r, secret in zip(rows, secrets)}

    def designed(self, rows: list[dict]) -> list[dict]:
        """SD.Base rows with their target line replaced by the designed secret (program = prefix + secret + suffix),
        or as they are without data.sd.design."""
        if not self.s["sd_design"]:
            return rows
        secrets = self.secrets_by_id
        return [{**r, "target": secrets[r["id"]], "code": r["prefix"] + secrets[r["id"]] + r["suffix"],
                 "design": self.s["sd_design"]["design"]} for r in rows]

    def rl_prompts(self, sd_rows: list[dict], name: str) -> tuple[list[dict], dict]:
        """(rows, figures) of an RL-prompt split (synthetic_data/rl_prompts.py) of SD rows: sd_rl_prompts from the
        members, its held-out twin from the held-out programs, by the same cut in the same tokenizer."""
        rp = self.s["rl_prompts"]
        rows, info = rl_prompt_rows(sorted((r for r in sd_rows if r["subset"] in rp["subsets"]), key=lambda r: r["id"]),
                                    OffsetTokenizer(rp["tokenizer"]), rp["prompt_tokens"], rp["target_tokens"])
        if not rows:
            more = " or raise data.sd.heldout_size (its held-out programs)" if name == RL_PROMPTS_HELDOUT else ""
            raise UserError(f"data.rl_prompts.prompt_tokens: no SD example's prompt in {name} has "
                            f"{rp['prompt_tokens'] + rp['target_tokens']} tokens; lower the token counts{more}")
        return rows, {"too_short_skipped": info["too_short_skipped"], "spans_hole": info["spans_hole"],
                      "sd_prompt_tokens": common.distribution(info["prompt_token_lengths"]),
                      "sd_target_tokens": common.distribution(info["target_token_lengths"]),
                      "token_counts_in": rp["tokenizer"]}

    @cached_property
    def sd_coins(self) -> dict:
        """data.sd.membership=coins: the SD.Base programs of both streams in one pool, targets drawn as under split
        but among lines found in no other SD program of either stream, then an independent fair coin per program
        from the seed stream COIN_STREAM (1: trained, 0: held out). A program whose target line also occurs in another
        SD program (the distinct draw's fallback) is left out of the pool before any coin is drawn, so no zero's
        target is a line a trained program has, and what is left out never depends on a coin."""
        first_base, first_links = self.sd_programs
        held_base, held_links, _ = self.sd_heldout_programs
        pool = first_base + held_base
        df = common.line_document_frequency([p.code for p in pool] + [r["code"] for r in first_links + held_links])
        rows = base_rows(pool, self.seed, df, "distinct")
        kept = [r for r in rows if df[r["target"].strip()] == 1]
        if self.s["sd_doses"]:
            # Each program's dose is dealt before its coin (one tier for either outcome), so a dose's canaries are
            # split by the coins alone and a one-run ε bound per dose holds (harness/audit/epsilon.py).
            kept = assign_doses(kept, self.s["sd_doses"], self.seed, "base")
        rng = common.seeded_rng(COIN_STREAM, self.seed)
        coins = [rng.getrandbits(1) for _ in kept]
        ones = [r for r, coin in zip(kept, coins) if coin == 1]
        zeros = [_held_out_dose(r) for r, coin in zip(kept, coins) if coin == 0]
        if not ones or not zeros:
            raise UserError(f"data.sd.membership=coins: the coins gave {len(ones)} trained and {len(zeros)} held-out "
                            "SD.Base program(s); raise data.sd.size or data.sd.heldout_size")
        info = {"membership": "coins",
                "coins": {"stream": f"{COIN_STREAM}:{self.seed}", "pool": len(rows), "ones": len(ones),
                          "zeros": len(zeros), "left_out_shared_target": len(rows) - len(kept),
                          "rule": "one fair coin per SD.Base program of both streams: 1 -> sd_base, "
                                  "0 -> sd_base_heldout",
                          **({"doses": f"one tier per program of the pool, dealt before its coin (a held-out "
                                       f"program's as {DOSE_IF_MEMBER})"} if self.s["sd_doses"] else {})}}
        return {"members": {"base": ones, "links": first_links, "df": df},
                "heldout": {"base": zeros, "links": held_links}, "info": info}

    def membership_figures(self, name: str) -> dict:
        """What the manifest says about membership under coins (nothing under split: manifests as before)."""
        if self.s["sd_membership"] != "coins":
            return {}
        if name in ("sd_base", "sd_base_heldout", "pairs_sd_base_heldout"):
            return dict(self.sd_coins["info"])
        return {"membership": "split", "membership_note": LINKS_SPLIT_NOTE}

    def _sd_stats(self, rows: list[dict]) -> dict:
        df = self.sd["df"]
        stats = {"duplicate_target_share": common.duplicate_target_share(rows, df),
                 "prompt_tokens_proxy": common.distribution(
                     [common.proxy_token_count(r["prefix"]) + common.proxy_token_count(r["suffix"]) for r in rows]),
                 "target_tokens_proxy": common.distribution([common.proxy_token_count(r["target"]) for r in rows]),
                 "program_lines": common.distribution([r["code"].count("\n") for r in rows]),
                 "distinct_tasks": len({r["task"] for r in rows}),
                 "label_counts": dict(Counter(str(r["label"]) for r in rows)),
                 "token_proxy": r"regex \w+|[^\w\s] pieces (memlens.synthetic_data.common.proxy_token_count)",
                 "audit_exclusions": self._exclusions(rows)}
        lines = [ln.strip() for r in rows for ln in r["code"].splitlines() if ln.strip()]
        if lines:
            stats["comment_line_share"] = round(sum(ln.startswith("#") for ln in lines) / len(lines), 4)
            # What the paper's uniform choice would give: mean share of a program's lines found elsewhere.
            per_program = []
            for r in rows:
                own = [ln.strip() for ln in r["code"].splitlines() if ln.strip()]
                per_program.append(sum(df[ln] > 1 for ln in own) / len(own))
            stats["duplicate_line_share_if_uniform_target"] = round(sum(per_program) / len(per_program), 4)
        if rows and rows[0]["subset"] == "SD.Links":
            pos = [r for r in rows if r["label"] == 1]
            usage = Counter(r["pii_path"] for r in pos)
            stats["duplicate_target_share_positives"] = common.duplicate_target_share(pos, df)
            stats["duplicate_target_share_negatives"] = common.duplicate_target_share(
                [r for r in rows if r["label"] == 0], df)
            stats["pii_path_usage"] = {"distinct_paths": len(usage),
                                       "min": min(usage.values(), default=0), "max": max(usage.values(), default=0),
                                       "mean": round(len(pos) / max(1, len(usage)), 2)}
        return stats

    def _exclusions(self, rows: list[dict]) -> dict:
        """What the audit's filters (paper 003 Sec. 4.2, App. D) would exclude, with target tokens counted
        in proxy pieces: the audit counts them in the audited model's tokenizer, so its short-target count
        can differ a little; the target-in-prompt test works on characters and is the audit's exactly. A designed
        secret (data.sd.design) is counted in the tokenizer it was drawn in: as proxy pieces a run of rare tokens
        reads as one or two words, and every secret would look too short."""
        designed = bool(rows) and "design" in rows[0]
        counter = self._design_token_count if designed else common.proxy_token_count
        reasons = exclusion_reasons([r["prefix"] for r in rows], [r["target"] for r in rows],
                                    [r["suffix"] for r in rows], [counter(r["target"]) for r in rows],
                                    min_target_tokens=MIN_TARGET_PIECES)
        counts = Counter(r for r in reasons if r is not None)
        return {"excluded": sum(counts.values()), "of": len(rows),
                "excluded_share": round(sum(counts.values()) / len(rows), 4) if rows else None,
                "by_reason": dict(sorted(counts.items())),
                "target_tokens_counted_as": "the design's tokenizer's tokens" if designed else "proxy pieces"}

    def _design_token_count(self, text: str) -> int:
        return len(self.design_tokenizer(text, add_special_tokens=False)["input_ids"])

    @cached_property
    def design_tokenizer(self):
        """The tokenizer data.sd.design draws SD's secrets in, loaded once."""
        return design_tokenizer(self.s["sd_design"]["tokenizer"])

    # -- PD
    @cached_property
    def pd_source(self) -> tuple[Any, list[str] | None, str]:
        """(root dir or None, relative files or None, corpus fingerprint) without reading contents."""
        pd = self.s["pd"]
        if pd["hf_dataset"] is not None:
            p = Path(pd["hf_dataset"])
            if not p.exists():
                raise UserError(f"data.pd.hf_dataset: {p} does not exist")
            parts = sorted(p.rglob("*")) if p.is_dir() else [p]
            fp = common.unit_hash(*[f"{q.relative_to(p) if p.is_dir() else q.name}:{q.stat().st_size}"
                                    for q in parts if q.is_file()])
            return None, None, f"{p.resolve()}#{fp}"
        root = Path(pd["source_dir"]).expanduser() if pd["source_dir"] is not None else pc.default_source_dir()
        rels = pc.list_source_files(root, pd["include"], pd["exclude"], pd["max_files"], self.seed,
                                    pd["use_files"], pd["base_pool_share"])
        if not rels:
            raise UserError(f"data.pd.include: no file under {root} matches include={pd['include']} "
                            f"minus exclude={pd['exclude']}; fix the patterns or data.pd.source_dir")
        return root, rels, f"{root.resolve()}#{pc.corpus_fingerprint(root, rels)}"

    @cached_property
    def pd(self):
        pd = self.s["pd"]
        root, rels, _ = self.pd_source
        if root is None:
            corpus = pc.load_hf_dataset(pd["hf_dataset"], pd["text_field"], pd["source_field"], pd["max_files"],
                                        self.seed, pd["use_files"], pd["base_pool_share"])
        else:
            corpus = pc.load_directory(root, rels)
        if not corpus.files:
            raise UserError("data.pd: no readable source file left (all failed to decode); check data.pd.source_dir")
        return pc.build_pd(corpus, pd["proportions"], self.seed, pd["max_chunk_chars"], pd["min_chunk_chars"],
                           pd["window_lines"])

    def pd_split(self, split: str) -> list[dict]:
        rows = self.pd.splits[split]
        if not rows:
            raise UserError(f"data.pd.proportions.{split}: no example fell into {split} "
                            f"({self.pd.stats['files']} source files); raise its share or use more files "
                            "(data.pd.max_files)")
        return rows

    @cached_property
    def pd2_examples(self) -> dict[str, list[dict]]:
        span = self.s["preference"]["max_span_lines"]
        out = {}
        for split in ("pd_2", "pd_2_val"):
            rows = self.pd_split(split)
            if len(rows) < 2:
                raise UserError(f"data.pd.proportions.{split}: PD.2 preference data needs at least two "
                                f"examples in {split}, got {len(rows)}")
            out[split] = pd2_examples(rows, self.seed, span, split)
        return out

    # -- settings that identify each dataset (compared for the skip-if-complete check)
    def settings_for(self, name: str) -> dict:
        s = self.s
        out: dict[str, Any] = {"seed": self.seed}
        if name in USER_DATASETS:
            out["user_file"] = self.files.settings_for(name)
        if name in HELDOUT_DATASETS or name in PAIR_HELDOUT_DATASETS or name == RL_PROMPTS_HELDOUT:
            out["heldout_size"] = s["sd_heldout_size"]
        if name.startswith("sd_") or name in ("rm_sd", "rm_sd_links", "pairs_sd_base", "pairs_sd_links",
                                              *PAIR_HELDOUT_DATASETS):
            out["sd"] = s["sd"]
            if s["sd_membership"] == "coins":     # split adds nothing: datasets built before the option stay complete
                out["membership"] = {"sd_base": "coins", "stream": COIN_STREAM, "heldout_size": s["sd_heldout_size"]}
                if s["sd_doses"]:     # the held-out rows carry their tiers too (dose_if_member): a new deal rebuilds
                    out["membership"]["doses"] = {"tiers": list(s["sd_doses"]), "stream": DOSE_STREAM,
                                                  "dealt": "over the pool, before the coins"}
            if s["sd_design"]:        # as_given adds nothing: datasets built before the option stay complete
                # the secrets read the tokenizer and the token counts of PD.1 / PD.2 (secrets_by_id): both identify them
                out["design"] = {**s["sd_design"], "tokenizer_sha256": tokenizer_fingerprint(
                    design_tokenizer_folder(s["sd_design"]["tokenizer"])),
                    "counted_in": {"sd": "every program of the pool" if s["sd_membership"] == "coins"
                                   else "trained programs", "splits": list(FINE_TUNING_SPLITS),
                                   "pd": {**s["pd"], "corpus": self.pd_source[2]}},
                    "drawn_with_heldout": s["sd_heldout_size"]}   # the held-out programs' secrets are drawn with them
            if s["sd_doses"] and name not in (*HELDOUT_DATASETS, *PAIR_HELDOUT_DATASETS, RL_PROMPTS_HELDOUT):   # null adds nothing, as membership=split
                out["doses"] = {"tiers": list(s["sd_doses"]), "stream": DOSE_STREAM}
        if name in LATE_DATASETS:
            tok = OffsetTokenizer(s["rl_prompts"]["tokenizer"])
            out["rl_prompts"] = {**s["rl_prompts"], "tokenizer": str(Path(tok.path).resolve()),
                                 "tokenizer_sha256": tok.fingerprint()}
        if name in PD_SPLITS or name in ("rm_pd2", "rm_pd2_val", "pairs_pd2"):
            out["pd"] = {**s["pd"], "corpus": self.pd_source[2]}
        if name in ("rm_pd2", "rm_pd2_val", "pairs_pd2"):
            out["preference"] = s["preference"]
        if name == "humaneval_infill":
            path = s["humaneval"]["path"] or default_path()
            out["humaneval"] = {"path": str(path),
                                "sha256": file_sha256(path) if Path(path).is_file() else None}
        return out

    # -- rows
    def make(self, name: str) -> tuple[list[dict], dict]:
        """(rows, figures for the manifest) of one dataset."""
        if name in USER_DATASETS:
            return user_data.make(name, self.files.path_for(name), self.user_rows(name), self.seed)
        size, n_links, n_pos = self.sd_counts
        if name in ("sd_base", "rm_sd", "pairs_sd_base") and size - n_links < 1:
            raise UserError("data.sd.links_fraction: leaves no program for SD.Base; lower it or raise data.sd.size")
        if name in ("sd_links", "rm_sd_links", "rm_sd") and n_links < 1:
            raise UserError("data.sd.links_fraction: gives no SD.Links program; raise it or data.sd.size")
        if name in ("sd_links_pos", "pairs_sd_links") and n_pos < 1:
            raise UserError("data.sd.positive_fraction: gives no positive SD.Links program; raise it or data.sd.size")
        if name == "sd_base":
            rows = self.sd["base"]
            return rows, {**self._sd_stats(rows), **self.membership_figures(name), **dose_figures(rows)}
        if name == "sd_links":
            rows = self.sd["links"]
            return rows, {**self._sd_stats(rows), **self.membership_figures(name), **dose_figures(rows)}
        if name == "sd_links_pos":
            rows = [r for r in self.sd["links"] if r["label"] == 1]
            return rows, {**self._sd_stats(rows), **self.membership_figures(name), **dose_figures(rows)}
        if name in HELDOUT_DATASETS:
            rows = self.sd_heldout["base" if name == "sd_base_heldout" else "links"]
            if name == "sd_links_pos_heldout":
                rows = [r for r in rows if r["label"] == 1]
            if not rows:
                raise UserError(f"data.sd.heldout_size: gives no program for {name}; raise it or set it to null")
            return rows, {**self._sd_stats(rows), "heldout_of": HELDOUT_OF[name], "members_in_training": 0,
                          **self.membership_figures(name)}
        if name == RL_PROMPTS:
            return self.rl_prompts(self.sd["base"] + self.sd["links"], name)
        if name == RL_PROMPTS_HELDOUT:
            rows, figures = self.rl_prompts(self.sd_heldout["base"] + self.sd_heldout["links"], name)
            return rows, {**figures, "heldout_of": RL_PROMPTS, "members_in_training": 0}
        if name == "pd_eval":
            rows = eval_rows(self.pd_split("pd_eval"), self.seed)
            return rows, {"pd": self.pd.stats,
                          "target_tokens_proxy": common.distribution([common.proxy_token_count(r["target"]) for r in rows])}
        if name in PD_SPLITS:
            rows = self.pd_split(name)
            return rows, {"pd": self.pd.stats, "source_files": len({r["source_file"] for r in rows}),
                          "chars": sum(len(r["text"]) for r in rows)}
        if name in ("rm_pd2", "rm_pd2_val"):
            split = "pd_2" if name == "rm_pd2" else "pd_2_val"
            rows = pref.pd2_pointwise(self.pd2_examples[split], self.seed,
                                      self.s["preference"]["pd2_positive_fraction"], split)
            return rows, self._rm_stats(rows)
        if name == "rm_sd":
            rows = pref.pointwise_from_fim(self.sd["base"], "SD.Base") + pref.pointwise_from_fim(self.sd["links"], "SD.Links")
            return rows, self._rm_stats(rows)
        if name == "rm_sd_links":
            rows = pref.pointwise_from_fim(self.sd["links"], "SD.Links")
            return rows, self._rm_stats(rows)
        if name == "pairs_sd_base":
            return pref.sd_base_pairs(self.sd["base"], self.seed), {}
        if name == "pairs_sd_links":
            return pref.sd_links_pairs(self.sd["links"]), {}
        if name == "pairs_pd2":
            return pref.pd2_pairs(self.pd2_examples["pd_2"]), {}
        if name in PAIR_HELDOUT_DATASETS:
            return self.heldout_pairs(name)
        if name == "humaneval_infill":
            rows = infill_rows(self.s["humaneval"]["path"])
            return rows, {"problems": len({r["task_id"] for r in rows})}
        raise UserError(f"data.datasets: unknown dataset {name!r}")  # validate() already rejects it

    def heldout_pairs(self, name: str) -> tuple[list[dict], dict]:
        """Non-member preference pairs: the member pairs' builders (memlens.synthetic_data.preference_data) run on the
        held-out programs (sd_heldout), so members and non-members are pairs of one construction; no stage reads
        them (harness/audit/preference_mia.py). The member pairs and every other dataset are built as before."""
        if name == "pairs_sd_base_heldout":
            rows = pref.sd_base_pairs(self.sd_heldout["base"], self.seed)
        else:
            rows = pref.sd_links_pairs(self.sd_heldout["links"])
        if not rows:
            raise UserError(f"data.sd.heldout_size: gives no program for {name}; raise it or set it to null")
        return rows, {"heldout_of": PAIR_HELDOUT_OF[name], "members_in_training": 0, **self.membership_figures(name)}

    @staticmethod
    def _rm_stats(rows: list[dict]) -> dict:
        return {"label_counts": dict(Counter(str(r["label"]) for r in rows)),
                "source_counts": dict(Counter(r["source"] for r in rows)),
                "completion_tokens_proxy": common.distribution([common.proxy_token_count(r["completion"]) for r in rows])}


# ----------------------------------------------------------------------------- on disk
def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def is_complete(out_dir: Path, settings: dict) -> bool:
    """A dataset folder is complete when its manifest matches the settings and the rows' hash."""
    manifest_path, rows_path = out_dir / "manifest.json", out_dir / "rows.jsonl"
    if not (manifest_path.is_file() and rows_path.is_file()):
        return False
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return (manifest.get("generator_version") == GENERATOR_VERSION
            and _canonical(manifest.get("settings")) == _canonical(settings)
            and manifest.get("sha256") == file_sha256(rows_path))


def write_dataset(out_dir: Path, name: str, rows: list[dict], figures: dict, settings: dict, seed: int,
                  upstream: dict[str, str], environment: dict | None = None) -> None:
    manifest_path = out_dir / "manifest.json"
    manifest_path.unlink(missing_ok=True)        # the folder is incomplete until the new manifest lands
    atomic_write_jsonl(out_dir / "rows.jsonl", rows)
    manifest = {"name": name, "count": len(rows), "sha256": file_sha256(out_dir / "rows.jsonl"), "seed": seed,
                "generator_version": GENERATOR_VERSION, "settings": settings, **figures,
                "provenance": {**(environment or provenance(seed=seed, generator_version=GENERATOR_VERSION)),
                               "datasets": upstream}}
    atomic_write_json(manifest_path, manifest)


UPSTREAM = {"rm_sd": ("sd_base", "sd_links"), "rm_sd_links": ("sd_links",), "pairs_sd_base": ("sd_base",),
            "pairs_sd_links": ("sd_links",), "sd_links_pos": ("sd_links",), "rm_pd2": ("pd_2",),
            "rm_pd2_val": ("pd_2_val",), "pairs_pd2": ("pd_2",), RL_PROMPTS: ("sd_base", "sd_links"),
            RL_PROMPTS_HELDOUT: ("sd_base_heldout", "sd_links_heldout"),
            "pairs_sd_base_heldout": ("sd_base_heldout",), "pairs_sd_links_heldout": ("sd_links_heldout",)}


def _upstream_hashes(data_dir: Path, name: str) -> dict[str, str]:
    out = {}
    for up in UPSTREAM.get(name, ()):
        try:
            out[up] = json.loads((data_dir / up / "manifest.json").read_text(encoding="utf-8"))["sha256"]
        except (OSError, json.JSONDecodeError, KeyError):
            continue
    return out


def build_datasets(cfg, names: list[str] | None = None, log=print) -> dict[str, Path]:
    """Build (or keep, when complete with the same settings) each dataset; {name: its folder}.

    `names` overrides data.datasets. sd_rl_prompts and its held-out twin are skipped, with a note, while
    data.rl_prompts.tokenizer is null (the pre-training stage trains that tokenizer later).
    """
    data = OmegaConf.to_container(cfg.data, resolve=True) if isinstance(cfg.data, DictConfig) else dict(cfg.data)
    if names is not None:
        data["datasets"] = list(names)
    settings = validate(data)
    run_dir = Path(str(cfg.run_dir))
    data_dir = datasets_dir(run_dir)
    builder = Builder(settings, user_files(data, cfg))
    builder.check_user_files(settings["datasets"])     # a bad row of the user's file: nothing written
    done: dict[str, Path] = {}
    environment: dict | None = None          # git commit, versions: asked once per build
    # Upstream datasets first, so derived ones can record their hashes.
    order = sorted(settings["datasets"], key=lambda n: ALL_DATASETS.index(n))
    for name in order:
        if name in LATE_DATASETS and settings["rl_prompts"]["tokenizer"] is None:
            log(f"[data] {name}: skipped - data.rl_prompts.tokenizer is null; the RL-prompt split is "
                "counted in the tokenizer the pre-training stage trains, so build it after PT with "
                "data.rl_prompts.tokenizer=<run_dir>/models/PT")
            continue
        out_dir = data_dir / name
        dataset_settings = builder.settings_for(name)
        if is_complete(out_dir, dataset_settings):
            log(f"[data] {name}: complete, kept ({out_dir})")
            done[name] = out_dir
            continue
        t0 = time.perf_counter()
        rows, figures = builder.make(name)
        environment = environment or provenance(seed=settings["seed"], generator_version=GENERATOR_VERSION)
        write_dataset(out_dir, name, rows, figures, dataset_settings, settings["seed"],
                      _upstream_hashes(data_dir, name), environment)
        log(f"[data] {name}: {len(rows)} rows in {time.perf_counter() - t0:.1f}s -> {out_dir}")
        done[name] = out_dir
    return done


def check_user_files(cfg, names: list[str]) -> None:
    """Read and check the user's canary / preference files that datasets `names` come from (a UserError
    naming file:line and the field for a bad row); writes nothing. `memlens run` calls it first."""
    data = OmegaConf.to_container(cfg.data, resolve=True) if isinstance(cfg.data, DictConfig) else dict(cfg.data)
    data["datasets"] = list(names)
    settings = validate(data)
    Builder(settings, user_files(data, cfg)).check_user_files(settings["datasets"])


def build_formal_data(cfg, t0: float) -> int:
    settings = FormalSettings.load(OmegaConf.to_container(cfg.formal, resolve=True))
    built = build_all(cfg.run_dir, settings)
    print(f"[data] {len(built)} formal-language dataset(s) ready under {formal_dir(cfg.run_dir) / 'data'} "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0


def main(cfg) -> int:
    """`memlens data [overrides]` (for paper 004's formal-language study: its strings, synthetic_data/formal_data.py)."""
    t0 = time.perf_counter()
    if cfg.get("formal") is not None:
        return build_formal_data(cfg, t0)
    built = build_datasets(cfg)
    print(f"[data] {len(built)} dataset(s) ready under {Path(str(cfg.run_dir)) / 'data'} "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0
