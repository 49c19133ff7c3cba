"""Bad input and fault cases through the real CLI (`python -m memlens ...` in a subprocess), as a user
meets them: each asserts the exit code, that the message names the file:line or the key and the fix,
that no traceback is printed, and that nothing is left half-written. The table of cases is in
tests/README.md ("Reliability").

Exit codes: 0 done; 2 refused input (nothing written); 3 the audit ran but scored no example (rows and
summary kept; audit.allow_empty=true makes that 0).
"""

from __future__ import annotations

import json
import shutil

import pytest

from memlens.harness.core.io import read_jsonl
from tests.integration.conftest import audit_overrides
from tests.integration.run_helpers import LONG_PREFIX, refused, write_examples
from tests.integration.run_helpers import memlens_in as memlens

pytestmark = pytest.mark.slow
# Every character str.splitlines() treats as a line break besides "\n" (tests/unit/harness/core/test_io_config.py
# checks that this list is complete).
BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r\n"]


# --------------------------------------------------------------------------------------------------
# 1 and 4: booleans and unknown keys (refused at composition, before anything is read or written)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, patterns", [
    ("audit.trust_remote_code=no", [r"audit\.trust_remote_code='no': must be true or false",
                                    r"pass audit\.trust_remote_code=true or audit\.trust_remote_code=false"]),
    ("audit.all_checkpoints=flase", [r"audit\.all_checkpoints='flase': must be true or false"]),
    ("audit.allow_empty=1", [r"audit\.allow_empty=1: must be true or false"]),
    ("audit.progress=maybe", [r"audit\.progress='maybe': must be true, false or null"]),
    ("model.trust_remote_code=yes", [r"model\.trust_remote_code='yes': must be true or false"]),
    ("+audit.kk=0.2", [r"audit\.kk: unknown key; the valid keys under audit are .*all_checkpoints, .*k, "]),
    ("+report.kk=1", [r"report\.kk: unknown key; the valid keys under report are compare, figures, findings_models, "]),
    ("+report.findings_models.ft_dirct=FT.3", [r"report\.findings_models: unknown role\(s\) \['ft_dirct'\]; use "
                                               r"ft_source, ft_direct, "]),
    ("+data.sd.kk=1", [r"data\.sd\.kk: unknown key; the valid keys under data\.sd are design, design_tokenizer, "
                       r"design_tokens, doses, heldout_size, line_counts, "]),
    ("+model.kk=1", [r"model: unknown key\(s\) \['kk'\]; valid keys are \['dtype', "]),
    ("+model.lora.rank=8", [r"model\.lora: unknown key\(s\) \['rank'\]; valid keys are \['alpha', "]),
    ("audit.measures=[ned,los]", [r"audit\.measures=\['ned', 'los'\]: unknown \['los'\]; use a list of ned, loss, mia"]),
    ("audit.measures=[ned,loss]", [r"the single-model audit .* computes ned only; drop \['loss'\]"]),
])
def test_bad_audit_setting_is_refused_naming_the_key(audit_world, tmp_path, override, patterns):
    out, cache = tmp_path / "out", tmp_path / "cache"
    refused(memlens("audit", *audit_overrides(audit_world, out, f"audit.cache_dir={cache}"), override,
                     cwd=tmp_path), *patterns)
    assert not out.exists() and not cache.exists()


def test_trust_remote_code_no_never_runs_the_model_folders_code(audit_world, tmp_path):
    """The issue's case: a model folder whose config.json maps to a Python file that would run."""
    model = shutil.copytree(audit_world["model_dir"], tmp_path / "evil", ignore=shutil.ignore_patterns("checkpoint-*"))
    marker = tmp_path / "code_ran"
    (model / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.Config", "AutoModelForCausalLM": "evil.Model",
                          "AutoTokenizer": ["evil.Tokenizer", None]}
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    world = {**audit_world, "model_dir": model}
    for value in ("no", "'false'", "0", "off"):
        refused(memlens("audit", *audit_overrides(world, out), f"audit.trust_remote_code={value}", cwd=tmp_path),
                r"audit\.trust_remote_code=.*: must be true or false")
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize("override, patterns", [
    ("+stages.FT.1.packing=yes", [r"stages\.FT\.1\.packing='yes': must be true or false"]),
    ("+stages.FT.1.kk=1", [r"stages\.FT\.1: unknown key\(s\) \['kk'\]; valid keys are \['batch_size', "]),
    ("+stages.FT.1.model.trust_remote_code=no", [r"stages\.FT\.1\.model\.trust_remote_code='no': must be true"]),
    ("stages.FT.1.lr=abc", [r"stages\.FT\.1\.lr='abc': must be a number$"]),
    ("stages.FT.1.max_steps=true", [r"stages\.FT\.1\.max_steps=True: must be a number$"]),
])
def test_bad_stage_setting_is_refused_before_training(tmp_path, override, patterns):
    run_dir = tmp_path / "run"
    refused(memlens("train", "stage=FT.1", "experiment=smoke", f"run_dir={run_dir}", override, cwd=tmp_path),
            *patterns)
    assert not run_dir.exists()


