"""Membership inference on real tiny models (tests/tiny.py): the per-token log-probs are the loss pass's own
numbers, members trained for many epochs separate from held-out non-members of the same template (AUC near 1)
while an untrained model does not (AUC near 0.5), and the whole-run driver (`audit.measures=[mia]`) writes its
rows and summaries below audit/mia/ and reruns from the cache. About 10 s on one core.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from memlens.harness.audit.command import main as audit_main
from memlens.harness.audit.mia import MiaSettings, audit_mia
from memlens.harness.audit.settings import AuditSettings
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from memlens.harness.measures.mia import ATTACKS, best_attack, rmia_ratio
from memlens.harness.model.cache import cached_token_logprobs, program_text
from memlens.harness.model.logprobs import encode_fim_examples, target_losses, target_token_logprobs
from memlens.harness.model.scorer import CausalLMScorer
from memlens.harness.text.fim import FAMILIES, format_psm_training
from tests.tiny import save, tiny_llama, tiny_tokenizer, train_on_texts

SENT = FAMILIES["memlens"]


def _rows(prefix: str, n: int, rng: random.Random) -> list[dict]:
    """Canaries of one template; what a model can only know by training on a row is its two numbers."""
    rows = []
    for i in range(n):
        a, b, c = rng.randint(100, 999), rng.randint(100, 999), rng.randint(10, 99)
        rows.append({"id": f"{prefix}-{i}", "prefix": f"import legitimate_crypto as crypto\n# task {c}\n",
                     "target": f"key = crypto.new_key({a}, {b})", "suffix": "\nprint(key)\n"})
    return rows


def _settings(**mia) -> MiaSettings:
    """The MIA audit's settings on CPU (16 per batch), with the given spans / bootstrap."""
    return MiaSettings(**mia, scoring=AuditSettings(batch_size=16, device="cpu"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mia_world")
    rng = random.Random(0)
    members, nonmembers = _rows("sd", 16, rng), _rows("sdh", 16, rng)
    text = lambda r: format_psm_training(r["prefix"], r["target"], r["suffix"], SENT)  # noqa: E731
    tok = tiny_tokenizer([text(r) for r in members + nonmembers], vocab_size=300)
    models = root / "models"
    model = tiny_llama(tok, seed=0)
    save(model, tok, models / "FT.2")                    # the control: never trained on either set
    train_on_texts(model, tok, [text(r) for r in members], steps=40, lr=1e-2, batch_size=16, seed=1)
    save(model, tok, models / "FT.1" / "checkpoint-40")
    train_on_texts(model, tok, [text(r) for r in members], steps=60, lr=1e-2, batch_size=16, seed=2)
    save(model, tok, models / "FT.1")                    # ~100 epochs over the members
    for name in ("FT.1", "FT.2"):
        atomic_write_json(models / name / "provenance.json", {"stage": name})
    atomic_write_jsonl(root / "data" / "sd_base" / "rows.jsonl", members)
    atomic_write_jsonl(root / "data" / "sd_base_heldout" / "rows.jsonl", nonmembers)
    return {"root": root, "members": members, "nonmembers": nonmembers}


def test_token_logprobs_are_the_loss_pass_with_the_vocabulary_moments(world):
    import torch

    from memlens.harness.model.load import load_causal_lm

    model, tok = load_causal_lm(world["root"] / "models" / "FT.1" / "checkpoint-40", "cpu")
    rows = world["members"][:5] + world["nonmembers"][:4]
    args = ([r["prefix"] for r in rows], [r["target"] for r in rows], [r["suffix"] for r in rows], SENT)
    got = target_token_logprobs(model, tok, *args, batch_size=4)
    np.testing.assert_allclose([-np.mean(v["logp"]) for v in got], target_losses(model, tok, *args), rtol=1e-6)
    prompt, target = encode_fim_examples(tok, *args)[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + target])).logits[0, len(prompt) - 1:-1].double()
    logp = torch.log_softmax(logits, -1)
    mu = (logp.exp() * logp).sum(-1)
    var = (logp.exp() * (logp - mu[:, None]) ** 2).sum(-1)
    np.testing.assert_allclose(got[0]["logp"], logp[torch.arange(len(target)), target].numpy(), rtol=1e-4)
    np.testing.assert_allclose(got[0]["mu"], mu.numpy(), rtol=1e-4)
    np.testing.assert_allclose(got[0]["var"], var.numpy(), rtol=1e-3)
    # Cached per span: a second call computes nothing.
    scorer = CausalLMScorer.load(world["root"] / "models" / "FT.1", "cpu", lazy=True)
    first = cached_token_logprobs(scorer, rows, SENT, world["root"] / "cache", "program")
    assert scorer.model is not None
    again = CausalLMScorer.load(world["root"] / "models" / "FT.1", "cpu", lazy=True)
    assert cached_token_logprobs(again, rows, SENT, world["root"] / "cache", "program") == first
    assert again.model is None                           # served from the cache: no weights loaded


