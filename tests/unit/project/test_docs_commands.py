"""Every `memlens ...` command README.md, docs/*.md and the conf/ files' header comments show composes (memlens.harness.cli.compose_only: the config keys,
experiments, sweeps and stage overrides resolve and validate; nothing trains), so a renamed key or experiment
breaks this test instead of the reader who copies the command. For `run` and `train` the experiment's stages are
planned too (recipes.orchestration.pipeline.plan), and every audit-plan model must be one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlens.harness.cli import compose_only
from tests.doc_commands import code_lines, comment_lines, memlens_argv

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONF_FILES = sorted((ROOT / "conf").rglob("*.yaml"))


def documented_commands() -> list[tuple[str, list[str]]]:
    found = {}
    for doc in DOCS:
        for line in code_lines(doc.read_text(encoding="utf-8")):
            argv = memlens_argv(line)
            if argv:
                found.setdefault(" ".join(argv), (doc.name, argv))
    for conf in CONF_FILES:           # the example in every config's header composes too
        for line in comment_lines(conf.read_text(encoding="utf-8")):
            argv = memlens_argv(line)
            if argv:
                found.setdefault(" ".join(argv), (str(conf.relative_to(ROOT)), argv))
    return list(found.values())


COMMANDS = documented_commands()


def test_the_docs_show_the_commands_a_newcomer_needs():
    shown = {" ".join(argv) for _, argv in COMMANDS}
    for needed in ("run experiment=quickstart", "run experiment=findings", "check model=qwen2.5_coder_1.5b",
                   "run experiment=preference_objectives", "run experiment=findings_rlvr"):
        assert any(needed in line for line in shown), needed
    assert any("audit.model_dir=" in line and "audit.control_dir=" in line for line in shown)
    assert any("data.canaries.file=" in line for line in shown)


def composes_in_a_fresh_process(argv: list[str]) -> None:
    """A command naming `plugins=`: composed (and planned) in a new interpreter, so the plugin's registrations stay
    there instead of joining this worker's registries for every later test."""
    import subprocess
    import sys

    code = ("import sys; from memlens.harness.cli import compose_only; "
            "from memlens.recipes.orchestration.stage_plan import plan; "
            "[plan(c) for c in compose_only(sys.argv[1:]) if sys.argv[1] in ('run', 'train')]")
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("doc,argv", COMMANDS, ids=[" ".join(argv)[:90] for _, argv in COMMANDS])
def test_every_documented_command_composes(doc, argv):
    from memlens.recipes.orchestration.stage_plan import plan

    if any(arg.startswith("plugins=") for arg in argv):
        composes_in_a_fresh_process(argv)
        return
    for cfg in compose_only(argv):
        if cfg.get("formal") is not None:          # paper 004's formal study: its own models, no stage plan
            from omegaconf import OmegaConf

            from memlens.harness.core.formal_study import FormalSettings

            assert FormalSettings.load(OmegaConf.to_container(cfg.formal, resolve=True)).jobs(), doc
            continue
        if argv[0] in ("run", "train"):
            planned = plan(cfg)
            names = {s.name for s in planned}
            for entry in cfg.get("audit_plan") or []:
                assert set(entry["models"]) <= names, (doc, entry)
            if argv[0] == "train":
                assert cfg.stage in names | {s.model_name for s in planned}, (doc, cfg.stage)


def test_a_renamed_key_is_caught():
    """The check can fail: a key no config has is refused with the key's name."""
    from memlens.harness.core.errors import UserError

    with pytest.raises(UserError, match="no_such_key"):
        compose_only(["run", "experiment=quickstart", "audit.no_such_key=1"])
    with pytest.raises(UserError):
        compose_only(["run", "experiment=no_such_experiment"])
