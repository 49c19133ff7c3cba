"""`memlens.inject`: canaries planted in each TRL dataset format, in the field its trainer learns from and
nowhere else, `repeat` copies at seeded positions with the original rows in order, held-out canaries absent, the
manifest saying where each landed; the masked side, the RL-prompt side and bad input refused with the fix."""

from __future__ import annotations

import json

import pytest

import memlens
from memlens.harness.core.errors import UserError
from memlens.harness.core.user_data import load_examples
from memlens.synthetic_data.inject import detect_format, inject

CANARIES = [{"id": f"c{i}", "prefix": f"def load_{i}():\n    key = ", "target": f"'sk-{i:02d}-f3a9c1e7b2d4'",
             "suffix": "\n    return key\n", "repeat": 1 + i % 3, "group": "api_key"} for i in range(8)]

ROWS = {
    "language_modeling": [{"text": f"print({i})\n"} for i in range(10)],
    "prompt_completion": [{"prompt": f"# task {i}\n", "completion": f"x = {i}\n"} for i in range(10)],
    "conversational": [{"messages": [{"role": "user", "content": f"task {i}"},
                                     {"role": "assistant", "content": f"x = {i}"}]} for i in range(10)],
    "preference": [{"prompt": f"# task {i}\n", "chosen": f"x = {i}\n", "rejected": f"y = {i}\n"} for i in range(10)],
    "unpaired": [{"prompt": f"# task {i}\n", "completion": f"x = {i}\n", "label": i % 2 == 0} for i in range(10)],
    "prompt_only": [{"prompt": f"# task {i}\n"} for i in range(10)],
}


def _dataset(fmt: str, extra: bool = False):
    from datasets import Dataset

    rows = ROWS[fmt]
    return Dataset.from_list([{**r, "source": f"s{i}"} for i, r in enumerate(rows)] if extra else rows)


def _trained_text(fmt: str, row: dict) -> str:
    if fmt == "conversational":
        return "".join(m["content"] for m in row["messages"] if m["role"] == "assistant")
    return row[{"language_modeling": "text", "prompt_completion": "completion", "preference": "chosen",
                "unpaired": "completion", "prompt_only": "prompt"}[fmt]]


@pytest.mark.parametrize("fmt", sorted(ROWS))
def test_each_format_gets_its_canaries_in_the_trained_field_only(fmt):
    original = _dataset(fmt, extra=True)
    out, manifest = inject(original, CANARIES, seed=3, rl_prompts=fmt == "prompt_only")
    assert detect_format(original.column_names) == fmt == manifest["format"]
    planted = {c["id"]: c for c in manifest["canaries"]}
    heldout = [c["id"] for c in manifest["heldout"]]
    assert planted and heldout and set(planted) | set(heldout) == {c["id"] for c in CANARIES}
    copies = sum(c["repeat"] for c in planted.values())
    assert len(out) == len(original) + copies == manifest["dataset"]["rows_after"]
    canary_rows = set()
    for c in planted.values():
        assert len(c["positions"]) == c["repeat"]
        for position in c["positions"]:
            row = out[position]
            assert c["target"] in _trained_text(fmt, row), (fmt, row)
            if fmt not in ("language_modeling", "prompt_only"):
                prompt = row["messages"][0]["content"] if fmt == "conversational" else row["prompt"]
                assert c["target"] not in json.dumps(prompt)          # never on the masked side
            assert row.get("source", "missing") is None             # other columns left empty
            canary_rows.add(position)
    # The original rows are all there, in their order, and no held-out target is anywhere.
    rest = [out[i] for i in range(len(out)) if i not in canary_rows]
    assert [r["source"] for r in rest] == [f"s{i}" for i in range(len(original))]
    everything = json.dumps(out.to_list())
    assert not any(c["target"] in everything for c in manifest["heldout"])
    if fmt == "unpaired":
        assert all(out[p]["label"] is True for c in planted.values() for p in c["positions"])
    if fmt == "preference":
        assert all(out[p]["rejected"] in {r["rejected"] for r in ROWS[fmt]} for c in planted.values()
                   for p in c["positions"])