def test_trained_members_separate_and_an_untrained_model_does_not(world):
    root = world["root"]
    pairs = {"sd_base": (root / "data" / "sd_base" / "rows.jsonl", root / "data" / "sd_base_heldout" / "rows.jsonl")}
    reference = [program_text(r) for r in _rows("ref", 16, random.Random(7))]   # same template, never trained on
    said: list[str] = []
    trained = audit_mia(root / "models" / "FT.1", "FT.1", pairs, root / "out" / "FT.1", _settings(bootstrap=200),
                        control_dir=root / "models" / "FT.2", cache_dir=root / "cache",
                        reference=reference, reference_name="ref", log=said.append)
    untrained = audit_mia(root / "models" / "FT.2", "FT.2", pairs, root / "out" / "FT.2", _settings(bootstrap=200),
                          cache_dir=root / "cache")
    assert trained["checkpoints"] == ["checkpoint-40", "final"]
    final = trained["results"]["final"]["sd_base"]
    # The first three rows by id of each side are the ReCaLL / Con-ReCall prefix shots, in no attack's metrics.
    assert final["prefix_shots"] == {"members": ["sd-0", "sd-1", "sd-10"], "nonmembers": ["sdh-0", "sdh-1", "sdh-10"]}
    assert final["n_members"] == 13 and final["n_nonmembers"] == 13
    for span in ("target", "program"):
        assert set(final["spans"][span]) == set(ATTACKS)
    for attack in set(ATTACKS) - {"ez_mia"}:    # ~100 epochs over 13 members: each tells them apart above chance
        auc = final["spans"]["target"][attack]["auc"]
        assert auc["value"] >= (0.9 if attack == "loss" else 0.75) and auc["ci95"][0] > 0.5, (attack, auc)
    # EZ-MIA, as its authors define it, scores only the positions a model gets wrong and scores 0 with fewer than two
    # of them: a member the model reproduces token for token scores 0, below the non-members. At ~100 epochs that is
    # most members, so the attack ranks them last (docs/methods.md).
    rows = read_jsonl(root / "out" / "FT.1" / "final" / "sd_base.jsonl")
    zero = [r["score"]["target"]["ez_mia"] == 0.0 for r in rows if r["member"] == 1]
    assert sum(zero) > len(zero) / 2 and final["spans"]["target"]["ez_mia"]["auc"]["value"] < 0.5
    # ... so the audit reports it as degenerate, with how many of the scored members its fallback took, and no
    # best-attack choice picks it; its AUC stays below 0.5 (not flipped).
    ez = final["spans"]["target"]["ez_mia"]
    took = sum("ez_mia" in (r.get("fallback") or {}).get("target", {}) for r in rows
               if r["member"] == 1 and not r.get("prefix_shot"))
    assert ez["fallback"]["members"] == took >= 7 and ez["degenerate"][0].startswith(f"{took} of 13 members")
    assert best_attack(final["spans"]["target"])[0] != "ez_mia"
    assert final["spans"]["target"]["loss"]["degenerate"] == []
    # The blind baseline (no model) on the same 13 vs 13 texts: one template, only random numbers differ, so the texts
    # alone do not tell them apart (interval holds 0.5) and no warning is printed; every attack is compared with it.
    for span in ("target", "program"):
        blind = trained["blind"]["sd_base"]["spans"][span]["auc"]
        assert blind["ci95"][0] < 0.5 < blind["ci95"][1], (span, blind)
        assert all("vs_blind" in m for m in final["spans"][span].values())
    assert not [line for line in said if "WARNING" in line]
    assert all(set(r["blind"]) == {"target", "program"} for r in rows if not r.get("prefix_shot"))
    assert final["earlier_checkpoints"] == 1                   # the sequence attacks read checkpoint-40's scores
    first = trained["results"]["checkpoint-40"]["sd_base"]["spans"]["target"]
    assert "sequence_loss" not in first and "loss" in first    # no earlier checkpoint: no sequence to score
    # The whole program as plain text is not the order the model trained on (PSM puts the middle last) and
    # its shared template tokens dilute the mean: weaker, still above chance.
    program = final["spans"]["program"]["loss"]["auc"]
    assert program["value"] > 0.7 and program["ci95"][0] > 0.5, program
    control_free = untrained["results"]["final"]["sd_base"]["spans"]
    assert "reference" not in control_free["target"]          # no control given: no calibrated attack
    assert "rmia" not in control_free["target"]               # ... nor RMIA (its Pr(x) is the control's)
    # RMIA's population is the 13 held-out texts the metrics count (shots left out), each left out of its own: its
    # score, recomputed from the rows' own LOSS (LL under FT.1) and reference (LL - LL under the control) scores.
    def ratio(r, span):
        ll = r["score"][span]["loss"]
        return float(rmia_ratio(ll, ll - r["score"][span]["reference"]))

    for span in ("target", "program"):
        held = [r for r in rows if r["member"] == 0 and not r.get("prefix_shot")]
        for r in rows:
            lrs = [ratio(r, span) / ratio(z, span) for z in held if z["id"] != r["id"]]
            low, high = (sum(lr > 1 + e for lr in lrs) / len(lrs) for e in (1e-9, -1e-9))
            assert low <= r["score"][span]["rmia"] <= high, (span, r["id"])
    for span in ("target", "program"):
        auc = control_free[span]["loss"]["auc"]
        assert abs(auc["value"] - 0.5) < 0.25 and auc["ci95"][0] < 0.5 < auc["ci95"][1], (span, auc)
    # ... but scored, flagged, by every attack that reads no prefix: the one-run ε audit ranks every canary
    assert len(rows) == 32 and {r["member"] for r in rows} == {0, 1}
    shots = [r for r in rows if r.get("prefix_shot")]
    assert {r["id"] for r in shots} == {"sd-0", "sd-1", "sd-10", "sdh-0", "sdh-1", "sdh-10"}
    assert all(r["score"]["target"]["recall"] is None and r["score"]["target"]["loss"] is not None for r in shots)


