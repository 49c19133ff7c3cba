"""`memlens <command> [-m] [hydra overrides]`: one entry point for every stage, audit and report.

Configs are composed with Hydra's compose API from conf/ (found relative to this package, so the
command works from any working directory). `-m/--multirun` expands comma-separated sweep overrides
into their cartesian product with Hydra's own override parser (as Hydra's BasicSweeper does) and runs
each point in turn; the swept keys and values of a point are passed to the command as `sweep_point`
so that stages can name their model directories after it (e.g. `RLFT.4/beta=0.005,lr=3e-06`).
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from memlens.harness.core.config import check_sections
from memlens.harness.core.console import TRAINING_COMMANDS, ExpectedRecords, quiet_libraries
from memlens.harness.core.errors import StorageError, UserError, storage_error, storage_message
from memlens.harness.core.kernels import pin_cpu_kernels
from memlens.harness.core.layout import report_dir
from memlens.harness.core.lock import SHARED, hold_directories
from memlens.harness.core.provenance import package_version
from memlens.harness.core.registry import load_plugins
from memlens.harness.core.shipped import shipped_dir
from memlens.harness.model.load import filter_transformers_records
from memlens.harness.report.findings import Roles


# Each command's function, imported by name inside a small loader: a module is imported only when its command runs, so
# `memlens --help` stays fast and the scorer never imports the recipes, and a reader (or an import-graph tool) follows
# a command to its code by imports alone.
def _audit():
    from memlens.harness.audit.command import main  # lazy: loads when its command runs
    return main


def _data():
    from memlens.synthetic_data.build import main  # lazy: loads when its command runs
    return main


def _train():
    from memlens.recipes.orchestration.pipeline import train_main  # lazy: loads when its command runs
    return train_main


def _run():
    from memlens.recipes.orchestration.pipeline import run_main  # lazy: loads when its command runs
    return run_main


def _report():
    from memlens.harness.report.render import main  # lazy: loads when its command runs
    return main


def _nmt():
    from memlens.harness.study_commands import nmt_command  # lazy: loads when its command runs
    return nmt_command


def _formal():
    from memlens.harness.study_commands import formal_command  # lazy: loads when its command runs
    return formal_command


def _status():
    from memlens.recipes.orchestration.status import main  # lazy: loads when its command runs
    return main


def _check():
    from memlens.recipes.orchestration.check import main  # lazy: loads when its command runs
    return main


def _verify():
    from memlens.harness.report.verify import main  # lazy: loads when its command runs
    return main


# command -> (its loader, help)
COMMANDS: dict[str, tuple[Callable[[], Callable], str]] = {
    "audit": (_audit, "score checkpoints against a control model (k-approx. counterfactual)"),
    "data": (_data, "build the datasets an experiment needs into <run_dir>/data/"),
    "train": (_train, "train one stage: memlens train stage=<name>"),
    "run": (_run, "data -> every stage of an experiment -> audit -> report"),
    "report": (_report, "render figures and report.md/html from stored audit results"),
    "nmt": (_nmt, "Finding Memo: train a seq2seq model and run algorithms 1-3"),
    "formal": (_formal, "paper 004's formal languages: measures, findings L1-L7, report"),
    "status": (_status,
               "where each model of a run stands: done, running (step k/n), queued, failed, stale; --watch redraws"),
    "check": (_check, "preflight of a model preset: files, sentinels, BOS/EOS/PAD, lengths"),
    "verify": (_verify, "re-hash a finished run's data and models, recompute its summary and findings, compare"),
}

# Set before anything imports huggingface_hub, transformers or datasets (they read these at import):
# nothing in memlens downloads, so no command may look anything up on the hub, send telemetry or
# resolve a cached hub id online. Models are fetched once by the user (`huggingface-cli download`).
OFFLINE_ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}


def stay_offline() -> None:
    os.environ.update(OFFLINE_ENVIRONMENT)


USAGE = "usage: memlens <command> [-m|--multirun] [key=value ...]\n\ncommands:\n" + "\n".join(
    f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items())


def config_dir() -> Path:
    """$MEMLENS_CONF, else the checkout's conf/ (editable install), else the conf/ a `pip install .` ships."""
    env = os.environ.get("MEMLENS_CONF")
    path = Path(env) if env else shipped_dir("conf")
    if path is None or not (path / "config.yaml").is_file():
        raise UserError(f"config directory {path} has no config.yaml; set MEMLENS_CONF to the "
                        "memlens conf/ folder or reinstall memlens (`pip install .` ships conf/)")
    return path


