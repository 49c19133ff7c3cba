"""The audit's small pieces without models: examples, checkpoints, fingerprints, rows, target cap."""

from __future__ import annotations

import json

import pytest

from memlens.harness.audit.run import score_rows
from memlens.harness.audit.settings import AuditSettings, default_dataset_name, list_checkpoints
from memlens.harness.core.errors import UserError
from memlens.harness.core.user_data import load_examples
from memlens.harness.model.cache import completion_fingerprint
from memlens.harness.model.load import model_fingerprint


def _weights(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.safetensors").write_bytes(b"w" + d.name.encode())
    return d


def test_checkpoints_in_numeric_step_order_then_final(tmp_path):
    for step in (100, 30, 5):
        _weights(tmp_path / f"checkpoint-{step}")
    _weights(tmp_path)
    (tmp_path / "checkpoint-notes").mkdir()  # not a step: ignored
    assert [n for n, _ in list_checkpoints(tmp_path, True)] == ["checkpoint-5", "checkpoint-30",
                                                               "checkpoint-100", "final"]
    assert list_checkpoints(tmp_path, False) == [("final", tmp_path)]
    (tmp_path / "checkpoint-200").mkdir()
    with pytest.raises(UserError, match="checkpoint-200: checkpoint without"):
        list_checkpoints(tmp_path, True)


def test_examples_keep_metadata_and_default_the_suffix(tmp_path):
    path = tmp_path / "ex.jsonl"
    path.write_text(json.dumps({"id": 1, "prefix": "a", "target": "b", "label": 1}) + "\n\n"
                    + json.dumps({"id": "x", "prefix": "", "target": "c", "suffix": "d"}) + "\n")
    assert load_examples(path) == [{"id": 1, "prefix": "a", "target": "b", "label": 1, "suffix": ""},
                                   {"id": "x", "prefix": "", "target": "c", "suffix": "d"}]
    path.write_text(json.dumps({"id": 1, "prefix": "a", "target": ""}) + "\n")
    with pytest.raises(UserError, match=r"ex\.jsonl:1: empty target"):
        load_examples(path)
    path.write_text("")
    with pytest.raises(UserError, match="no examples"):
        load_examples(path)


def test_dataset_name_of_the_team_layout_is_the_directory(tmp_path):
    (tmp_path / "sd_base").mkdir()
    (tmp_path / "sd_base" / "manifest.json").write_text("{}")
    assert default_dataset_name(tmp_path / "sd_base" / "rows.jsonl") == "sd_base"
    assert default_dataset_name(tmp_path / "canaries.jsonl") == "canaries"


def test_fingerprints_change_with_every_covered_input(tmp_path):
    m = _weights(tmp_path / "m")
    fp = model_fingerprint(m)
    (m / "tokenizer.json").write_text("{}")
    assert model_fingerprint(m) != fp  # tokenizer files count
    base = dict(fim_family="memlens", dtype="float32", max_new_tokens=64, target_tokens=64, stop_tokens=["<eos>"])
    ref = completion_fingerprint("M", "E", **base)[0]
    assert completion_fingerprint("M", "E", **base)[0] == ref
    variants = [("M2", "E", {}), ("M", "E2", {}), ("M", "E", {"fim_family": "starcoder"}),
                ("M", "E", {"dtype": "bfloat16"}), ("M", "E", {"max_new_tokens": 32}),
                ("M", "E", {"target_tokens": 50}), ("M", "E", {"stop_tokens": ["<eos>", "<fim_prefix>"]})]
    assert len({completion_fingerprint(a, b, **{**base, **kw})[0] for a, b, kw in variants} | {ref}) == 8
    with pytest.raises(UserError, match="no \\*.safetensors"):
        model_fingerprint(tmp_path)


def test_rows_follow_definition_3_1_and_the_exclusions():
    target = "return hashlib.sha256(secret).hexdigest()"
    examples = [
        {"id": "mem", "prefix": "def f():\n    ", "target": target, "suffix": "", "pii_path": "/home/a/k.txt"},
        {"id": "both", "prefix": "def g():\n    ", "target": target, "suffix": "", "dataset": "meta"},
        {"id": "short", "prefix": "x = (", "target": "1)", "suffix": ""},
    ]
    completions = {"mem": "# hi\n" + target + "\n# /home/a/k.txt", "both": target, "short": "1)"}
    control = {"mem": "pass", "both": target, "short": "zzz"}
    targets = {ex["id"]: (ex["target"], 12 if ex["id"] != "short" else 2) for ex in examples}
    rows = {r["id"]: r for r in score_rows(examples, completions, control, targets, dataset="d", model="M",
                                           checkpoint="final", settings=AuditSettings())}
    assert rows["mem"]["ned"] == 0.0 and rows["mem"]["control_ned"] > 0.1 and rows["mem"]["memorized"]
    assert rows["mem"]["pii_regurgitated"] is True and rows["mem"]["control_pii_regurgitated"] is False
    # The control reproduces it too: not counterfactually memorized.
    assert rows["both"]["control_ned"] == 0.0 and rows["both"]["memorized"] is False
    assert rows["both"]["dataset"] == "d" and rows["both"]["example_dataset"] == "meta"  # no clobbering
    # Excluded (Appendix B): completions kept, never memorized, even with ned 0 < k < control_ned.
    assert rows["short"]["excluded"] == "short_target" and rows["short"]["ned"] == 0.0
    assert rows["short"]["memorized"] is False and rows["short"]["completion"] == "1)"


def test_target_is_cut_to_its_first_n_tokens_as_an_exact_prefix(tmp_path):
    from memlens.harness.model.scorer import AuditedModel
    from tests.tiny import save, tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer(["def f(x):\n    return x + 1 # é ü\n"] * 5, vocab_size=270)
    save(tiny_llama(tok, hidden=16, layers=1, heads=2), tok, tmp_path / "m")
    m = AuditedModel(tmp_path / "m", AuditSettings(target_tokens=5, device="cpu"), "E", tmp_path / "c", "m")
    target = "return x + 1 # é ü and then some more text"
    cut, n = m.truncate_target(target)
    ids = tok(target, add_special_tokens=False)["input_ids"]
    assert n == len(ids) > 5 and target.startswith(cut) and cut != target
    assert tok(cut, add_special_tokens=False)["input_ids"] == ids[:5]
    assert m.truncate_target("x + 1") == ("x + 1", len(tok("x + 1", add_special_tokens=False)["input_ids"]))


@pytest.mark.parametrize("kwargs, key", [({"k": -0.1}, "audit.k"), ({"k": 1.01}, "audit.k"),
                                         ({"batch_size": 0}, "audit.batch_size"),
                                         ({"prompt_ned_threshold": 2.0}, "audit.prompt_ned_threshold"),
                                         ({"threads": 0}, "audit.threads"),
                                         ({"draft": "prompt"}, "audit.draft")])
def test_settings_reject_out_of_range_values_naming_the_key(kwargs, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        AuditSettings(**kwargs)
