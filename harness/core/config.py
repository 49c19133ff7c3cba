"""Config checks every reader shares: real booleans only, and no unknown keys.

A flag read with `bool(value)` turns any non-empty string into true, so `trust_remote_code=no`
would run a model folder's code. Every boolean key is therefore read through `require_bool`, which
accepts only YAML/Hydra `true`/`false`. Unknown keys are refused, however they were added (an
experiment file, `key=value`, Hydra's `+key=value`), by `check_sections` at composition time and by
`check_dataclass_values` for the settings dataclasses (stages, model presets, nmt sections).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError

# Config groups whose keys are exactly those of their default file (conf/<group>/default.yaml).
SCHEMA_GROUPS = ("audit", "report", "data")


def require_bool(value: Any, key: str, *, allow_none: bool = False) -> bool | None:
    """`value` if it is a real boolean (or None when allowed); otherwise a UserError naming `key`."""
    if isinstance(value, bool) or (allow_none and value is None):
        return value
    choices = "true, false or null" if allow_none else "true or false"
    raise UserError(f"{key}={value!r}: must be {choices} (a YAML/Hydra boolean, not a string or a "
                    f"number); pass {key}=true or {key}=false")


# audit.utility: paper 003 Table 2's utility of every planned model after the NED audit (conf/audit/default.yaml).
AUDIT_UTILITY_DEFAULT = True


def audit_utility(audit: Any) -> bool:
    """audit.utility of the `audit` config group, checked (a missing key or group: AUDIT_UTILITY_DEFAULT). Defined
    here, below both readers: the audit's NedSettings (memlens.harness.audit.extraction) and the run's data plan
    (memlens.recipes.orchestration.stage_plan builds humaneval_infill and pd_eval only when it is on), which may not
    import harness/audit."""
    value = AUDIT_UTILITY_DEFAULT if audit is None or "utility" not in audit else audit.get("utility")
    return require_bool(value, "audit.utility")


def _union_members(tp: Any) -> tuple:
    """The members of `X | Y` or Optional[X]; () for anything else (list[int]'s argument is not a member)."""
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else ()


def _is_bool_type(tp: Any) -> tuple[bool, bool]:
    """(is a boolean field, also accepts None) for a resolved type hint."""
    if tp is bool:
        return True, False
    args = _union_members(tp)
    if args and bool in args and all(a in (bool, type(None)) for a in args):
        return True, type(None) in args
    return False, False


def _is_number_type(tp: Any) -> tuple[bool, bool]:
    """(is an int or float field, also accepts None) for a resolved type hint."""
    if tp in (int, float):
        return True, False
    args = _union_members(tp)
    numbers = [a for a in args if a is not type(None)]
    if numbers and all(a in (int, float) for a in numbers):
        return True, type(None) in args
    return False, False


def require_number(value: Any, key: str, allow_none: bool = False) -> None:
    """A number (not a boolean, not a string such as `1e-3x` or `abc` that Hydra passes on as text) for `key`."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{key}={value!r}: must be a number{' or null' if allow_none else ''}")


def check_dataclass_values(cls, values: dict[str, Any], where: str) -> None:
    """Refuse keys `cls` does not have (naming the valid ones), non-booleans for its bool fields and non-numbers for
    its int and float fields (their range is each recipe's own check)."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise UserError(f"{where}: unknown key(s) {unknown}; valid keys are {sorted(names)} "
                        "(check the spelling in the experiment config or the override)")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        is_bool, nullable = _is_bool_type(hints.get(name))
        if is_bool:
            require_bool(value, f"{where}.{name}", allow_none=nullable)
        is_number, nullable = _is_number_type(hints.get(name))
        if is_number:
            require_number(value, f"{where}.{name}", allow_none=nullable)


def _default_file(conf_dir: Path, group: str) -> Path | None:
    """conf/<group>/<name>.yaml, as chosen by the root config's defaults list."""
    from omegaconf import OmegaConf  # lazy: keeps `memlens --help` fast

    root = OmegaConf.to_container(OmegaConf.load(conf_dir / "config.yaml"), resolve=False)
    for entry in root.get("defaults") or []:
        if isinstance(entry, dict) and entry.get(group):
            path = conf_dir / group / f"{entry[group]}.yaml"
            return path if path.is_file() else None
    return None


def _check_tree(actual: Any, schema: Any, where: str) -> None:
    """Every key of `actual` must be in `schema` (recursing where the schema holds a non-empty
    mapping, e.g. data.sd); a key whose default is true/false must hold a real boolean."""
    if not isinstance(actual, dict) or not isinstance(schema, dict):
        return
    unknown = sorted(str(k) for k in actual if k not in schema)
    if unknown:
        raise UserError(f"{', '.join(f'{where}.{k}' for k in unknown)}: unknown key; the valid keys under "
                        f"{where} are {', '.join(sorted(str(k) for k in schema))} (check the spelling; "
                        "a key added with Hydra's +key=value is refused too)")
    for key, value in actual.items():
        default = schema[key]
        if isinstance(default, bool):
            require_bool(value, f"{where}.{key}")
        elif isinstance(default, dict) and default:
            _check_tree(value, default, f"{where}.{key}")


def check_sections(cfg, conf_dir: Path, groups: tuple[str, ...] = SCHEMA_GROUPS) -> None:
    """The composed sections of `groups` against their default files (conf/<group>/default.yaml).

    The default file of a group is its schema: a key it lacks is unknown, a key whose default is
    true/false is a boolean. (The `model` section is a dataclass, memlens.recipes.stages.models.ModelSettings,
    checked with `check_dataclass_values` by the CLI.)
    """
    from omegaconf import OmegaConf  # lazy: keeps `memlens --help` fast

    for group in groups:
        if cfg.get(group) is None:
            continue
        path = _default_file(conf_dir, group)
        if path is None:
            continue
        schema = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        _check_tree(OmegaConf.to_container(cfg[group], resolve=True), schema, group)