def expand_sweep(overrides: list[str]) -> list[tuple[list[str], dict[str, str]]]:
    """Cartesian product of sweep overrides: [(plain overrides, {swept key: value})]."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # lazy: `memlens --help` stays fast

    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    swept = [o for o in parsed if o.is_sweep_override()]
    axes = [[(o.get_key_element(), v) for v in o.sweep_string_iterator()] for o in swept]
    points = []
    for combo in itertools.product(*axes) if axes else [()]:
        point = {k: v for k, v in combo}
        points.append((fixed + [f"{k}={v}" for k, v in combo], point))
    return points


def sweep_run_suffix(sweep_point: dict[str, str]) -> str:
    """`<key>=<value>,...` of the swept keys outside `stages.` ("" when there are none): the run directory
    of one multirun point below run_dir. Swept stage keys name model directories instead
    (recipes/orchestration/pipeline.py)."""
    other = {}
    for key, value in sweep_point.items():
        key = str(key).lstrip("+~")
        if not key.startswith("stages."):
            other[key] = value
    return ",".join(f"{k}={v}" for k, v in sorted(other.items()))


def compose(overrides: list[str], sweep_point: dict[str, str] | None = None):
    """Compose conf/config.yaml with `overrides`; errors name the key and the fix."""
    from hydra import compose as hydra_compose  # lazy: `memlens --help` stays fast
    from hydra import initialize_config_dir  # lazy: keeps `memlens --help` fast
    from hydra.errors import HydraException  # lazy: keeps `memlens --help` fast
    from omegaconf import OmegaConf, open_dict  # lazy: keeps `memlens --help` fast

    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except HydraException as e:
        raise UserError(f"bad config override: {override_hint(str(e), overrides)}") from None
    with open_dict(cfg):
        cfg.sweep_point = dict(sweep_point or {})
        # A multirun point that sweeps keys outside `stages.` (e.g. seed=0,1) runs in its own directory;
        # set before resolving, so every ${run_dir} path (audit.out_dir, report.out_dir, ...) follows it.
        suffix = sweep_run_suffix(cfg.sweep_point)
        if suffix:
            cfg.run_dir = f"{cfg.run_dir}/{suffix}"
    OmegaConf.resolve(cfg)
    # Before anything reads a registry: a plugin's objective, attack, measure or finding is then as known to the
    # config checks, the plan, the audit and the report as a built-in (harness/core/registry.py, docs/architecture.md).
    plugins = cfg.get("plugins") or []
    load_plugins([plugins] if isinstance(plugins, str) else list(plugins))
    check_config(cfg)
    return cfg


# Hydra's own command-line flags that memlens answers as any Hydra app does (hydra/_internal/utils.py get_args_parser):
# --help, --hydra-help, --cfg job|hydra|all with --resolve and --package, --info, -m. The rest choose another config
# source or a shell integration, which memlens's one conf/ (MEMLENS_CONF) does not offer: refused with the way to do it.
UNSUPPORTED_FLAGS = {
    "config_path": "--config-path", "config_name": "--config-name", "config_dir": "--config-dir",
    "shell_completion": "--shell-completion", "experimental_rerun": "--experimental-rerun"}


def watch_flag(name: str, rest: list[str]) -> tuple[float | None, list[str]]:
    """`memlens status --watch[=SECONDS]` (default every 10 s): the seconds, and the arguments without the flag."""
    given = [a for a in rest if a == "--watch" or a.startswith("--watch=")]
    if not given:
        return None, rest
    if name != "status":
        raise UserError(f"--watch is a flag of `memlens status`, not of `memlens {name}`")
    value = given[-1].partition("=")[2] or "10"
    try:
        seconds = float(value)
        if not seconds > 0:
            raise ValueError
    except ValueError:
        raise UserError(f"--watch={value}: give the seconds between redraws, a positive number (e.g. --watch=30)") \
            from None
    return seconds, [a for a in rest if a not in given]


def parse_flags(name: str, rest: list[str]):
    """Hydra's flags and the overrides after `memlens <name>`, parsed by Hydra's own argument parser."""
    from hydra._internal.utils import get_args_parser  # lazy: `memlens --help` stays fast

    parser = get_args_parser()
    parser.prog = f"memlens {name}"
    try:
        flags = parser.parse_intermixed_args(rest)   # `-m` and flags anywhere among the overrides
    except SystemExit as e:           # argparse printed the usage and the bad flag
        raise UserError(f"`memlens {name} --help` lists the flags and config groups") from e
    given = [flag for key, flag in UNSUPPORTED_FLAGS.items() if getattr(flags, key, None)]
    if given:
        raise UserError(f"{given[0]} is not supported: memlens composes one conf/ folder (set MEMLENS_CONF=DIR to "
                        "use a copy of it); pick a named setup with experiment=<name>")
    return flags


def show_without_running(name: str, flags) -> int:
    """--help, --hydra-help, --cfg and --info: print, run nothing, write nothing (exit 0). Each sweep point's config
    is composed and checked first, as the command would (a bad key is exit 2 here too)."""
    from hydra import initialize_config_dir  # lazy: keeps `memlens --help` fast
    from hydra.core.global_hydra import GlobalHydra  # lazy: keeps `memlens --help` fast

    points = expand_sweep(list(flags.overrides)) if flags.multirun else [(list(flags.overrides), {})]
    for i, (overrides, point) in enumerate(points):
        compose(overrides, point)                    # validates keys, values and plugins, as the command would
        if len(points) > 1:
            print(f"# sweep point {i + 1}/{len(points)}: {point}")
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            hydra = GlobalHydra.instance().hydra
            if flags.help:
                print(command_help(name, hydra, overrides, flags.resolve))
            elif flags.hydra_help:
                from hydra._internal.utils import get_args_parser  # lazy: keeps `memlens --help` fast

                hydra.hydra_help(config_name="config", args_parser=get_args_parser(), args=flags)
            elif flags.cfg:
                hydra.show_cfg(config_name="config", overrides=overrides, cfg_type=flags.cfg,
                               package=flags.package, resolve=flags.resolve)
            else:
                hydra.show_info(flags.info, config_name="config", overrides=overrides)
        if flags.help or flags.hydra_help:
            break                                    # one help text is enough for a sweep
    return 0


def command_help(name: str, hydra, overrides: list[str], resolve: bool) -> str:
    """Hydra's app help (hydra/conf/hydra/help/default.yaml) for one memlens command: what it does, its flags, the
    config groups with their options, and the config these overrides compose to."""
    from omegaconf import OmegaConf  # lazy: keeps `memlens --help` fast

    cfg = hydra.compose_config(config_name="config", overrides=overrides, run_mode=_run_mode(),
                               with_log_configuration=False)
    cfg = hydra.get_sanitized_cfg(cfg, "job")
    groups = hydra.format_config_groups(lambda group: not group.startswith("hydra"))
    return (f"memlens {name}: {COMMANDS[name][1]}\n\n"
            f"usage: memlens {name} [-m|--multirun] [--cfg job|hydra|all [--resolve] [-p PACKAGE]] "
            "[--info [all|config|defaults|defaults-tree|plugins|searchpath]] [key=value ...]\n\n"
            "== Configuration groups ==\nCompose your configuration from those groups (group=option)\n\n"
            f"{groups}\n== Config ==\nOverride anything in the config (foo.bar=value); --cfg job prints it alone\n\n"
            f"{OmegaConf.to_yaml(cfg, resolve=resolve)}\n"
            "Docs: README.md (commands and experiments), docs/architecture.md (config groups and keys)")


def _run_mode():
    from hydra.types import RunMode  # lazy: keeps `memlens --help` fast

    return RunMode.RUN


def override_hint(message: str, overrides: list[str]) -> str:
    """Hydra's message for a bad override, with memlens's fix where Hydra's hint points the wrong way: a key only an
    experiment defines (`stage`, `stages.FT.1.lr`) needs `experiment=<name>`, not Hydra's `+key=`."""
    match = re.search(r"Could not override '([^']+)'", message)
    if match is None:
        return message
    key = match.group(1)
    root = key.split(".")[0]
    defined_by = experiments_defining(root)
    chose_experiment = any(o.split("=", 1)[0].lstrip("+~") == "experiment" for o in overrides)
    if defined_by and not chose_experiment and root not in root_config_keys():
        return (f"{key} is a key of an experiment, and no experiment was named: add experiment=<name> "
                f"(experiments that set {root!r}: {', '.join(defined_by)})")
    return (f"{key}: no such key in the composed config; check the spelling (`memlens <command> "
            f"{'experiment=<name> ' if not chose_experiment else ''}--cfg job` prints every key)")


