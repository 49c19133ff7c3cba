"""Which tests one pytest-xdist worker runs together (a unit) and the order units start in: tests/conftest.py's
scheduler, and benchmarks/suite_units.py's per-unit table of a test log. A helper module: it holds no test and
changes nothing when imported."""

from __future__ import annotations

# Tests of one file share its module- and session-scoped fixtures (a trained world, a pipeline run), so a file runs
# on one worker; in the files below every test builds its own run (on the session's audit world or the family
# fixtures, built once per worker) or reads the smoke run both workers share (tests/integration/conftest.py
# `smoke`, built once), so they spread test by test. (xdist's own `--dist loadgroup` marks do not group under
# pytest 9.2 with xdist 3.8: measured, every test ran as its own group; this scheduler is xdist's documented hook.)
SPREAD_FILES = {"test_experiments_at_toy_size.py", "test_reliability.py", "test_run_integrity.py",
                "test_pipeline_smoke.py"}
# ... and in these, the tests of one parameter go together: test_model_families.py's `family_run` is a module-scoped
# fixture per family (a trimmed smoke run, ~20 s), which a worker builds for every family it meets; spread test by
# test, each family's run was built on both workers (measured at 36d7c68: 8 builds for 4 families, ~180 s).
SPREAD_BY_PARAMETER = {"test_model_families.py"}

# Units start longest first, so that the two workers finish together instead of one running a long test alone at
# the end (xdist hands the next unit in this order to whichever worker has run out; its own default order, by tests
# per unit, put every one-test unit — the longest among them — last). Seconds of one worker, measured on an idle
# 2-core AMD EPYC with AVX-512 (`pytest -n 2 --durations=0` at fb3aea7, tests/README.md "Time"; the callback file
# +10 s for its DPO pair test, added after); units not listed (under 10 s each) follow in file order. The first four
# are placed by hand: one worker builds the shared smoke run (`smoke`, ~50 s) while the other runs two long units
# that do not read it, so neither waits on the other.
SMOKE = "test_pipeline_smoke.py::"
TOY = "test_experiments_at_toy_size.py::test_experiment_runs_end_to_end_at_toy_size"
FIRST_UNITS = (f"{SMOKE}test_every_stage_trained_in_dependency_order", f"{TOY}[findings]",
               f"{SMOKE}test_the_smoke_run_on_the_other_cpu_kernel_level", f"{TOY}[preference_objectives]")
UNIT_SECONDS = {
    "test_audit_callback.py": 91, f"{SMOKE}test_the_smoke_run_as_slurm_jobs_trains_the_same_models": 74,
    "test_slurm_preemption.py": 59, "test_gpu_ladder.py": 52,
    f"{SMOKE}test_the_smoke_run_as_local_jobs_trains_the_rest_as_the_sequential_run": 40,
    "test_multiprocess_save.py": 35, f"{TOY}[doses]": 34, f"{TOY}[findings_rlvr]": 32,
    "test_hostile_completions.py": 29, f"{TOY}[ft_persistence]": 28, "test_nmt_pipeline.py": 27,
    "test_report_render.py": 27, "test_model_families.py[qwen2.5-coder]": 23, "test_own_data.py": 23,
    "test_model_families.py[codegemma]": 23, "test_model_families.py[deepseek-coder]": 23,
    "test_formal_languages.py": 22, f"{TOY}[rm_injection]": 22, "test_epsilon_audit.py": 19,
    "test_run_integrity.py::test_full_disk_while_building_data_or_training_is_exit_2_and_the_rerun_resumes": 19,
    "test_model_families.py[starcoder2]": 19,
    "test_run_integrity.py::test_two_sweep_points_train_at_once_and_one_model_is_never_trained_twice": 18,
    "test_plugins.py": 18, "test_kernel_levels.py": 17, "test_blind_mia.py": 16, "test_ppo_stage.py": 16,
    "test_mia_audit.py": 12, "test_docs_commands.py": 12, "test_offline.py": 12, "test_install.py": 12,
    f"{TOY}[quickstart]": 11,
    "test_run_integrity.py::test_full_disk_during_an_audit_is_exit_2_and_the_rerun_resumes": 11,
    "test_audit_run.py": 11, f"{TOY}[rl_prompts]": 11,
    f"{SMOKE}test_ft_under_accelerate_launch_with_two_cpu_processes": 11,
    "test_run_integrity.py::test_a_retrained_model_is_audited_and_reported_again": 11,
}


def work_unit(nodeid: str) -> str:
    """What one worker runs together: the test's file, the test alone in a SPREAD_FILES file, or every test of one
    parameter (`test_x[<param>]`) in a SPREAD_BY_PARAMETER file."""
    path = nodeid.split("::")[0]
    name = path.rsplit("/", 1)[-1]
    if name in SPREAD_BY_PARAMETER and nodeid.endswith("]") and "[" in nodeid:
        return f"{path}[{nodeid[nodeid.rindex('[') + 1:-1]}]"
    return nodeid if name in SPREAD_FILES else path


def unit_name(unit: str) -> str:
    """A unit named from its file name on (`tests/integration/test_x.py::test_y` -> `test_x.py::test_y`), so the tables
    and UNIT_SECONDS read without folders (a test's parameters may hold a "/": only the path loses its folders)."""
    path, sep, test = unit.partition("::")
    return path.rsplit("/", 1)[-1] + sep + test


def start_rank(unit: str) -> tuple[int, float]:
    """Where a unit starts: FIRST_UNITS in their order, then by UNIT_SECONDS, longest first."""
    name = unit_name(unit)
    if name in FIRST_UNITS:
        return 0, FIRST_UNITS.index(name)
    return 1, -UNIT_SECONDS.get(name, 0)