def test_seeded_same_input_same_output_and_the_manifest_on_disk(tmp_path):
    a, ma = inject(_dataset("prompt_completion"), CANARIES, seed=1, manifest_path=tmp_path / "m.json")
    b, mb = inject(_dataset("prompt_completion"), CANARIES, seed=1)
    c, mc = inject(_dataset("prompt_completion"), CANARIES, seed=2)
    assert a.to_list() == b.to_list() and ma["canaries"] == mb["canaries"]
    assert ma["dataset"]["sha256_after"] == mb["dataset"]["sha256_after"] != mc["dataset"]["sha256_after"]
    assert ma["dataset"]["sha256_before"] == mc["dataset"]["sha256_before"]
    on_disk = json.loads((tmp_path / "m.json").read_text())
    assert on_disk["canaries"] == ma["canaries"] and on_disk["provenance"]["seed"] == 1
    # The canaries as audit examples, read as `memlens audit audit.examples=` reads them.
    assert [r["id"] for r in load_examples(tmp_path / "m.planted.jsonl")] == [c["id"] for c in ma["canaries"]]
    assert [r["target"] for r in load_examples(tmp_path / "m.heldout.jsonl")] == [c["target"] for c in ma["heldout"]]
    everything, _ = inject(_dataset("prompt_completion"), CANARIES, heldout_fraction=0)
    assert len(everything) == 10 + sum(c["repeat"] for c in CANARIES)
    assert memlens.inject is inject                      # the package's own name for it


def test_a_preference_canary_carries_its_pair_as_trained_and_a_held_out_one_a_pair_built_alike(tmp_path):
    """Preference data: a planted canary's pair is its first copy's row as planted; a held-out canary's is built the
    same way (prompt = prefix, chosen = target + suffix) with a rejected side drawn from the data's rejected column;
    the same seed gives the same rows and pairs, and the pair files hold them in the pair-membership form (id,
    prefix = prompt, suffix "", chosen, rejected). Other formats carry no pairs."""
    from memlens.harness.core.injected import has_pairs, pair_files

    out, manifest = inject(_dataset("preference"), CANARIES, seed=3, manifest_path=tmp_path / "m.json")
    rejected = {r["rejected"] for r in ROWS["preference"]}
    assert has_pairs(manifest) and manifest["heldout"]
    for c in manifest["canaries"]:
        first = out[c["positions"][0]]
        assert c["pair"] == {"prompt": first["prompt"], "chosen": first["chosen"], "rejected": first["rejected"]}
    for c in manifest["heldout"]:
        # the prefix ends in spaces: they move to the completion, as a planted copy's do
        assert c["pair"]["prompt"] + c["pair"]["chosen"] == c["prefix"] + c["target"] + c["suffix"]
        assert c["pair"]["chosen"].startswith(" " + c["target"]) and c["pair"]["rejected"] in rejected
    again, same = inject(_dataset("preference"), CANARIES, seed=3)
    assert again.to_list() == out.to_list() and same == {**manifest, "provenance": same["provenance"]}
    planted_file, heldout_file = pair_files(tmp_path / "m.json")
    rows = [json.loads(line) for line in heldout_file.read_text().splitlines()]
    assert rows == [{"id": c["id"], "prefix": c["pair"]["prompt"], "suffix": "", "chosen": c["pair"]["chosen"],
                     "rejected": c["pair"]["rejected"]} for c in manifest["heldout"]]
    assert len(planted_file.read_text().splitlines()) == len(manifest["canaries"])
    # the audit-example files stay as they were: no pair in them
    assert all("pair" not in json.loads(line) for line in (tmp_path / "m.heldout.jsonl").read_text().splitlines())
    _, plain = inject(_dataset("prompt_completion"), CANARIES, seed=3, manifest_path=tmp_path / "p.json")
    assert not has_pairs(plain) and not pair_files(tmp_path / "p.json")[0].exists()