def root_config_keys() -> set[str]:
    """Top-level keys of conf/config.yaml with its default groups, before any experiment."""
    from hydra import compose as hydra_compose  # lazy: only on a bad override
    from hydra import initialize_config_dir  # lazy: only on a bad override

    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return set(hydra_compose(config_name="config"))


def experiments_defining(root_key: str) -> list[str]:
    """Names of the experiments in conf/experiment/ whose YAML sets the top-level key `root_key`."""
    pattern = re.compile(rf"^{re.escape(root_key)}\s*:", flags=re.M)
    return sorted(path.stem for path in (config_dir() / "experiment").glob("*.yaml")
                  if pattern.search(path.read_text(encoding="utf-8")))


def check_config(cfg) -> None:
    """Unknown keys and non-boolean flags in audit/report/data (against conf/<group>/default.yaml) and
    in model (against the preset dataclass) are errors for every command, however they were added."""
    from omegaconf import OmegaConf  # lazy: keeps `memlens --help` fast

    check_sections(cfg, config_dir())
    report = cfg.get("report")
    if report is not None and report.get("findings_models"):
        Roles.load(OmegaConf.to_container(report.findings_models, resolve=True))
    if cfg.get("model") is not None:
        # The preset's schema is memlens.recipes.stages.models.ModelSettings (+ LoraSettings): the CLI dispatches to the
        # recipes anyway, and no layer of harness imports them.
        from memlens.recipes.stages.models import parse_model  # lazy: the recipes load only when a config is checked

        parse_model(OmegaConf.to_container(cfg.model, resolve=True), "model")