def test_build_data_must_be_a_boolean(tmp_path):
    run_dir = tmp_path / "run"
    refused(memlens("train", "stage=PT", "experiment=smoke", f"run_dir={run_dir}", "build_data=maybe",
                     cwd=tmp_path), r"build_data='maybe': must be true or false")
    assert not run_dir.exists()


# --------------------------------------------------------------------------------------------------
# 3 and 7: files and directories
# --------------------------------------------------------------------------------------------------

def test_examples_with_non_utf8_bytes_name_file_and_line(audit_world, tmp_path):
    bad = tmp_path / "canaries.jsonl"
    good = json.dumps(audit_world["examples"][0]).encode()
    bad.write_bytes(good + b"\n" + b'{"id": "x", "prefix": "caf\xe9", "target": "t"}\n')
    out = tmp_path / "out"
    refused(memlens("audit", *audit_overrides({**audit_world, "examples_path": bad}, out), cwd=tmp_path),
            r"canaries\.jsonl:2: not UTF-8 text \(byte 0xe9 at column 27\); save the file as UTF-8")
    assert not out.exists()


def test_truncated_examples_line_reads_as_cut_off(audit_world, tmp_path):
    bad = tmp_path / "canaries.jsonl"
    bad.write_text(json.dumps(audit_world["examples"][0]) + '\n{"id": "b", "prefix": "def f(\n')
    out = tmp_path / "out"
    err = refused(memlens("audit", *audit_overrides({**audit_world, "examples_path": bad}, out), cwd=tmp_path),
                  r"canaries\.jsonl:2: not valid JSON \(the line ends before its JSON object does",
                  r"looks cut off\); fix or remove that line")
    assert "Invalid control character" not in err and not out.exists()


@pytest.mark.parametrize("key", ["out_dir", "cache_dir"])
def test_directory_that_cannot_be_created_names_its_key(audit_world, tmp_path, key):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory\n")
    out, cache = tmp_path / "out", tmp_path / "cache"
    paths = {"out_dir": out, "cache_dir": cache, key: blocker / "sub"}
    refused(memlens("audit", *audit_overrides(audit_world, paths["out_dir"], f"audit.cache_dir={paths['cache_dir']}"),
                     cwd=tmp_path),
            rf"audit\.{key}={blocker}/sub: cannot be a directory, {blocker} is a file; set audit\.{key} to a directory")
    assert not out.exists() and not cache.exists() and blocker.read_text() == "not a directory\n"


def test_audited_model_is_validated_before_any_cache_file(audit_world, tmp_path):
    """A checkpoint whose tokenizer cannot be loaded: refused before the control's cache entry exists."""
    model = shutil.copytree(audit_world["model_dir"], tmp_path / "FT.1", ignore=shutil.ignore_patterns("checkpoint-*"))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (model / name).unlink(missing_ok=True)
    out, cache = tmp_path / "out", tmp_path / "cache"
    refused(memlens("audit", *audit_overrides({**audit_world, "model_dir": model}, out, f"audit.cache_dir={cache}"),
                     cwd=tmp_path), rf"{model}: cannot load its tokenizer", r"save the tokenizer beside the weights")
    assert not out.exists() and not cache.exists()


@pytest.fixture(scope="module")
def other_tokenizer_control(audit_world, tmp_path_factory):
    """An untrained control whose tokenizer was trained on other text (a different vocabulary)."""
    from tests.tiny import save, tiny_llama, tiny_tokenizer

    texts = [f"print('{w}')\nvalue_{i} = {i} * {i}\n" for i, w in enumerate(["a", "bb", "ccc"] * 40)]
    tokenizer = tiny_tokenizer(texts, vocab_size=320)
    return save(tiny_llama(tokenizer, seed=1), tokenizer, tmp_path_factory.mktemp("control2") / "CONTROL2")


