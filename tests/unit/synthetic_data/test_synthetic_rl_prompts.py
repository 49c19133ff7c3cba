"""sd_rl_prompts on a real tokenizer trained on a few stdlib files (paper Sec. 5.3: 50 + 50 tokens)."""

import pytest

from memlens.synthetic_data.build import Builder
from memlens.synthetic_data.data_settings import validate
from memlens.synthetic_data.rl_prompts import OffsetTokenizer, rl_prompt_rows


def default_data(**sd):
    from omegaconf import OmegaConf

    from memlens.harness.cli import compose

    data = OmegaConf.to_container(compose([]).data, resolve=True)
    data["sd"].update(sd)
    return data


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    import sysconfig
    from pathlib import Path

    from memlens.recipes.stages.tokenizer import train_code_tokenizer

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / name).read_text(encoding="utf-8") for name in ("json/decoder.py", "base64.py", "hmac.py")]
    out = tmp_path_factory.mktemp("tok")
    train_code_tokenizer(texts, vocab_size=600).save_pretrained(str(out))
    return out


def test_rl_prompt_rows_cut_the_rl_prompt_at_50_and_100_tokens(tokenizer_dir):
    """Sec. 5.3: examples with >= 100 tokens in the prompt (prefix + suffix, App. D / Fig. 11) give an audit
    prompt of the prompt's first 50 tokens and a target of the next 50."""
    from transformers import AutoTokenizer

    data = default_data(size=120)
    data["rl_prompts"]["tokenizer"] = str(tokenizer_dir)
    builder = Builder(validate(data))
    sd_rows = builder.sd["base"] + builder.sd["links"]
    rows, info = rl_prompt_rows(sd_rows, OffsetTokenizer(tokenizer_dir), 50, 50)
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))          # the same tokenizer, via transformers
    by_id = {r["id"]: r for r in sd_rows}
    assert len(rows) + info["too_short_skipped"] == len(sd_rows) and len(rows) > 60
    assert 0 < info["spans_hole"] < len(rows) and info["spans_hole"] == sum(r["spans_hole"] for r in rows)
    for row in rows:
        sd = by_id[row["source_id"]]
        assert (row["rl_prefix"], row["rl_suffix"]) == (sd["prefix"], sd["suffix"])   # the target is not in it
        prompt = sd["prefix"] + sd["suffix"]
        assert row["suffix"] == "" and row["prefix"] + row["target"] == prompt[:row["target_char_end"]]
        assert row["prefix"] == prompt[:row["prompt_char_end"]]
        assert row["spans_hole"] == (0 < len(sd["prefix"]) < row["target_char_end"])
        # Re-derive the cuts in the HF tokenizer, prefix and suffix tokenized apart as the policy reads them.
        ends = [b for _, b in hf(sd["prefix"], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
        ends += [len(sd["prefix"]) + b for _, b in
                 hf(sd["suffix"], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
        assert len(ends) >= 100
        assert sum(end <= row["prompt_char_end"] for end in ends) == 50
        assert sum(end <= row["target_char_end"] for end in ends) == 100
    n_tokens = lambda t: len(hf(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    short = [r for r in sd_rows if n_tokens(r["prefix"]) + n_tokens(r["suffix"]) < 100]
    assert len(short) == info["too_short_skipped"]


def test_every_audited_target_is_in_the_prompt_the_policy_trained_on(tokenizer_dir, tmp_path):
    """Issue #12 / Sec. 5.3: RLFT.4 trains on each example's whole RL prompt; the audit's target is the
    50 tokens after the audit prompt inside that very prompt, even with the quickstart's 600-char contexts."""
    from omegaconf import OmegaConf

    from memlens.harness.core.io import read_jsonl
    from memlens.harness.text.fim import FAMILIES
    from memlens.recipes.stages.contract import StageContext
    from memlens.recipes.stages.rl import load_prompt_rows, training_examples
    from memlens.synthetic_data.build import build_datasets

    s = FAMILIES["memlens"]
    data = default_data(size=60, line_counts=[30, 50])      # long programs: prefixes beyond 600 characters
    data["rl_prompts"]["tokenizer"] = str(tokenizer_dir)
    run_dir = tmp_path / "run"
    build_datasets(OmegaConf.create({"run_dir": str(run_dir), "data": data}), names=["sd_rl_prompts"],
                   log=lambda *_: None)
    audit_rows = read_jsonl(run_dir / "data" / "sd_rl_prompts" / "rows.jsonl")
    # Exactly as the RL stage builds its training set (RLRecipe.setup + dataset), at quickstart's context_chars.
    examples = training_examples(load_prompt_rows(StageContext(run_dir, "RLFT.4"), ["sd_rl_prompts"], 600), s)
    prompts = {e["id"]: e["prompt"] for e in examples}
    assert set(prompts) == {r["id"] for r in audit_rows}
    assert any(len(r["rl_prefix"]) > 600 for r in audit_rows)            # a 600-char cut would lose the start
    assert any(r["spans_hole"] for r in audit_rows) and not all(r["spans_hole"] for r in audit_rows)
    for row in audit_rows:
        prompt = prompts[row["id"]]
        assert prompt.startswith(s.prefix) and prompt.endswith(s.middle) and row["target"]
        seen_prefix, seen_suffix = prompt[len(s.prefix):-len(s.middle)].split(s.suffix)
        # The audit prompt, then the audit target, open what the policy read (prefix, then suffix).
        assert (seen_prefix + seen_suffix).startswith(row["prefix"] + row["target"])
        if not row["spans_hole"]:                      # one side of the hole: a substring of the prompt itself
            at = prompt.index(row["prefix"] + row["target"])
            assert prompt.index(row["target"], at) == at + len(row["prefix"])


def test_build_sd_rl_prompts_dataset(tokenizer_dir, tmp_path):
    import json

    from omegaconf import OmegaConf

    from memlens.synthetic_data.build import build_datasets

    data = default_data(size=60)
    data["rl_prompts"]["tokenizer"] = str(tokenizer_dir)
    data["rl_prompts"]["subsets"] = ["SD.Links"]
    cfg = OmegaConf.create({"run_dir": str(tmp_path), "data": data})
    out = build_datasets(cfg, names=["sd_rl_prompts"], log=lambda *_: None)
    manifest = json.loads((out["sd_rl_prompts"] / "manifest.json").read_text())
    rows = [json.loads(line) for line in (out["sd_rl_prompts"] / "rows.jsonl").read_text().splitlines()]
    assert manifest["count"] == len(rows) > 0 and {r["subset"] for r in rows} == {"SD.Links"}
    assert manifest["settings"]["rl_prompts"]["tokenizer_sha256"]
    assert manifest["sd_prompt_tokens"]["count"] == 27          # round(60 * 0.4565) SD.Links programs
    assert manifest["too_short_skipped"] + manifest["count"] == 27
    assert manifest["spans_hole"] == sum(r["spans_hole"] for r in rows)


@pytest.mark.parametrize("membership", ["split", "coins"])
def test_the_held_out_rl_prompts_are_the_held_out_programs_cut_the_same_way(tokenizer_dir, tmp_path, membership):
    """sd_rl_prompts_heldout (RL-prompt membership's non-members, harness/audit/prompt_mia.py): every held-out SD
    program of the RL subsets with 100 tokens or more, cut at 50 + 50 tokens as the members are, none of them a
    program any stage reads, no prompt text a member's; doses are for members only, and the RL stage's contexts keep
    them (RLFT.4 prompts a dose-4 prompt 4 times)."""
    import json

    from omegaconf import OmegaConf

    from memlens.synthetic_data.build import build_datasets

    data = default_data(size=80)
    data["sd"]["membership"] = membership
    data["sd"]["doses"] = [1, 4]
    data["rl_prompts"]["tokenizer"] = str(tokenizer_dir)
    cfg = OmegaConf.create({"run_dir": str(tmp_path), "data": data})
    names = ["sd_base", "sd_links", "sd_base_heldout", "sd_links_heldout", "sd_rl_prompts", "sd_rl_prompts_heldout"]
    out = build_datasets(cfg, names=names, log=lambda *_: None)
    rows = {n: [json.loads(line) for line in (out[n] / "rows.jsonl").read_text().splitlines()] for n in names}
    manifest = json.loads((out["sd_rl_prompts_heldout"] / "manifest.json").read_text())
    held, members = rows["sd_rl_prompts_heldout"], rows["sd_rl_prompts"]
    held_programs = {r["id"]: r for r in rows["sd_base_heldout"] + rows["sd_links_heldout"]}
    assert held and {r["source_id"] for r in held} <= set(held_programs)
    assert not {r["source_id"] for r in held} & {r["source_id"] for r in members}
    assert not {r["rl_prefix"] + r["rl_suffix"] for r in held} & {r["rl_prefix"] + r["rl_suffix"] for r in members}
    # the same cut: every held-out program is either cut or counted as too short, and each cut row starts its program
    assert manifest["count"] + manifest["too_short_skipped"] == len(held_programs)
    for r in held:
        program = held_programs[r["source_id"]]
        assert (r["rl_prefix"], r["rl_suffix"]) == (program["prefix"], program["suffix"])
        assert (program["prefix"] + program["suffix"]).startswith(r["prefix"] + r["target"])
    assert all("repeat" not in r for r in held) and all("repeat" in r for r in members)
    from memlens.harness.core.user_data import repeated
    from memlens.harness.text.rl_contexts import prompt_contexts

    contexts = prompt_contexts(members, "sd_rl_prompts", 0, 2000)
    assert [c["repeat"] for c in contexts] == [r["repeat"] for r in members] and {r["repeat"] for r in members} == {1, 4}
    assert len(repeated(contexts)) == sum(r["repeat"] for r in members)
    assert manifest["heldout_of"] == "sd_rl_prompts" and manifest["members_in_training"] == 0
    assert set(manifest["provenance"]["datasets"]) == {"sd_base_heldout", "sd_links_heldout"}