@pytest.mark.parametrize("seed,sha256", [
    (0, "cf6aad9c91765d051f9b49b44137788e4310c12f1d69ea8a2c8e63354f4e8e1e"),
    (3, "c80874219c3d6f2eb82101831e97de08231b45b798c68bf254c1034725f4c74d")])
def test_the_planted_preference_rows_are_those_inject_gave_before_pairs_were_recorded(seed, sha256):
    """The held-out pairs' rejected sides come from a stream of their own, so the dataset `inject` returns is byte for
    byte what it was before (these fingerprints: inject at d4b8a66, on the same rows and canaries)."""
    _, manifest = inject(_dataset("preference"), CANARIES, seed=seed)
    assert manifest["dataset"]["sha256_after"] == sha256


def test_a_canary_file_is_read_as_data_canaries_file_is(tmp_path):
    path = tmp_path / "canaries.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"t{i}", "text": f"token = 'ghp_{i}a8c7e6f5d4c3b2a1'\nuse(token)\n",
                                          "target": f"'ghp_{i}a8c7e6f5d4c3b2a1'"}) for i in range(6)) + "\n")
    out, manifest = inject(_dataset("language_modeling"), path, heldout_fraction=0)
    assert [c["prefix"] for c in manifest["canaries"]] == ["token = "] * 6
    assert sum("ghp_" in r["text"] for r in out.to_list()) == 6


def test_the_masked_side_and_the_rl_prompt_side_are_refused_unless_asked():
    with pytest.raises(UserError, match=r"field='prompt': the prompt_completion trainer masks the loss on prompt"):
        inject(_dataset("prompt_completion"), CANARIES, field="prompt")
    out, manifest = inject(_dataset("prompt_completion"), CANARIES, field="prompt", allow_masked=True)
    c = manifest["canaries"][0]
    assert manifest["masked"] and c["target"] in out[c["positions"][0]]["prompt"]
    with pytest.raises(UserError, match=r"field='user': the conversational trainer masks"):
        inject(_dataset("conversational"), CANARIES, field="user")
    with pytest.raises(UserError, match=r"prompt-only dataset \(GRPO/RLOO\).*pass rl_prompts=True"):
        inject(_dataset("prompt_only"), CANARIES)
    with pytest.raises(UserError, match=r"field='rejected': a preference dataset takes chosen or prompt"):
        inject(_dataset("preference"), CANARIES, field="rejected")


def test_bad_input_names_what_to_fix():
    from datasets import Dataset

    with pytest.raises(UserError, match=r"no TRL format found"):
        inject(Dataset.from_list([{"code": "x"}]), CANARIES)
    with pytest.raises(UserError, match=r"implicit prompt"):
        inject(Dataset.from_list([{"chosen": "a", "rejected": "b"}]), CANARIES)
    with pytest.raises(UserError, match=r"a datasets.Dataset, got list"):
        inject([{"text": "x"}], CANARIES)
    with pytest.raises(UserError, match=r"canary 'c0': its target already occurs in row 1"):
        inject(Dataset.from_list([{"text": "a"}, {"text": CANARIES[0]["target"]}]), CANARIES)
    with pytest.raises(UserError, match=r"heldout_fraction=1: must be in \[0, 1\)"):
        inject(_dataset("language_modeling"), CANARIES, heldout_fraction=1)
    with pytest.raises(UserError, match=r"canaries: duplicate ids"):
        inject(_dataset("language_modeling"), CANARIES + CANARIES[:1])
    with pytest.raises(UserError, match=r"empty target"):
        inject(_dataset("language_modeling"), [{"id": "e", "prefix": "a", "target": ""}])
    with pytest.raises(UserError, match=r"format='chat': use one of"):
        inject(_dataset("language_modeling"), CANARIES, format="chat")


def test_a_canary_without_a_prefix_is_refused_before_anything_is_planted():
    empty = [{**CANARIES[0], "prefix": ""}, *CANARIES[1:]]
    with pytest.raises(UserError, match="'c0': an empty prefix"):
        inject(_dataset("prompt_completion"), empty, seed=3)
