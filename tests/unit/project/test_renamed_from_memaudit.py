"""Runs, configs and environments from before the rename of memaudit to memlens (0.2.0) keep working, or stop
with the new name to use; what a run records says which package wrote it."""

from __future__ import annotations

import pytest

import memlens
from memlens.harness.cli import refuse_renamed_environment
from memlens.harness.core.errors import UserError
from memlens.harness.core.provenance import provenance
from memlens.harness.report.analyses import code_version
from memlens.harness.text.fim import FAMILIES, canonical_family
from memlens.recipes.common import same_settings

OLD_STAGE = {"lr": 3e-3, "model": {"name": "micro", "fim_family": "memaudit", "vocab_size": 512}, "datasets": ["pd_1"]}


def test_a_stage_recorded_with_the_old_family_name_has_the_same_settings():
    new = {**OLD_STAGE, "model": {**OLD_STAGE["model"], "fim_family": "memlens"}}
    assert same_settings(OLD_STAGE, new) and same_settings(new, OLD_STAGE)


@pytest.mark.parametrize("change", [{"lr": 1e-3}, {"model": {**OLD_STAGE["model"], "fim_family": "starcoder"}},
                                    {"datasets": ["pd_1", "sd_base"]}])
def test_any_other_difference_still_counts(change):
    assert not same_settings(OLD_STAGE, {**OLD_STAGE, **change})


def test_the_old_family_name_resolves_to_the_shipped_tokenizers_sentinels():
    assert canonical_family("memaudit") == canonical_family("MEMLENS") == "memlens"
    assert canonical_family("starcoder2") == "starcoder2" and canonical_family(None) is None
    assert "memaudit" not in FAMILIES and FAMILIES["memlens"].eos == "<eos>"


def test_an_old_environment_variable_stops_with_its_new_name(monkeypatch):
    monkeypatch.delenv("MEMAUDIT_CONF", raising=False)
    refuse_renamed_environment()                     # nothing old set: nothing to say
    monkeypatch.setenv("MEMAUDIT_CONF", "/somewhere/conf")
    with pytest.raises(UserError, match=r"MEMAUDIT_CONF -> MEMLENS_CONF"):
        refuse_renamed_environment()


def test_every_record_names_the_package_and_its_version():
    record = provenance(seed=3)
    assert record["package"] == {"name": "memlens", "version": memlens.__version__}
    assert record["packages"]["memlens"] == memlens.__version__
    assert code_version(record) == f"memlens {memlens.__version__}"


def test_a_record_from_before_the_rename_names_memaudit():
    old = {"git_commit": "97b597c", "packages": {"memaudit": "0.1.0", "torch": "2.13.0"}}
    assert code_version(old) == "memaudit 0.1.0"
    assert code_version({"packages": {}}) is None
