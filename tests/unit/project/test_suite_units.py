"""benchmarks/suite_units.py: pytest's duration lines summed per scheduling unit (tests/conftest.py work_unit)."""

from __future__ import annotations

import pytest

from tests.scripts import load_script

LOG = """\
============================= slowest durations ==============================
10.50s call     tests/integration/test_audit_callback.py::test_a[sft-None]
2.25s setup    tests/integration/test_audit_callback.py::test_b
0.25s teardown tests/integration/test_audit_callback.py::test_b
7.00s call     tests/integration/test_run_integrity.py::test_x
0.50s call     tests/integration/test_run_integrity.py::test_v[audit.dataset=a/b id]
3.00s call     tests/integration/test_run_integrity.py::test_y
4.00s setup    tests/integration/test_model_families.py::test_z[starcoder2]
1.50s call     tests/integration/test_model_families.py::test_w[starcoder2]
9.00s call     tests/integration/test_model_families.py::test_z[codegemma]
1569 passed, 8 skipped in 982.03s (0:16:22)
"""


@pytest.fixture(scope="module")
def suite_units():
    return load_script("suite_units")


def test_a_file_a_spread_test_and_a_family_are_one_unit_each(suite_units):
    seconds = suite_units.unit_seconds(LOG)
    # a file's setup, call and teardown summed; test_run_integrity.py spreads test by test; a family by parameter
    # (a parameter's "/" and space stay in its name)
    assert seconds == {"test_audit_callback.py": 13.0, "test_run_integrity.py::test_x": 7.0,
                       "test_run_integrity.py::test_v[audit.dataset=a/b id]": 0.5,
                       "test_run_integrity.py::test_y": 3.0, "test_model_families.py[starcoder2]": 5.5,
                       "test_model_families.py[codegemma]": 9.0}


def test_the_table_ranks_by_the_first_log_and_sums_each(suite_units):
    before = suite_units.unit_seconds(LOG)
    after = suite_units.unit_seconds(LOG.replace("10.50s call", "4.50s call"))
    lines = suite_units.table({"before": before, "after": after}, top=2).splitlines()
    assert lines[0] == "| unit | before (s) | after (s) |"
    assert lines[2:4] == ["| test_audit_callback.py | 13.0 | 7.0 |", "| test_model_families.py[codegemma] | 9.0 | 9.0 |"]
    assert lines[-1] == "| **all units (work of all workers)** | **38** | **32** |"


def test_a_log_without_durations_is_refused_naming_it(suite_units, tmp_path, capsys):
    empty = tmp_path / "plain.log"
    empty.write_text("1 passed in 0.1s\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        suite_units.main([str(empty)])
    assert exit_info.value.code == 2 and "plain.log: no duration lines (run pytest with --durations=0)" in \
        capsys.readouterr().err