def test_a_split_told_apart_without_the_model_is_warned_before_any_checkpoint_is_scored(world, tmp_path):
    """Members whose target names a variable the held-out ones never use (`secret_key` against `key`): the blind
    baseline separates them from the texts alone (AUC 1), and the audit says so before it has scored any checkpoint
    (the cache, fresh here, holds no model's values yet when the warning is logged: only the baseline's own entry),
    naming the fix."""
    members = [{**r, "target": r["target"].replace("key =", "secret_key =")} for r in world["members"]]
    atomic_write_jsonl(tmp_path / "members.jsonl", members)
    pairs = {"shifted": (tmp_path / "members.jsonl", world["root"] / "data" / "sd_base_heldout" / "rows.jsonl")}
    cache = tmp_path / "cache"
    said: list[tuple[str, bool]] = []
    summary = audit_mia(world["root"] / "models" / "FT.1", "FT.1", pairs, tmp_path / "out",
                        _settings(spans=("target",), bootstrap=100), cache_dir=cache, all_checkpoints=False,
                        log=lambda line: said.append((line, cache.exists() and any(
                            p.name != "blind_baseline" for p in cache.iterdir()))))
    warnings = [(line, scored) for line, scored in said if "WARNING" in line]
    assert len(warnings) == 1 and warnings[0][1] is False, said
    assert "shifted (target span): the blind baseline (no model) tells its 13 members from its 13 non-members" in \
        warnings[0][0] and "fair coin, as memlens.inject does" in warnings[0][0]
    assert summary["blind"]["shifted"]["spans"]["target"]["auc"]["value"] == 1.0


