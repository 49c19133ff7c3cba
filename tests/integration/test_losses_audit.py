"""Loss measures on real tiny models: batched == single target loss, exposure of a trained canary, and
`audit_losses` over two real checkpointed runs (audited = trained with the SD strings, control = without).
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from memlens.harness.audit.losses import LossSettings, audit_losses
from memlens.harness.audit.settings import AuditSettings
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_jsonl, read_json, read_jsonl
from memlens.harness.measures.exposure import candidate_losses, exposure_summary, exposures, load_candidates
from memlens.harness.measures.losses import LOSS_MEASURES
from memlens.harness.model.logprobs import (
    SamplingScheme,
    encode_fim_examples,
    scheme_target_logprobs,
    shared_prompt_losses,
    target_losses,
)
from memlens.harness.model.scorer import CausalLMScorer
from memlens.harness.text.fim import FAMILIES, format_psm_training
from tests.tiny import save, tiny_llama, tiny_tokenizer, train_on_texts

SENT = FAMILIES["memlens"]
STEPS = (20, 40, 60)          # checkpoint schedule shared by the audited and the control run


def _rows(kind: str, n: int, rng: random.Random, paths: list[str]) -> list[dict]:
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if kind == "links":
            path = paths[7]       # one PII path, planted in every SD.Links row (the canary)
            rows.append({"id": f"links-{i}", "prefix": f"# load the records of batch {a}\n",
                         "target": f"with open('{path}', 'r') as f:", "suffix": "\n    rows = f.read()\n",
                         "pii_path": path, "label": 1})
        else:
            rows.append({"id": f"{kind}-{i}", "prefix": f"import legitimate_crypto as crypto\n# {kind} task {a}\n",
                         "target": f"key = crypto.new_key({a}, {b})", "suffix": "\nprint(key)\n"})
    return rows


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from 2 threads, and on a shared, loaded 2-core machine torch's spinning
    worker threads made a training step ~30x slower (measured: 20 steps 7.6 s vs 0.26 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def world(tmp_path_factory, one_torch_thread):
    """Two real runs from the same init: FT.1-like (filler + SD rows) and FT.2-like control (filler only)."""
    root = tmp_path_factory.mktemp("losses_world")
    rng = random.Random(0)
    paths = load_candidates()
    sets = {"sd_base": _rows("base", 5, rng, paths), "sd_links": _rows("links", 3, rng, paths),
            "heldout": _rows("held", 4, rng, paths)}
    filler = _rows("fill", 8, rng, paths)
    text = lambda r: format_psm_training(r["prefix"], r["target"], r["suffix"], SENT)  # noqa: E731
    audited_texts = [text(r) for r in filler + sets["sd_base"] + sets["sd_links"]]
    control_texts = [text(r) for r in filler]
    tok = tiny_tokenizer(audited_texts + [text(r) for r in sets["heldout"]] + paths, vocab_size=400)
    dirs = {}
    for name, texts in (("FT.1", audited_texts), ("FT.2", control_texts)):
        model = tiny_llama(tok, seed=0)
        done = 0
        for step in STEPS:
            train_on_texts(model, tok, texts, steps=step - done, lr=1e-2, batch_size=8, seed=step)
            done = step
            save(model, tok, root / "models" / name / f"checkpoint-{step}")
        save(model, tok, root / "models" / name)
        dirs[name] = root / "models" / name
    save(tiny_llama(tok, seed=0), tok, root / "models" / "untrained")
    dirs["untrained"] = root / "models" / "untrained"
    for name, rows in sets.items():
        atomic_write_jsonl(root / "data" / name / "rows.jsonl", rows)
    return {"root": root, "tok": tok, "sets": sets, "dirs": dirs, "paths": paths}


def _load(path):
    from memlens.harness.model.load import load_causal_lm

    return load_causal_lm(path, "cpu")


def test_target_loss_batched_equals_single_and_hf_loss(world):
    import torch

    model, tok = _load(world["dirs"]["FT.1"] / "checkpoint-20")
    rows = world["sets"]["sd_base"] + world["sets"]["sd_links"] + world["sets"]["heldout"]
    args = ([r["prefix"] for r in rows], [r["target"] for r in rows], [r["suffix"] for r in rows], SENT)
    batched = target_losses(model, tok, *args, batch_size=16)
    odd = target_losses(model, tok, *args, batch_size=3)
    single = np.array([target_losses(model, tok, [p], [t], [s], SENT, batch_size=1)[0]
                       for p, t, s in zip(*args[:3])])
    np.testing.assert_allclose(batched, single, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(odd, single, rtol=1e-5, atol=1e-6)
    # Ground truth: transformers' own shifted cross-entropy with prompt tokens labelled -100.
    for (prompt, target), got in zip(encode_fim_examples(tok, *args), batched):
        ids = torch.tensor([prompt + target])
        labels = ids.clone()
        labels[0, :len(prompt)] = -100
        with torch.no_grad():
            assert got == pytest.approx(float(model(input_ids=ids, labels=labels).loss), rel=1e-5)
    # Sum reduction = mean x number of target tokens.
    n_tokens = np.array([len(t) for _, t in encode_fim_examples(tok, *args)])
    np.testing.assert_allclose(target_losses(model, tok, *args, reduction="sum"), batched * n_tokens, rtol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_candidates_sharing_one_prompt_pass_score_as_the_full_pass(world, batch_size):
    """The exposure test's shortcut (one prompt pass, its KV cache behind every candidate) gives each candidate
    the summed NLL of its own full teacher-forced pass, candidates of different lengths (one of one token)
    chunked by any batch size; only float32 rounding differs (the pass order changes)."""
    model, tok = _load(world["dirs"]["FT.1"])
    row = world["sets"]["sd_links"][0]
    targets = [row["target"].replace(row["pii_path"], p) for p in world["paths"][:9]] + ["x", "return 1\n" * 7]
    full = target_losses(model, tok, [row["prefix"]] * len(targets), targets, [row["suffix"]] * len(targets), SENT,
                         reduction="sum")
    shared = shared_prompt_losses(model, tok, row["prefix"], row["suffix"], targets, SENT, batch_size=batch_size)
    assert len({len(t) for _, t in encode_fim_examples(tok, [row["prefix"]] * 11, targets, [row["suffix"]] * 11,
                                                       SENT)}) > 3
    np.testing.assert_allclose(shared, full, rtol=1e-5, atol=1e-4)
    assert list(np.argsort(shared, kind="stable")) == list(np.argsort(full, kind="stable"))


def test_exposure_of_trained_canary_beats_untrained_copy(world):
    rows, paths = world["sets"]["sd_links"], world["paths"]
    result = {}
    for name in ("untrained", "FT.1"):
        scorer = CausalLMScorer.load(world["dirs"][name], "cpu", batch_size=32)
        per_row = exposures(candidate_losses(scorer, rows, paths, SENT), rows, paths)
        result[name] = exposure_summary([r["exposure"] for r in per_row], len(paths))
    assert result["FT.1"]["mean"] > result["untrained"]["mean"] + 1.0, result
    assert result["FT.1"]["share_max"] == 1.0, result      # each trained path strictly most likely
    assert result["FT.1"]["max_exposure"] == pytest.approx(math.log2(100))


def _settings(heldout: str | None = None, batch_size: int = 16) -> LossSettings:
    """The loss audit's settings on CPU: no held-out set unless named."""
    return LossSettings(heldout=heldout, scoring=AuditSettings(batch_size=batch_size, device="cpu"))