def load_command(name: str):
    """The function that runs command `name`; `run`, `train` and `nmt` get the measuring side they need."""
    if name not in COMMANDS:
        raise UserError(f"unknown command {name!r}\n{USAGE}")
    command = COMMANDS[name][0]()
    if name in ("run", "train", "check"):
        return functools.partial(command, measurement=measurement())
    return command


def measurement():
    """The training pipeline's link to the measuring side: `memlens audit` / `report` after training, and
    moving a replaced model's audit results aside (memlens.recipes.orchestration.pipeline.Measurement). The CLI is the one place
    both sides are imported: the recipes never import memlens.harness.audit or memlens.harness.report."""
    from memlens.harness.audit.command import check_settings  # lazy: the audit loads when a training command runs
    from memlens.harness.audit.retire import retire_model_results  # lazy: as above
    from memlens.recipes.orchestration.pipeline import Measurement  # lazy: the recipes load with it too

    return Measurement(run_command=lambda command, cfg: int(load_command(command)(cfg) or 0),
                       retire_audit_results=retire_model_results, check_audit=check_settings)


def directories_written(name: str, cfg) -> list[tuple[str, Path]]:
    """(config key, directory) of what a command writes: each is locked while it runs (harness/core/lock.py).

    A run's commands lock its run_dir, and those that write audit results or the report lock those
    directories too (they may lie outside the run; a retrained stage moves its results aside); an audit
    of one model (audit.model_dir=...) writes only its audit.out_dir, and the report only reads the audit.
    """
    run_dir = [("run_dir", Path(str(cfg.run_dir)))] if cfg.get("run_dir") else []
    audit = cfg.get("audit") or {}
    audit_out = [("audit.out_dir", Path(str(audit.get("out_dir"))))] if audit.get("out_dir") else []
    report = [("report.out_dir", report_dir(cfg))] if cfg.get("run_dir") else []
    if name == "audit":
        return audit_out if audit.get("model_dir") else run_dir + audit_out
    if name == "train":            # shared: its models are locked one by one (recipes/orchestration/pipeline.py training_locks)
        return [(key, path, SHARED) for key, path in run_dir + audit_out + report]
    if name == "run":
        return run_dir + audit_out + report
    if name == "report":
        return run_dir + report
    if name in ("check", "status"):
        return []          # read config, tokenizer files, a run's records and SLURM's queue only
    if name == "verify":   # reads the run (and renders its report into a temporary folder): no writer meanwhile
        return [(key, path, SHARED) for key, path in run_dir]
    return run_dir