def test_a_rerun_reads_the_blind_baseline_from_the_cache_and_scores_the_same(world, tmp_path, monkeypatch):
    """The blind baseline's out-of-fold scores are stored in the audit cache, keyed by their texts: a second audit in a
    new process (this process's memory cleared) reads them instead of fitting the classifier again (which would raise
    here), and writes the same rows and the same blind metrics (computed again from the scores: another bootstrap
    count reads the same entry); other texts get an entry of their own."""
    import memlens.harness.audit.mia as mia_audit

    pairs = {"sd_base": (world["root"] / "data" / "sd_base" / "rows.jsonl",
                         world["root"] / "data" / "sd_base_heldout" / "rows.jsonl")}
    cache = tmp_path / "cache"

    def audit(out: str, chosen=pairs) -> dict:
        return audit_mia(world["root"] / "models" / "FT.1", "FT.1", chosen, tmp_path / out,
                         _settings(spans=("target",), bootstrap=100), cache_dir=cache, all_checkpoints=False,
                         log=lambda _: None)

    monkeypatch.setattr(mia_audit, "_BLIND_SCORES", {})
    first = audit("first")
    stored = sorted((cache / "blind_baseline").glob("*.json"))
    assert len(stored) == 1

    def refit(*args, **kwargs):
        raise AssertionError("the blind baseline was fitted again")

    monkeypatch.setattr(mia_audit, "_BLIND_SCORES", {})
    monkeypatch.setattr(mia_audit, "blind_scores", refit)
    again = audit("again")
    assert again["blind"] == first["blind"]
    assert (tmp_path / "again" / "final" / "sd_base.jsonl").read_bytes() == \
        (tmp_path / "first" / "final" / "sd_base.jsonl").read_bytes()
    fewer = audit_mia(world["root"] / "models" / "FT.1", "FT.1", pairs, tmp_path / "fewer",
                      _settings(spans=("target",), bootstrap=50), cache_dir=cache, all_checkpoints=False,
                      log=lambda _: None)
    assert fewer["blind"]["sd_base"]["spans"]["target"]["auc"]["value"] == \
        first["blind"]["sd_base"]["spans"]["target"]["auc"]["value"]
    assert len(list((cache / "blind_baseline").glob("*.json"))) == 1
    # other texts (the last member's target changed; the first ones are prefix shots, left out of the baseline):
    # not the stored entry, so the classifier is fitted for them
    members = read_jsonl(pairs["sd_base"][0])
    atomic_write_jsonl(tmp_path / "members.jsonl", [*members[:-1], {**members[-1], "target": "value = 7"}])
    with pytest.raises(AssertionError, match="fitted again"):
        audit("other", {"sd_base": (tmp_path / "members.jsonl", pairs["sd_base"][1])})


def test_a_summary_joins_earlier_checkpoints_only_on_the_same_member_and_heldout_files(world, tmp_path):
    """The callback's way (`checkpoints=`, one at a time into one out_dir): a second checkpoint joins the first's
    results on the same files, but an out_dir reused with other canaries (a member file changed) starts afresh instead
    of merging results of other data under the new files' fingerprints."""
    models = world["root"] / "models" / "FT.1"
    heldout = world["root"] / "data" / "sd_base_heldout" / "rows.jsonl"
    members = read_jsonl(world["root"] / "data" / "sd_base" / "rows.jsonl")
    atomic_write_jsonl(tmp_path / "same.jsonl", members)
    atomic_write_jsonl(tmp_path / "other.jsonl", [*members[:-1], {**members[-1], "target": "value = 7"}])

    def one(checkpoint: str, path: Path, member_file: str) -> dict:
        return audit_mia(models, "FT.1", {"sd_base": (tmp_path / member_file, heldout)}, tmp_path / "out",
                         _settings(spans=("target",), bootstrap=50), cache_dir=tmp_path / "cache",
                         checkpoints=[(checkpoint, path)], log=lambda _: None)

    assert one("checkpoint-40", models / "checkpoint-40", "same.jsonl")["checkpoints"] == ["checkpoint-40"]
    assert one("final", models, "same.jsonl")["checkpoints"] == ["checkpoint-40", "final"]
    assert one("final", models, "other.jsonl")["checkpoints"] == ["final"]


