"""What the dataset-build tests share (test_synthetic_build.py, test_synthetic_coins.py): the config of a small build
and the strings a stage could train on in a row. Helpers only: no test lives here."""

from memlens.harness.cli import compose


def cfg_for(run_dir, *overrides):
    """The default data config at 120 SD programs, written under `run_dir`, with `overrides`."""
    return compose([f"run_dir={run_dir}", "data.sd.size=120", *overrides])


def training_strings(row: dict) -> list[str]:
    """Every string a stage could train on in a row (code, FIM parts, prompts, completions, chosen/rejected)."""
    return [v for v in row.values() if isinstance(v, str) and len(v) > 2]
