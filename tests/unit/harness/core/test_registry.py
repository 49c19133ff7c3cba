"""A registry is complete in every process (harness/core/registry.py): its first read imports the modules that
register its built-in entries and lists them in their declared order, whatever the process imported before."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

from memlens.harness.core.registry import Registry


def fresh(code: str) -> str:
    """stdout of `code` in a new interpreter (nothing of this test process's imports)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_audit_measures_are_all_there_in_a_process_that_imported_no_audit_module():
    out = fresh("import sys; from memlens.harness.audit.measure_registry import MEASURES; "
                "assert 'memlens.harness.audit.extraction' not in sys.modules; print(*MEASURES.names()); "
                "print('memlens.harness.audit.extraction' in sys.modules)")
    assert out.splitlines() == ["ned loss mia discoverable epsilon pair_mia prompt_mia", "True"]


def test_the_findings_table_keeps_its_order_whichever_module_was_imported_first():
    out = fresh("from memlens.harness.report.findings import paper002, membership; "
                "from memlens.harness.report.findings.registry import FINDINGS; print(*FINDINGS.names())")
    assert out.split()[:3] == ["F1", "F2", "F3"] and out.split().index("N1") < out.split().index("M1")
    assert len(out.split()) == 35 and out.split()[-5:] == ["D1", "D2", "D3", "D4", "D5"]


@pytest.fixture
def plugin_module(monkeypatch):
    """A module on sys.modules that registers two built-ins into a registry given to it, in the wrong order."""
    registry: Registry[str] = Registry("thing", "things", builtins=lambda: importlib.import_module("memlens_test_things"),
                                       order=("a", "b"))
    module = types.ModuleType("memlens_test_things")
    module.__dict__["load"] = lambda: (registry.register("b", "B"), registry.register("a", "A"))
    monkeypatch.setitem(sys.modules, "memlens_test_things", module)
    return registry, module


def test_builtins_load_on_the_first_read_in_the_declared_order_and_plugins_follow(plugin_module):
    registry, module = plugin_module
    registry.register("plugin", "P")            # a user's entry, registered before anything read the registry
    module.load()                                # what importing the built-ins' module does
    assert registry.names() == ("a", "b", "plugin")
    assert list(registry) == ["a", "b", "plugin"] and registry.values() == ["A", "B", "P"]
    assert "a" in registry and registry["b"] == "B" and len(registry) == 3


def test_a_builtin_that_its_module_does_not_register_is_an_error_naming_it(monkeypatch):
    def import_nothing():
        """A built-ins function whose modules register only "a"."""

    registry: Registry[str] = Registry("thing", "things", builtins=import_nothing, order=("a", "zz"))
    registry.register("a", "A")
    with pytest.raises(RuntimeError, match="zz named as built-in but not registered by the modules .*import_nothing"):
        registry.names()


def test_an_installed_package_s_entry_point_and_a_plugin_file_load_once_each(tmp_path):
    """`load_plugins`: the `memlens.plugins` entry points of installed packages (here a dist-info folder on the path,
    as pip writes it), then the config's `plugins` (a .py file); a second call imports neither again."""
    site = tmp_path / "site"
    (site / "lab_dist-0.1.dist-info").mkdir(parents=True)
    (site / "lab_dist-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-dist\nVersion: 0.1\n")
    (site / "lab_dist-0.1.dist-info" / "entry_points.txt").write_text("[memlens.plugins]\nlab = lab_entry\n")
    (site / "lab_entry.py").write_text("import builtins; builtins.LOADED = getattr(builtins, 'LOADED', []) + ['entry']\n")
    plugin = tmp_path / "lab_file.py"
    plugin.write_text("import builtins; builtins.LOADED = getattr(builtins, 'LOADED', []) + ['file']\n")
    out = fresh(f"import sys, builtins; sys.path.insert(0, {str(site)!r}); "
                "from memlens.harness.core.registry import load_plugins; "
                f"first = load_plugins([{str(plugin)!r}]); load_plugins([{str(plugin)!r}]); "
                "print(first[0], first[1].startswith('memlens_plugin_lab_file_'), *builtins.LOADED)")
    assert out == "lab_entry True entry file"