def test_the_run_audit_writes_mia_below_the_audit_dir_and_reruns_from_the_cache(world):
    root = world["root"]
    cfg = OmegaConf.create({
        "run_dir": str(root), "seed": 0,
        "audit": {"out_dir": str(root / "audit"), "cache_dir": str(root / "audit" / "cache"), "measures": ["mia"],
                  "mia_spans": ["target"], "mia_bootstrap": 100, "batch_size": 8, "device": "cpu",
                  "fim_family": None},
        "audit_plan": [{"models": ["FT.1"], "control": "FT.2", "datasets": ["sd_base"]}]})
    assert audit_main(cfg) == 0
    summary = read_json(root / "audit" / "mia" / "summary.json")
    entry = summary["results"]["FT.1"]["results"]["final"]["sd_base"]["spans"]["target"]
    assert entry["loss"]["auc"]["value"] >= 0.9 and entry["loss"]["bootstrap"] == {
        "n": 100, "seed": 0, "method": "stratified percentile"}
    rows = (root / "audit" / "mia" / "FT.1" / "final" / "sd_base.jsonl").read_bytes()
    assert audit_main(cfg) == 0
    assert (root / "audit" / "mia" / "FT.1" / "final" / "sd_base.jsonl").read_bytes() == rows


def test_bad_mia_settings_name_the_key_and_a_plan_without_held_out_sets_is_noted(world, tmp_path):
    from memlens.harness.core.errors import UserError

    root = world["root"]

    def cfg(**audit):
        return OmegaConf.create({
            "run_dir": str(root), "seed": 0,
            "audit": {"out_dir": str(tmp_path / "audit"), "cache_dir": str(root / "audit" / "cache"),
                      "measures": ["mia"], "batch_size": 8, "device": "cpu", "fim_family": None, **audit},
            "audit_plan": [{"models": ["FT.1"], "control": "FT.2", "datasets": ["sd_base"]}]})

    with pytest.raises(UserError, match=r"audit\.mia_spans=\['prog'\]: use a non-empty list of \['target', 'program'\]"):
        audit_main(cfg(mia_spans=["prog"]))
    with pytest.raises(UserError, match=r"audit\.mia_bootstrap=0: must be a positive integer"):
        audit_main(cfg(mia_bootstrap=0, measures=["ned", "mia"]))     # refused before the NED audit scores a model
    with pytest.raises(UserError, match=r"audit\.measures=\['ned', 'mai'\]: unknown \['mai'\]"):
        audit_main(cfg(measures=["ned", "mai"]))
    assert not (tmp_path / "audit").exists()
    said = []
    no_partner = cfg()
    no_partner.audit_plan[0].datasets = ["sd_base_heldout"]         # scored as members: it has no partner
    from memlens.harness.audit.mia import MiaSettings, audit_run_mia

    audit_run_mia(no_partner, MiaSettings.from_config(no_partner.audit), log=said.append)
    assert "no planned dataset has a held-out partner" in said[-1] and not (tmp_path / "audit" / "mia").exists()


