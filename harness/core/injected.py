"""The manifest of canaries planted in a user's dataset (memlens.inject writes it, memlens.AuditCallback and `memlens
audit` read it): the one definition of its files, `<stem>.json` with `<stem>.planted.jsonl` and
`<stem>.heldout.jsonl` beside it, and for a preference dataset `<stem>.pairs_planted.jsonl` and
`<stem>.pairs_heldout.jsonl` (each canary's preference pair in the pair-membership form: id, prefix = the prompt,
suffix = "", chosen, rejected; harness/audit/preference_mia.py reads them)."""

from __future__ import annotations

from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_json

MANIFEST_VERSION = 1


def write_manifest(manifest: dict, path: str | Path) -> tuple[Path, Path]:
    """The manifest as JSON at `path`, and its planted and held-out canaries as audit-example JSONL beside it
    (`<stem>.planted.jsonl`, `<stem>.heldout.jsonl`: what `memlens audit audit.examples=...` reads). Returns the
    two JSONL paths."""
    path = Path(path)
    planted, heldout = path.with_suffix(".planted.jsonl"), path.with_suffix(".heldout.jsonl")
    # keys sorted: the manifest read back from its JSON copy (sorted there) writes the same bytes, so a resumed run's
    # files keep the fingerprints its earlier results were recorded with
    atomic_write_jsonl(planted, [{k: v for k, v in sorted(c.items()) if k not in ("positions", "pair")}
                                 for c in manifest["canaries"]])
    atomic_write_jsonl(heldout, [{k: v for k, v in sorted(c.items()) if k != "pair"} for c in manifest["heldout"]])
    if has_pairs(manifest):
        for rows, target in zip((manifest["canaries"], manifest["heldout"]), pair_files(path)):
            atomic_write_jsonl(target, [pair_row(c) for c in rows])
    atomic_write_json(path, manifest)           # last: a manifest on disk means its example files are whole
    return planted, heldout


def has_pairs(manifest: dict) -> bool:
    """Whether every canary, planted and held out, carries its preference pair (memlens.inject on preference data),
    with a canary on each side (membership needs members and non-members)."""
    rows = [*manifest["canaries"], *manifest["heldout"]]
    return bool(manifest["canaries"]) and bool(manifest["heldout"]) and all("pair" in c for c in rows)


def pair_files(path: str | Path) -> tuple[Path, Path]:
    """(planted pairs, held-out pairs) beside the manifest at `path`."""
    path = Path(path)
    return path.with_suffix(".pairs_planted.jsonl"), path.with_suffix(".pairs_heldout.jsonl")


def pair_row(canary: dict) -> dict:
    """A canary's pair as the pair-membership measure reads it: the trainer's prompt as the prefix, nothing after it
    (a preference trainer asks left to right), the chosen and rejected completions, and a planted canary's `repeat`
    (the measure's tables per dose)."""
    pair = canary["pair"]
    return {"id": canary["id"], "prefix": pair["prompt"], "suffix": "", "chosen": pair["chosen"],
            "rejected": pair["rejected"], **({"repeat": canary["repeat"]} if "repeat" in canary else {})}


def prompt_only_text(canary: dict) -> str:
    """A canary's prompt in a prompt-only (GRPO / RLOO) dataset: the whole canary, prefix, target and suffix, as
    memlens.inject places it (an RL trainer samples its completions after it)."""
    return canary["prefix"] + canary["target"] + canary["suffix"]


def read_manifest(manifest) -> dict:
    """A manifest given as the dict memlens.inject returned or as the path of its JSON, checked to be one."""
    if isinstance(manifest, (str, Path)):
        path = Path(manifest)
        if not path.is_file():
            raise UserError(f"manifest {str(path)!r}: not a file; pass the manifest memlens.inject returned, or the "
                            "manifest_path you gave it")
        manifest = read_json(path)
    if not isinstance(manifest, dict) or not manifest.get("canaries") or "heldout" not in manifest:
        raise UserError("manifest: not a memlens.inject manifest (no `canaries` / `heldout`); pass the second value "
                        "memlens.inject returned")
    return manifest