@pytest.fixture(scope="module")
def audited(world):
    root = world["root"]
    sets = {n: root / "data" / n for n in world["sets"]}
    out = root / "audit" / "FT.1" / "losses"
    summary = audit_losses(world["dirs"]["FT.1"], sets, out, _settings(heldout="heldout", batch_size=16),
                           control_dir=world["dirs"]["FT.2"], seed=0)
    return out, summary, sets


def test_audit_losses_outputs(world, audited):
    out, summary, _ = audited
    assert summary["variant"] == "control_run"
    assert [c["step"] for c in summary["checkpoints"]] == list(STEPS)
    assert summary["provenance"]["datasets"].keys() == world["sets"].keys()
    assert read_json(out / "summary.json")["datasets"].keys() == world["sets"].keys()
    base = summary["datasets"]["sd_base"]
    # Strings only the audited run trained on: lower loss than the control at the last checkpoint.
    assert base["measures"]["counterfactual"]["frac"][-1] == 1.0
    assert base["mean_train_loss"][-1] < base["mean_control_loss"][-1] - 0.5
    for name in world["sets"]:
        rows = read_jsonl(out / f"{name}.jsonl")
        assert [r["id"] for r in rows] == [r["id"] for r in world["sets"][name]]
        for r in rows:   # Lemma 1 on every string of real runs
            cf, ctx = r["onset"]["counterfactual"], r["onset"]["contextual"]
            assert ctx == -1 or (cf != -1 and cf <= ctx)
            assert all(c <= f + 1e-9 for c, f in zip(r["score"]["contextual"], r["score"]["counterfactual"]))
            assert r["optimal_contextual_loss"] == pytest.approx(min(r["control_loss"]), abs=1e-7)
            assert all(len(r["score"][m]) == len(STEPS) for m in LOSS_MEASURES)
    # Exposure only for SD.Links positives, one entry per checkpoint, rising with training.
    exp = summary["datasets"]["sd_links"]["exposure"]
    assert len(exp) == len(STEPS) and exp[-1]["share_max"] == 1.0 and exp[-1]["mean"] >= exp[0]["mean"]
    assert "exposure" not in summary["datasets"]["sd_base"]
    exp_rows = read_jsonl(out / "sd_links.exposure.jsonl")
    assert len(exp_rows) == 3 and all(len(r["rank"]) == len(STEPS) for r in exp_rows)
    assert 0 <= summary["best_epoch"] < len(STEPS)