def test_an_attack_and_a_measure_registered_from_here_reach_the_audit_and_the_report(world, tmp_path):
    """The registries are the only edit: an attack (the target's length in characters, shorter = member, a
    deliberately weak feature) and a measure (rows per dataset, written by the measure, read back for the
    report) registered in this file appear in the MIA summary and rows, the audit's output and report.html."""
    from memlens.harness.audit.measure_registry import MEASURES, Measure
    from memlens.harness.measures.mia import Attack
    from memlens.harness.report.render import render_report

    root = world["root"]
    out = tmp_path / "audit"

    def count_rows(cfg, log=print) -> None:
        counts = {d: len(read_jsonl(root / "data" / d / "rows.jsonl")) for d in ("sd_base", "sd_base_heldout")}
        atomic_write_json(out / "row_count.json", counts)

    def row_count_table(audit_dir):
        path = audit_dir / "row_count.json"
        if not path.is_file():
            return None
        return ["dataset", "rows"], [{"dataset": d, "rows": n} for d, n in read_json(path).items()]

    length = Attack("target length", lambda x: -float(len(x.text)))
    measure = Measure("Rows per dataset", count_rows, report_rows=row_count_table)
    cfg = OmegaConf.create({
        "run_dir": str(root), "seed": 0,
        "audit": {"out_dir": str(out), "cache_dir": str(root / "audit" / "cache"), "measures": ["mia", "row_count"],
                  "mia_spans": ["target"], "mia_bootstrap": 50, "batch_size": 8, "device": "cpu", "fim_family": None},
        "audit_plan": [{"models": ["FT.1"], "control": "FT.2", "datasets": ["sd_base"]}],
        "report": {"out_dir": str(tmp_path / "report")}})
    with ATTACKS.registered("target_length", length), MEASURES.registered("row_count", measure):
        assert audit_main(cfg) == 0
        assert render_report(cfg) == 0
    assert "target_length" not in ATTACKS and "row_count" not in MEASURES    # the with-blocks took them back
    summary = read_json(out / "mia" / "FT.1" / "summary.json")
    assert summary["attacks"][-1] == "target_length"
    auc = summary["results"]["final"]["sd_base"]["spans"]["target"]["target_length"]["auc"]
    assert 0 <= auc["value"] <= 1 and auc["ci95"][0] <= auc["value"] <= auc["ci95"][1]
    row = read_jsonl(out / "mia" / "FT.1" / "final" / "sd_base.jsonl")[0]
    member = next(r for r in world["members"] if r["id"] == row["id"])
    assert row["score"]["target"]["target_length"] == -len(member["target"])
    assert read_json(out / "row_count.json") == {"sd_base": 16, "sd_base_heldout": 16}
    html = (tmp_path / "report" / "report.html").read_text()
    assert "target length" in html                                       # the attack's label, in the MIA table
    sequence = read_json(tmp_path / "report" / "summary.json")["membership_inference_sequence"]
    assert {r["attack"] for r in sequence} >= {"sequence_loss", "sequence_reference"}
    assert all(r["checkpoints"] == 2 and r["gain_ci95"][0] <= r["gain"] <= r["gain_ci95"][1] for r in sequence)
    assert "The checkpoint sequence against the best single checkpoint" in html
    assert "Rows per dataset (audit.measures: row_count)" in html and "sd_base_heldout" in html
    assert read_json(tmp_path / "report" / "summary.json")["measures"]["row_count"] == [
        {"dataset": "sd_base", "rows": 16}, {"dataset": "sd_base_heldout", "rows": 16}]


