"""Every audit measure's settings (issue #69): one frozen dataclass per measure, registered with it, parsed when the
audit is planned (harness/audit/command.py plan_settings, which `memlens audit`, `memlens check` and `memlens run`'s
pre-check call) before any model is loaded or scored.

The defaults are written once, in the dataclasses; conf/audit/default.yaml repeats them only so that Hydra accepts
`audit.<key>=...` overrides (its keys are the group's schema), and the first test keeps the two equal. The sweep gives
every `audit.*` key a measure reads a bad value: the plan refuses each with a UserError (the CLI's exit 2) naming
`audit.<key>=`, with nothing written. tests/integration/test_audit_cli.py makes the one real CLI call."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from memlens.harness.audit.command import plan_settings
from memlens.harness.audit.measure_registry import MEASURES
from memlens.harness.audit.settings import AuditSettings
from memlens.harness.core.errors import UserError
from memlens.harness.core.shipped import shipped_path

BUILT_INS = ("ned", "loss", "mia", "discoverable", "epsilon", "pair_mia", "prompt_mia")

# One bad value per key (wrong type or out of range); test_every_key_has_a_bad_value keeps it complete.
BAD = {
    "k": 2, "max_new_tokens": 0, "target_tokens": "x", "min_target_tokens": -1, "prompt_ned_threshold": 1.5,
    "batch_size": True, "fim_family": 3, "device": "gpu", "trust_remote_code": "yes", "progress": "x", "threads": 0,
    "allow_empty": 1, "draft": "fast", "sanity_baseline": "no",
    "utility": "yes", "utility_examples": 0,
    "tau": 0, "loss_heldout": 5,
    "mia_spans": ["prog"], "mia_bootstrap": 0, "mia_reference": 3,
    "discoverable_schemes": [], "discoverable_queries": [0], "discoverable_p": [2],
    "epsilon_attack": "lossx", "epsilon_span": "middle", "epsilon_delta": 1.0, "epsilon_confidence": 0,
    "epsilon_guesses": [[0.9, 0.9]],
    "prompt_mia_prompts": 1, "prompt_mia_samples": 1, "prompt_mia_k": 0, "prompt_mia_temperature": 0,
    "prompt_mia_max_new_tokens": "x", "prompt_mia_diba": "yes", "prompt_mia_checkpoints": "last",
}


def _settings_classes() -> list[type]:
    """AuditSettings (the knobs every measure shares) and each built-in measure's settings dataclass."""
    return [AuditSettings, *(MEASURES[name].settings.__self__ for name in BUILT_INS)]


def _keys(cls) -> list[str]:
    """The audit keys a settings dataclass reads (its `scoring` field is AuditSettings, swept on its own)."""
    return [getattr(cls, "KEYS", {}).get(f.name, f.name) for f in dataclasses.fields(cls) if f.name != "scoring"]


def _shipped(**audit):
    """The composed config's audit group: conf/audit/default.yaml (its `${device}` resolved as conf/config.yaml's)."""
    device = OmegaConf.load(shipped_path("conf/config.yaml")).device
    group = OmegaConf.merge(OmegaConf.load(shipped_path("conf/audit/default.yaml")), audit)
    return OmegaConf.create({"run_dir": "/nonexistent/run", "device": device, "audit": group})


def test_each_measure_registers_a_frozen_settings_dataclass_whose_defaults_the_yaml_repeats():
    assert tuple(MEASURES)[:len(BUILT_INS)] == BUILT_INS
    for cls in _settings_classes():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        assert cls.from_config(_shipped().audit) == cls(), cls          # conf/audit/default.yaml == the dataclass
        assert cls.from_config(OmegaConf.create({})) == cls(), cls      # a config built in code: the same defaults


def test_every_key_has_a_bad_value():
    assert sorted(BAD) == sorted({key for cls in _settings_classes() for key in _keys(cls)})


@pytest.mark.parametrize("key", sorted(BAD))
def test_a_bad_value_is_refused_when_the_audit_is_planned_naming_the_key(key, tmp_path):
    # measures=[ned] (the default): a key of a measure that is not asked for is refused too
    cfg = _shipped(**{key: BAD[key]}, out_dir=str(tmp_path / "audit"))
    with pytest.raises(UserError, match=rf"audit\.{key}="):
        plan_settings(cfg)
    assert not (tmp_path / "audit").exists()


def test_the_plan_hands_each_measure_its_parsed_settings():
    parsed = plan_settings(_shipped(measures=list(BUILT_INS), mia_bootstrap=200, tau=0.5, batch_size=8))
    assert sorted(parsed) == sorted(BUILT_INS)
    assert parsed["mia"].bootstrap == 200 and parsed["loss"].tau == 0.5
    assert {parsed[name].scoring.batch_size for name in ("ned", "loss", "mia", "discoverable")} == {8}