def test_control_with_another_tokenizer_is_noted_once_and_in_the_summary(audit_world, other_tokenizer_control,
                                                                         tmp_path):
    out = tmp_path / "out"
    proc = memlens("audit", *audit_overrides({**audit_world, "control_dir": other_tokenizer_control}, out),
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stdout.splitlines() if "control's tokenizer" in line]
    assert len(notes) == 1 and "differs from FT.1/final's" in notes[0] and "over characters" in notes[0]
    entry = json.loads((out / "summary.json").read_text())["results"]["FT.1"]["final"]["canaries"]
    assert entry["control_tokenizer_differs"] is True and entry["n_total"] == len(audit_world["examples"])


# --------------------------------------------------------------------------------------------------
# 5 and 6: nothing scored; prompts longer than the context
# --------------------------------------------------------------------------------------------------



def _short(i):
    return {"id": f"s{i}", "prefix": "x = [1, 2]\ny = len(", "target": "x)", "suffix": "\n"}


def _long(i):
    return {"id": f"l{i}", "prefix": LONG_PREFIX, "target": "    token = hashlib.sha256(b'abc').hexdigest()\n",
            "suffix": "\n"}


@pytest.mark.parametrize("rows, reasons", [
    ([_short(0), _short(1), _short(2)], r"\(excluded: 3 short_target\)"),
    ([_long(0), _short(1)], r"\(excluded: 1 prompt_too_long, 1 short_target\)"),
    ([], r"\(no examples\)"),
], ids=["all_short", "too_long_and_short", "empty_file"])
def test_nothing_scored_exits_3_with_counts_unless_allowed(audit_world, tmp_path, rows, reasons):
    import re

    examples = write_examples(tmp_path / "data" / "nothing.jsonl", rows)
    world = {**audit_world, "examples_path": examples}
    out = tmp_path / "out"
    proc = memlens("audit", *audit_overrides(world, out), cwd=tmp_path)
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    message = rf"the audit measured nothing: FT\.1/final on nothing: 0 of {len(rows)} examples scored {reasons}"
    assert re.search(message, proc.stdout) and re.search(message, proc.stderr), (proc.stdout, proc.stderr)
    assert "pass audit.allow_empty=true to accept an empty result" in proc.stderr
    entry = json.loads((out / "summary.json").read_text())["results"]["FT.1"]["final"]["nothing"]
    assert entry["n_scored"] == 0 and entry["n_total"] == len(rows) and entry["rate"] is None
    assert len(read_jsonl(out / "FT.1" / "final" / "nothing.jsonl")) == len(rows)

    allowed = memlens("audit", *audit_overrides(world, out), "audit.allow_empty=true", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert re.search(message + r" \(accepted: audit\.allow_empty=true\)", allowed.stdout)


def test_prompt_longer_than_the_context_is_excluded_counted_and_warned(audit_world, tmp_path):
    rows = audit_world["examples"][:3] + [_long(0), _long(1)]
    examples = write_examples(tmp_path / "data" / "long.jsonl", rows)
    out = tmp_path / "out"
    proc = memlens("audit", *audit_overrides({**audit_world, "examples_path": examples}, out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("[audit] warning: 2 of 5 prompts of long are longer than the context of FT.1/final (512 tokens) "
            "or of the control (512 tokens); excluded as prompt_too_long, not decoded") in proc.stdout
    by_id = {r["id"]: r for r in read_jsonl(out / "FT.1" / "final" / "long.jsonl")}
    for i in ("l0", "l1"):
        assert by_id[i]["excluded"] == "prompt_too_long" and by_id[i]["memorized"] is False
        assert by_id[i]["completion"] == "" and by_id[i]["control_completion"] == ""
    assert all(by_id[ex["id"]]["excluded"] != "prompt_too_long" for ex in rows[:3])
    entry = json.loads((out / "summary.json").read_text())["results"]["FT.1"]["final"]["long"]
    assert entry["excluded_by_reason"]["prompt_too_long"] == 2 and entry["n_scored"] <= 3


# --------------------------------------------------------------------------------------------------
# 2: every line separator survives the audit, its rerun and the report
# --------------------------------------------------------------------------------------------------

def test_line_separators_survive_audit_rerun_and_report(audit_world, tmp_path):
    """Examples and completions holding every str.splitlines() line break: the audit, a rerun from the
    completion cache and the report all read the same rows (before, U+2028 broke the directory)."""
    from memlens.harness.report.analyses import load_audit_rows

    all_breaks = "".join(BREAKS)
    rows = []
    for i, ex in enumerate(audit_world["examples"][:len(BREAKS)]):
        sep = BREAKS[i]
        rows.append({**ex, "prefix": ex["prefix"].replace("\n", sep, 1), "suffix": ex["suffix"] + sep,
                     "target": ex["target"].replace("(", f"({sep!r} and ", 1), "note": f"all{all_breaks}end"})
    examples = write_examples(tmp_path / "data" / "seps.jsonl", rows)
    run_dir = tmp_path / "run"
    out, cache = run_dir / "audit", tmp_path / "cache"
    args = audit_overrides({**audit_world, "examples_path": examples}, out, f"audit.cache_dir={cache}")
    first = memlens("audit", *args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]

    # A model whose completions hold the separators: put them into its cached completions (the path a
    # real completion takes into the rows), then audit again from scratch.
    for describe in cache.glob("*.json"):
        if json.loads(describe.read_text())["label"] == "FT.1/final":
            store = describe.with_suffix(".jsonl")
            cached = read_jsonl(store)
            store.write_text("".join(json.dumps({**r, "completion": r["completion"] + all_breaks},
                                                ensure_ascii=False) + "\n" for r in cached), encoding="utf-8")
    shutil.rmtree(out)
    second = memlens("audit", *args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    rows_file = out / "FT.1" / "final" / "seps.jsonl"
    stored = read_jsonl(rows_file)
    assert len(stored) == len(rows) == rows_file.read_bytes().count(b"\n")
    by_id = {r["id"]: r for r in stored}
    for ex in rows:
        got = by_id[ex["id"]]
        assert (got["prefix"], got["suffix"], got["note"]) == (ex["prefix"], ex["suffix"], ex["note"])
        assert got["completion"].endswith(all_breaks)
    summary = json.loads((out / "summary.json").read_text())["results"]

    third = memlens("audit", *args, cwd=tmp_path)       # a rerun: nothing new, same bytes
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"seps: {len(rows)} rows (0 new)" in third.stdout
    assert read_jsonl(rows_file) == stored
    assert json.loads((out / "summary.json").read_text())["results"] == summary

    report = memlens("report", f"run_dir={run_dir}", "report.nmt_summary=null", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    assert load_audit_rows(out)[("FT.1", "final", "seps")] == stored
    assert summary["FT.1"]["final"]["seps"]["control_tokenizer_differs"] is False


def test_whole_run_audit_that_scores_nothing_exits_3_after_writing_its_summary(audit_world, tmp_path):
    from memlens.harness.core.io import file_sha256

    run_dir = tmp_path / "run"
    for name, src in (("FT.1", audit_world["model_dir"]), ("FT.2", audit_world["control_dir"])):
        shutil.copytree(src, run_dir / "models" / name, ignore=shutil.ignore_patterns("checkpoint-*"))
        (run_dir / "models" / name / "provenance.json").write_text(json.dumps({"stage": "sft", "settings": {}}))
    rows = write_examples(run_dir / "data" / "allshort" / "rows.jsonl", [_short(0), _short(1)])
    (rows.parent / "manifest.json").write_text(json.dumps({"count": 2, "sha256": file_sha256(rows)}))
    args = ("audit", f"run_dir={run_dir}", "audit_plan=[{models: [FT.1], control: FT.2, datasets: [allshort]}]",
            "audit.progress=false", "audit.utility=false", "device=cpu")
    proc = memlens(*args, cwd=tmp_path)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert ("the audit measured nothing: FT.1/final on allshort: 0 of 2 examples scored (excluded: 2 short_target)"
            in proc.stderr)
    entry = json.loads((run_dir / "audit" / "summary.json").read_text())["results"]["FT.1"]["final"]["allshort"]
    assert entry["n_scored"] == 0 and entry["excluded_by_reason"]["short_target"] == 2
    assert memlens(*args, "audit.allow_empty=true", cwd=tmp_path).returncode == 0


def test_rows_of_other_settings_are_not_mixed_into_an_audit_dir(audit_world, tmp_path):
    examples = write_examples(tmp_path / "data" / "two.jsonl", audit_world["examples"][:2])
    out = tmp_path / "out"
    args = audit_overrides({**audit_world, "examples_path": examples}, out)
    assert memlens("audit", *args, cwd=tmp_path).returncode == 0
    rows_file = out / "FT.1" / "final" / "two.jsonl"
    before = rows_file.read_bytes()
    refused(memlens("audit", *args, "audit.k=0.2", cwd=tmp_path),
            rf"{rows_file} holds rows computed with a different settings; delete that directory to recompute it, "
            r"or set audit\.out_dir to a new directory")
    assert rows_file.read_bytes() == before
