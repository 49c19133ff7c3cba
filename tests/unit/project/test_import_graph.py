"""Built-ins are imported, plugins are looked up (DESIGN.md): from the CLI, every memlens module a command can run is
reached by import statements alone (benchmarks/import_graph.py reads them with `ast`, as installed), so a reader
follows `memlens run` to each trainer's config without a string or importlib in between."""

from __future__ import annotations

import pytest

from benchmarks.import_graph import START, graph, imports_of, modules, reached, shortest_path

# Run as their own processes inside the sandbox (recipes/sandbox/run.py starts them by path), never imported.
SANDBOX_PROGRAMS = {"memlens.recipes.sandbox.grader", "memlens.recipes.sandbox.program"}


@pytest.fixture(scope="module")
def edges():
    return graph()


def test_every_module_but_the_entry_point_and_the_sandboxed_programs_is_reached_from_the_cli(edges):
    assert set(edges) - reached(edges) == {"memlens.__main__", *SANDBOX_PROGRAMS}


@pytest.mark.parametrize("goal", ["memlens.recipes.stages.preference", "memlens.recipes.stages.sft",
                                  "memlens.recipes.stages.rl", "memlens.recipes.stages.reward",
                                  "memlens.recipes.stages.pretrain", "memlens.recipes.stages.verifiable_rewards"])
def test_memlens_run_reaches_each_stage_recipe_through_the_pipeline_and_the_stage_registry(edges, goal):
    path = shortest_path(edges, START, goal)
    assert path is not None and path[1:3] == ["memlens.recipes.orchestration.pipeline",
                                              "memlens.recipes.stages.registry"], path


@pytest.mark.parametrize("goal", ["memlens.harness.audit.extraction", "memlens.harness.audit.mia",
                                  "memlens.harness.audit.epsilon", "memlens.harness.report.findings.paper003",
                                  "memlens.harness.report.findings.doses"])
def test_each_builtin_measure_and_findings_module_is_imported_by_its_registry(edges, goal):
    registry = ("memlens.harness.audit.measure_registry" if ".audit." in goal
                else "memlens.harness.report.findings.registry")
    assert goal in edges[registry]


def test_the_graph_reads_relative_function_level_and_package_imports(tmp_path):
    pkg = tmp_path / "harness" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n    import memlens.harness.sub.c\n")
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    for folder in ("memlens", "recipes", "synthetic_data"):
        (tmp_path / folder).mkdir()
    known = modules(tmp_path)
    assert set(known) == {"memlens.harness", "memlens.harness.sub", "memlens.harness.sub.a", "memlens.harness.sub.b",
                          "memlens.harness.sub.c"}
    assert imports_of("memlens.harness.sub", known["memlens.harness.sub"], known) == {"memlens.harness",
                                                                                      "memlens.harness.sub.a"}
    assert imports_of("memlens.harness.sub.a", known["memlens.harness.sub.a"], known) == {
        "memlens.harness", "memlens.harness.sub", "memlens.harness.sub.b", "memlens.harness.sub.c"}