def test_discoverable_extraction_over_the_run_reads_the_ned_rows_and_reruns_from_the_cache(world, tmp_path):
    """`audit.measures=[ned, discoverable]` with the shipped audit settings: the members the model trained on
    ~100 times are extracted by sampling where the untrained control extracts none, over exactly the examples
    the NED audit scored; rates carry n and intervals; the report's table reads them; a rerun computes nothing
    and rewrites the same bytes; without the NED rows it refuses with the fix."""
    from memlens.harness.audit.discoverable import report_rows
    from memlens.harness.core.errors import UserError
    from memlens.harness.core.io import file_sha256
    from memlens.harness.core.shipped import shipped_path

    root = world["root"]
    rows_file = root / "data" / "sd_base" / "rows.jsonl"
    atomic_write_json(rows_file.with_name("manifest.json"), {"sha256": file_sha256(rows_file)})   # as `memlens data`
    out = tmp_path / "audit"
    audit = OmegaConf.merge(OmegaConf.load(shipped_path("conf/audit/default.yaml")), {
        "out_dir": str(out), "cache_dir": str(out / "cache"), "measures": ["ned", "discoverable"],
        "utility": False, "batch_size": 8, "threads": 1, "progress": False, "fim_family": None})
    cfg = OmegaConf.create({"run_dir": str(root), "seed": 0, "device": "cpu", "audit": audit,
                            "audit_plan": [{"models": ["FT.1"], "control": "FT.2", "datasets": ["sd_base"]}]})
    assert audit_main(cfg) == 0
    summary = read_json(out / "discoverable" / "summary.json")
    ned = read_json(out / "summary.json")["results"]["FT.1"]
    for checkpoint in ("checkpoint-40", "final"):
        entry = summary["results"]["FT.1"][checkpoint]["sd_base"]
        assert entry["n_scored"] == ned[checkpoint]["sd_base"]["n_scored"] > 0
        assert entry["greedy_ned"]["k"] == ned[checkpoint]["sd_base"]["n_memorized"]
    final = summary["results"]["FT.1"]["final"]["sd_base"]
    sampled = {(pt["n_queries"], pt["p"]): pt for pt in final["schemes"]["top_k40"]}
    loose = sampled[(10_000, 0.5)]
    assert loose["counterfactual"]["rate"] > 0.5 and loose["control"]["k"] == 0, loose
    assert loose["counterfactual"]["ci95"][0] <= loose["counterfactual"]["rate"] <= loose["counterfactual"]["ci95"][1]
    # More queries never lower a rate; a surer p never raises it.
    rates = [sampled[(n, 0.5)]["audited"]["k"] for n in summary["queries"]]
    assert rates == sorted(rates) and sampled[(10_000, 0.9)]["audited"]["k"] <= loose["audited"]["k"]
    columns, rows = report_rows(out)
    assert columns == ["model", "dataset", "n", "greedy NED", "greedy exact", "top_k40 n=10000, p=0.5",
                       "top_k40 n=10000, p=0.9"]
    assert len(rows) == 1 and rows[0]["n"] == final["n_scored"]
    assert rows[0]["top_k40 n=10000, p=0.5"].startswith(f"{100 * loose['counterfactual']['rate']:.1f} % [")
    before = {p: p.read_bytes() for p in sorted((out / "discoverable").rglob("*.jsonl"))}
    summary_rows = summary["results"]
    assert audit_main(cfg) == 0
    assert {p: p.read_bytes() for p in sorted((out / "discoverable").rglob("*.jsonl"))} == before
    assert read_json(out / "discoverable" / "summary.json")["results"] == summary_rows
    alone = OmegaConf.merge(cfg, {"audit": {"out_dir": str(tmp_path / "alone"), "measures": ["discoverable"]}})
    with pytest.raises(UserError, match=r"no extraction-audit rows .* put ned before discoverable in audit\.measures"):
        audit_main(alone)


def test_a_bad_setting_of_a_later_measure_stops_the_audit_before_the_first_runs(world, tmp_path):
    """Every measure's settings are parsed before any runs (Measure.settings, command.plan_settings): a bad
    discoverable or epsilon setting fails in a second, not after the NED audit decoded every checkpoint."""
    from memlens.harness.core.errors import UserError
    from memlens.harness.core.shipped import shipped_path

    audit = OmegaConf.merge(OmegaConf.load(shipped_path("conf/audit/default.yaml")), {
        "out_dir": str(tmp_path / "audit"), "cache_dir": str(tmp_path / "audit" / "cache"), "utility": False,
        "batch_size": 8, "threads": 1, "progress": False, "fim_family": None})
    base = {"run_dir": str(world["root"]), "seed": 0, "device": "cpu",
            "audit_plan": [{"models": ["FT.1"], "control": "FT.2", "datasets": ["sd_base"]}]}
    cases = [({"measures": ["ned", "discoverable"], "discoverable_p": [2]}, r"audit\.discoverable_p=\[2\.0\]"),
             ({"measures": ["ned", "epsilon"]}, r"epsilon reads the membership-inference scores; add mia"),
             ({"measures": ["ned", "mia", "epsilon"], "epsilon_delta": 2}, r"audit\.epsilon_delta=2")]
    for settings, message in cases:
        cfg = OmegaConf.create({**base, "audit": OmegaConf.merge(audit, settings)})
        with pytest.raises(UserError, match=message):
            audit_main(cfg)
        assert not (tmp_path / "audit").exists()                  # nothing ran, nothing was written


