"""The manifest of canaries planted in a user's dataset (memlens.inject writes it, memlens.AuditCallback and `memlens
audit` read it): the one definition of its files, `<stem>.json` with `<stem>.planted.jsonl` and
`<stem>.heldout.jsonl` beside it."""

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
    atomic_write_jsonl(planted, [{k: v for k, v in c.items() if k != "positions"} for c in manifest["canaries"]])
    atomic_write_jsonl(heldout, manifest["heldout"])
    atomic_write_json(path, manifest)           # last: a manifest on disk means its example files are whole
    return planted, heldout


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