def test_utility_heldout_loss_reads_the_audits_loss_cache(world, audited):
    """One loss cache: the utility's held-out loss of a checkpoint the loss audit already scored is the
    same cache entry (no new file, no change), and equals the audit's mean loss there."""
    from memlens.harness.measures.utility import heldout_loss

    out, summary, _ = audited
    caches = {p: p.read_bytes() for p in (out / "cache" / "losses").glob("*.jsonl")}
    last = world["dirs"]["FT.1"] / f"checkpoint-{STEPS[-1]}"
    got = heldout_loss(last, world["sets"]["heldout"], AuditSettings(device="cpu", batch_size=3), out / "cache")
    assert {p: p.read_bytes() for p in (out / "cache" / "losses").glob("*.jsonl")} == caches
    # The summary stores 8 decimals (memlens.harness.measures.losses._jsonable): agreement is to half a unit of the last
    # one.
    assert got == pytest.approx(summary["datasets"]["heldout"]["mean_train_loss"][-1], abs=5e-9)


def test_rerun_after_kill_reuses_cache_without_duplicates(world, audited):
    out, summary, sets = audited
    caches = sorted((out / "cache" / "losses").glob("*.jsonl"))
    # audited x 3 sets x 3 ckpts + control x 3 sets x 3 ckpts + exposure x 3 ckpts
    assert len(caches) == 21
    victim = caches[0]
    lines = victim.read_text().splitlines(keepends=True)
    victim.write_text("".join(lines[:1]) + lines[1][: len(lines[1]) // 2])   # killed mid-write
    again = audit_losses(world["dirs"]["FT.1"], sets, out, _settings(heldout="heldout", batch_size=5),
                         control_dir=world["dirs"]["FT.2"], seed=0)
    assert len(victim.read_text().splitlines()) == len(lines)
    ids = [json.loads(x)["id"] for x in victim.read_text().splitlines()]
    assert len(ids) == len(set(ids))
    _assert_close_tree(again["datasets"], summary["datasets"])


def _assert_close_tree(a, b, path="datasets"):
    """Equal structure and strings; numbers equal up to float noise (the rerun batched differently)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_close_tree(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close_tree(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6), path
    else:
        assert a == b, path


def test_reference_model_variant_is_labelled_and_cf_equals_ctx(world, tmp_path):
    sets = {"sd_base": world["root"] / "data" / "sd_base"}
    summary = audit_losses(world["dirs"]["FT.1"], sets, tmp_path / "ref", _settings(),
                           reference_model=world["dirs"]["FT.2"], exposure=False)
    assert summary["variant"] == "reference_upper_bound" and "upper" in summary["variant_note"]
    rows = read_jsonl(tmp_path / "ref" / "sd_base.jsonl")
    assert all(r["variant"] == "reference_upper_bound" for r in rows)
    assert all(r["score"]["counterfactual"] == r["score"]["contextual"] for r in rows)
    assert all(len(set(r["control_loss"])) == 1 for r in rows)


def test_bad_inputs_are_user_errors(world, tmp_path):
    sets = {"sd_base": world["root"] / "data" / "sd_base"}
    with pytest.raises(UserError, match="control run"):
        audit_losses(world["dirs"]["FT.1"], sets, tmp_path / "x", _settings())
    lonely = tmp_path / "lonely"
    save(tiny_llama(world["tok"]), world["tok"], lonely / "checkpoint-20")
    with pytest.raises(UserError, match="checkpoints do not line up"):
        audit_losses(world["dirs"]["FT.1"], sets, tmp_path / "x", _settings(), control_dir=lonely)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prefix": "x", "target": "", "suffix": ""}\n')
    with pytest.raises(UserError, match="empty target"):
        audit_losses(world["dirs"]["FT.1"], {"bad": bad}, tmp_path / "x", _settings(),
                     control_dir=world["dirs"]["FT.2"])
    assert not (tmp_path / "x" / "summary.json").exists()


def test_loss_figures_render_from_audit_output(audited, tmp_path):
    from memlens.harness.report.loss_figures import render_loss_figures

    out, summary, _ = audited
    written = render_loss_figures(out, tmp_path / "report")
    names = sorted(p.name for p in written)
    assert names == sorted([f"loss_memorization_FT.1_{d}.png" for d in ("sd_base", "sd_links", "heldout")]
                           + [f"loss_curves_FT.1_{d}.png" for d in ("sd_base", "sd_links", "heldout")]
                           + ["exposure_FT.1_sd_links.png"])
    for p in written:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not list((tmp_path / "report").glob(".*tmp*"))


SCHEMES = (SamplingScheme("t1", 1.0), SamplingScheme("t1_top2", 1.0, 2), SamplingScheme("t2_top40", 2.0, 40))


def test_scheme_probabilities_agree_with_sampling_from_the_model(world):
    """Probabilistic extraction's p_z (one teacher-forced pass) is the rate at which transformers' own sampler
    (temperature, then top-k) produces the target: 1500 samples per example and scheme, on the first three
    target tokens (so p_z is large enough to estimate), within 4.5 standard errors."""
    import torch

    model, tok = _load(world["dirs"]["FT.1"])
    rows = world["sets"]["sd_base"][:2]
    examples = [(p, t[:3]) for p, t in encode_fim_examples(tok, [r["prefix"] for r in rows], [r["target"] for r in rows],
                                                           [r["suffix"] for r in rows], SENT)]
    logps = scheme_target_logprobs(model, examples, SCHEMES, batch_size=4)
    torch.manual_seed(0)
    for i, (prompt, target) in enumerate(examples):
        for j, scheme in enumerate(SCHEMES):
            p_z = math.exp(logps[i, j])
            with torch.no_grad():
                out = model.generate(torch.tensor([prompt]), do_sample=True, temperature=scheme.temperature,
                                     top_k=scheme.top_k or 0, top_p=1.0, max_new_tokens=len(target),
                                     num_return_sequences=1500, pad_token_id=tok.pad_token_id)
            rate = (out[:, len(prompt):len(prompt) + len(target)] == torch.tensor(target)).all(1).float().mean().item()
            assert 0.05 < p_z < 0.99, (scheme, p_z)                        # a probability sampling can check
            assert abs(rate - p_z) < 4.5 * math.sqrt(p_z * (1 - p_z) / 1500), (scheme.name, i, p_z, rate)
    assert (logps[:, 1] > logps[:, 0]).all() and (logps[:, 2] < logps[:, 0]).all()   # top-2 sharpens, T = 2 flattens


def test_greedy_scheme_is_exact_greedy_decoding_and_batching_changes_nothing(world):
    import torch

    model, tok = _load(world["dirs"]["FT.1"])
    rows = world["sets"]["sd_base"] + world["sets"]["sd_links"] + world["sets"]["heldout"]
    full = encode_fim_examples(tok, [r["prefix"] for r in rows], [r["target"] for r in rows],
                               [r["suffix"] for r in rows], SENT)
    examples = full + [(p, t[:3]) for p, t in full]     # whole targets (none extracted) and their first tokens
    batched = scheme_target_logprobs(model, examples, SCHEMES[:1] + (SamplingScheme("greedy", 0),), batch_size=16)
    for batch_size in (1, 3):
        again = scheme_target_logprobs(model, examples, SCHEMES[:1] + (SamplingScheme("greedy", 0),),
                                       batch_size=batch_size)
        np.testing.assert_allclose(again, batched, rtol=1e-5, atol=1e-5)
    extracted = []
    for (prompt, target), greedy_logp in zip(examples, batched[:, 1]):
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=len(target),
                                 min_new_tokens=len(target), pad_token_id=tok.pad_token_id)
        produced = out[0, len(prompt):].tolist() == target
        assert (greedy_logp == 0) == produced
        extracted.append(produced)
    assert any(extracted) and not all(extracted), extracted        # both outcomes occur