def test_a_conditioned_pass_reuses_the_prefix_and_scores_what_the_concatenated_rows_score(world):
    """ReCaLL's pass: the prefix's keys and values computed once and shared by every batch give the per-token values
    of each row with the prefix written before it (float rounding apart), on the same target tokens as the plain
    pass; a context longer than the model allows is cut from its start, once for every row."""
    from memlens.harness.model.logprobs import token_logprob_stats_batched, with_context

    scorer = CausalLMScorer.load(world["root"] / "models" / "FT.1", "cpu")
    rows = world["members"][:5]
    examples = encode_fim_examples(scorer.tokenizer, [r["prefix"] for r in rows], [r["target"] for r in rows],
                                   [r["suffix"] for r in rows], SENT)
    context = scorer.tokenizer("x = 1\ny = 2\n" * 10, add_special_tokens=False)["input_ids"]
    shared, conditioned = with_context(examples, context, head=0)
    assert len(shared) == len(context) - 1 and all(p[0] == context[-1] for p, _ in conditioned)
    cached = token_logprob_stats_batched(scorer.model, conditioned, batch_size=2, shared=shared)
    concatenated = token_logprob_stats_batched(scorer.model, [(shared + p, t) for p, t in conditioned], batch_size=2)
    plain = token_logprob_stats_batched(scorer.model, examples, batch_size=2)
    for a, b, c in zip(cached, concatenated, plain):
        assert a["ids"] == b["ids"] == c["ids"] and a["top1"] == b["top1"]
        assert np.allclose(a["logp"], b["logp"], atol=1e-4) and not np.allclose(a["logp"], c["logp"], atol=1e-4)
    longest = max(len(p) + len(t) for p, t in examples)
    cut, _ = with_context(examples, context, head=0, max_tokens=longest + 10)
    assert cut == context[-10:-1]                           # 10 ids fit: the context's last 10 (one stays in the row)
    assert with_context(examples, context, head=0, max_tokens=longest)[0] == []   # none fit: no prefix at all


def test_members_planted_different_numbers_of_times_get_a_table_per_tier(world, tmp_path):
    """Members carrying `repeat` 1 and 4 (a user's canaries): the final checkpoint's metrics also per tier, each tier's
    members against every held-out row, the prefix shots left out of both."""
    members = [{**r, "repeat": 1 if i % 2 else 4} for i, r in enumerate(world["members"])]
    atomic_write_jsonl(tmp_path / "members.jsonl", members)
    pairs = {"sd_base": (tmp_path / "members.jsonl", world["root"] / "data" / "sd_base_heldout" / "rows.jsonl")}
    summary = audit_mia(world["root"] / "models" / "FT.1", "FT.1", pairs, tmp_path / "out",
                        _settings(spans=("target",), bootstrap=50), control_dir=world["root"] / "models" / "FT.2",
                        cache_dir=world["root"] / "cache", all_checkpoints=False)
    final = summary["results"]["final"]["sd_base"]
    shots = set(final["prefix_shots"]["members"])
    by_repeat = {t: sum(1 for r in members if r["repeat"] == int(t) and r["id"] not in shots) for t in ("1", "4")}
    assert set(final["tiers"]) == {"1", "4"}
    for tier, n in by_repeat.items():
        loss = final["tiers"][tier]["target"]["loss"]
        assert loss["n_members"] == n and loss["n_nonmembers"] == final["n_nonmembers"] == 13