def run_locked(name: str, command, cfg, argv: list[str]) -> int:
    """`command(cfg)` holding the directories it writes; a write the disk refuses (full, read-only, no
    permission) becomes a StorageError naming the file, or the directory, and the fix (exit 2)."""
    written = directories_written(name, cfg)
    with hold_directories(written, shlex.join(["memlens", *argv])):
        try:
            return int(command(cfg) or 0)
        except UserError:
            raise
        except Exception as e:
            refused = storage_error(e) or _refusing_disk(e, [entry[1] for entry in written])   # (key, path[, mode])
            if refused is None:
                raise
            raise refused from None


def _refusing_disk(e: Exception, directories: list[Path]):
    """A library that wrapped a failed write without its errno (torch's "file write failed"): name the
    written directory whose disk is full or read-only, if one is."""
    for directory in directories:
        try:
            disk = os.statvfs(directory)
        except OSError:
            continue
        code = errno.EROFS if disk.f_flag & os.ST_RDONLY else errno.ENOSPC if disk.f_bavail == 0 else None
        if code is not None:
            return StorageError(f"{storage_message(directory, code)} (the failed write: "
                                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})")
    return None


def run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] == "--version":
        print(f"memlens {package_version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise UserError(f"unknown command {name!r}\n{USAGE}")
    watch, rest = watch_flag(name, rest)
    flags = parse_flags(name, rest)
    multirun, overrides = flags.multirun, list(flags.overrides)
    if flags.help or flags.hydra_help or flags.cfg or flags.info:
        return show_without_running(name, flags)
    quiet_libraries()              # before the command's libraries are imported (harness/core/console.py)
    if name in TRAINING_COMMANDS:
        filter_transformers_records(ExpectedRecords())
    command = load_command(name)
    if watch is not None:
        command = functools.partial(command, watch=watch)
    points = expand_sweep(overrides) if multirun else [(overrides, {})]
    status = 0
    as_jobs = []
    for i, (point_overrides, point) in enumerate(points):
        if multirun:
            print(f"[memlens] sweep point {i + 1}/{len(points)}: {point}", flush=True)
        cfg = compose(point_overrides, point)
        if name == "run" and (cfg.get("launcher") or {}).get("kind") is not None:
            # each model a job that locks what it trains; the driver locks what it writes after them. The points go
            # to one driver together, so that a cluster trains them at once.
            as_jobs.append((cfg, point_overrides, directories_written(name, cfg)))
            continue
        status = max(status, run_locked(name, command, cfg, argv))
    if as_jobs:
        # lazy: the recipes load when a training command runs
        from memlens.recipes.orchestration.launcher import run_jobs

        status = max(status, run_jobs(as_jobs, measurement()))
    return status


def compose_only(argv: list[str]) -> list:
    """The configs `memlens <argv>` would run, composed and checked exactly as `run` composes them (one per
    sweep point with -m), with nothing run or written: tests/unit/project/test_docs_commands.py composes every command
    README.md and docs/ show with it, so a renamed key or experiment fails a test instead of a reader."""
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise UserError(f"unknown command {name!r}: one of {', '.join(COMMANDS)}")
    _, rest = watch_flag(name, rest)
    multirun = any(a in ("-m", "--multirun") for a in rest)
    overrides = [a for a in rest if a not in ("-m", "--multirun")]
    points = expand_sweep(overrides) if multirun else [(overrides, {})]
    return [compose(point_overrides, point) for point_overrides, point in points]


def main(argv: list[str] | None = None) -> None:
    stay_offline()
    try:
        pin_cpu_kernels()
        code = run(sys.argv[1:] if argv is None else argv)
    except UserError as e:
        print(f"memlens: error: {e}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt:
        print("memlens: interrupted; rerun the same command to continue where it stopped", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
