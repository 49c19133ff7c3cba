"""`memlens data` through the real CLI entry point with small sizes: every dataset lands on disk."""

import json

import pytest

from memlens.harness.cli import run
from memlens.harness.core.errors import UserError
from memlens.synthetic_data.data_settings import ALL_DATASETS


def test_memlens_data_builds_every_dataset(tmp_path, capsys):
    args = ["data", f"run_dir={tmp_path}", "data.sd.size=150", "data.pd.max_files=90",
            # a small corpus needs fatter splits so that every split gets files
            "data.pd.proportions.pd_pt=0.3", "data.pd.proportions.pd_1=0.14", "data.pd.proportions.pd_2=0.14",
            "data.pd.proportions.pd_2_val=0.1", "data.pd.proportions.pd_3=0.12",
            "data.pd.proportions.pd_3_val=0.1", "data.pd.proportions.pd_eval=0.1",
            # the user's files (docs/own-data.md): with them, "all" includes the datasets built from them
            "data.canaries.file=assets/examples/canaries.jsonl", "data.preference.file=assets/examples/pairs.jsonl"]
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "sd_rl_prompts: skipped" in out and "sd_rl_prompts_heldout: skipped" in out
    built = {p.parent.name for p in (tmp_path / "data").glob("*/manifest.json")}
    assert built == set(ALL_DATASETS) - {"sd_rl_prompts", "sd_rl_prompts_heldout"}
    for name in built:
        manifest = json.loads((tmp_path / "data" / name / "manifest.json").read_text())
        assert manifest["count"] > 0, name
    # the code-corpus contract: id, text, source_file; FIM: id, prefix, target, suffix
    pd1 = json.loads((tmp_path / "data" / "pd_1" / "rows.jsonl").read_text().splitlines()[0])
    assert {"id", "text", "source_file"} <= pd1.keys()
    ev = json.loads((tmp_path / "data" / "pd_eval" / "rows.jsonl").read_text().splitlines()[0])
    assert {"id", "prefix", "target", "suffix"} <= ev.keys()
    rm = json.loads((tmp_path / "data" / "rm_pd2" / "rows.jsonl").read_text().splitlines()[0])
    assert {"id", "prefix", "suffix", "completion", "label", "source"} <= rm.keys()
    # rerun: everything is complete and kept
    assert run(args) == 0
    assert "rows in" not in capsys.readouterr().out


def test_all_leaves_out_the_datasets_of_files_not_given(tmp_path):
    from omegaconf import OmegaConf

    from memlens.harness.cli import compose
    from memlens.synthetic_data.data_settings import USER_DATASETS, validate

    data = OmegaConf.to_container(compose([f"run_dir={tmp_path}"]).data, resolve=True)
    names = validate(data)["datasets"]
    assert set(names) == set(ALL_DATASETS) - set(USER_DATASETS)


def test_memlens_data_bad_override_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"data\.sd\.size"):
        run(["data", f"run_dir={tmp_path}", "data.sd.size=0"])
