"""Canary survival pre-flight (harness/audit/preflight.py) on real TRL trainers and a real tokenizer: each failure
kind is caught on exactly the copies it hits, from the trainer's own processed rows and collator, before step 1; the
callback refuses to train with the fix; and the copies it flags are the ones training then does not learn."""

from __future__ import annotations

import pytest

from memlens.harness.audit.preflight import MASKED, MERGED, SPLIT, SURVIVES, TRUNCATED, check_survival, preflight
from memlens.harness.core.errors import UserError
from tests.integration.callback_helpers import common_args, make_base, rows_of

SHORT = [{"id": f"s{i}", "prefix": f"def f{i}():\n    k = ", "target": f"'q{i}{i * 7}z{i * 3}x'",
          "suffix": "\n    return k\n", "repeat": 2} for i in range(3)]
LONG = [{"id": f"l{i}", "prefix": "".join(f"# note {j} of a long header line\n" for j in range(12)) + f"def g{i}():\n"
         "    k = ", "target": f"'w{i}{i * 5}y{i * 9}v'", "suffix": "\n    return k\n", "repeat": 2} for i in range(3)]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return make_base(tmp_path_factory.mktemp("base"))


def _sft(base_dir, tmp_path, canaries, fmt="prompt_completion", field=None, **config):
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import memlens

    rows = rows_of(fmt) if fmt != "language_modeling" else [{"text": r["prompt"] + r["completion"]}
                                                               for r in rows_of("prompt_completion")]
    train, manifest = memlens.inject(Dataset.from_list(rows), canaries, seed=0, heldout_fraction=0.0, field=field,
                                     allow_masked=field is not None)
    args = trl.SFTConfig(**{**common_args(tmp_path), **config})
    trainer = trl.SFTTrainer(model=AutoModelForCausalLM.from_pretrained(base_dir), args=args, train_dataset=train,
                             processing_class=AutoTokenizer.from_pretrained(base_dir))
    return trainer, manifest


def _by_id(results):
    return {r.id: r for r in results}


def test_every_copy_on_the_trained_side_survives(base_dir, tmp_path):
    trainer, manifest = _sft(base_dir, tmp_path, SHORT + LONG)
    results = preflight(trainer, manifest, log=lambda _: None)
    assert all(r.ok and r.copies == 2 for r in results)


def test_a_canary_on_the_masked_side_is_caught(base_dir, tmp_path):
    """field='prompt' with completion-only loss (TRL's default for prompt-completion data): no copy gets a loss."""
    trainer, manifest = _sft(base_dir, tmp_path, SHORT, field="prompt")
    results = _by_id(check_survival(trainer.args, trainer.train_dataset, trainer.data_collator,
                                    trainer.processing_class, manifest))
    assert all(r.survived == 0 and r.reasons == {MASKED: 2} for r in results.values())
    with pytest.raises(UserError, match="move the canary to the trained side"):
        preflight(trainer, manifest, log=lambda _: None)


def test_truncation_catches_exactly_the_long_canaries(base_dir, tmp_path):
    trainer, manifest = _sft(base_dir, tmp_path, SHORT + LONG, max_length=48)
    results = _by_id(preflight(trainer, manifest, log=lambda _: None, raise_on_failure=False))
    assert {cid for cid, r in results.items() if not r.ok} == {c["id"] for c in LONG}
    assert all(results[c["id"]].reasons == {TRUNCATED: 2} for c in LONG)


def test_a_target_merged_with_the_prompt_by_the_tokenizer(base_dir, tmp_path):
    """A prefix that ends inside a word: the tokenizer joins the prompt's "ret" and the target's "urn" into one token
    (this tokenizer has " return"). TRL 1.16's SFT puts that token under the loss (measured here), so the target is
    still trained and the pre-flight says so. A collator that put the shared token on the prompt side would leave the
    target's start untrained: the pre-flight calls that a merge (the same row, that mask)."""
    from memlens.harness.audit.preflight import _collated, _verdicts

    merged = [{"id": "m0", "prefix": "def f():\n    ret", "target": "urn zz_9q_7", "suffix": "\n", "repeat": 1}]
    trainer, manifest = _sft(base_dir, tmp_path, merged)
    assert all(r.ok for r in preflight(trainer, manifest, log=lambda _: None))
    ids, mask = _collated(trainer.data_collator, trainer.train_dataset[manifest["canaries"][0]["positions"][0]])
    tokenizer = trainer.processing_class
    shared = tokenizer.convert_ids_to_tokens(ids).index("Ġreturn")
    assert mask[shared] and _verdicts(ids, mask, "urn zz_9q_7", tokenizer, [(0, len(ids))]) == [SURVIVES]
    prompt_side = [m and i != shared for i, m in enumerate(mask)]
    assert _verdicts(ids, prompt_side, "urn zz_9q_7", tokenizer, [(0, len(ids))]) == [MERGED]


def test_packing_that_cuts_copies_is_caught(base_dir, tmp_path):
    trainer, manifest = _sft(base_dir, tmp_path, SHORT + LONG, packing=True, max_length=48)
    results = _by_id(preflight(trainer, manifest, log=lambda _: None, raise_on_failure=False))
    assert all(results[c["id"]].reasons == {SPLIT: 2} for c in LONG)
    assert all(results[c["id"]].ok for c in SHORT)


def test_the_callback_refuses_to_train_before_step_1_and_warn_trains(base_dir, tmp_path):
    import memlens

    trainer, manifest = _sft(base_dir, tmp_path, SHORT + LONG, max_length=48)
    audit = memlens.AuditCallback(manifest, control=base_dir, out_dir=tmp_path / "audit", log=lambda _: None)
    trainer.add_callback(audit)
    with pytest.raises(UserError, match="raise max_length"):
        trainer.train()
    assert trainer.state.global_step == 0
    assert memlens.AuditCallback(manifest, control=base_dir, out_dir=tmp_path / "a2", preflight="warn").preflight == "warn"
    with pytest.raises(UserError, match="preflight="):
        memlens.AuditCallback(manifest, control=base_dir, out_dir=tmp_path / "a3", preflight="maybe")


def test_the_copies_it_flags_are_the_ones_training_does_not_learn(base_dir, tmp_path):
    """Train 40 steps with the long canaries truncated away: the surviving canaries' target loss falls far more than
    the flagged ones' (whose targets the trainer never saw)."""
    import torch

    from memlens.harness.model.load import torch_threads
    from memlens.harness.model.logprobs import target_losses
    from memlens.harness.text.fim import FAMILIES

    trainer, manifest = _sft(base_dir, tmp_path, SHORT + LONG, max_length=48, max_steps=40, learning_rate=1e-2,
                             save_strategy="no")
    flagged = {r.id for r in preflight(trainer, manifest, log=lambda _: None, raise_on_failure=False) if not r.ok}
    canaries = SHORT + LONG

    def losses(model):
        model.eval()
        with torch.inference_mode():
            return target_losses(model, trainer.processing_class, [c["prefix"] for c in canaries],
                                 [c["target"] for c in canaries], [""] * len(canaries), FAMILIES["memlens"])

    before = losses(trainer.model)
    with torch_threads(1):
        trainer.train()
    after = losses(trainer.model)
    drop = {c["id"]: b - a for c, b, a in zip(canaries, before, after)}
    learnt = {cid for cid, d in drop.items() if d > 0.5 * max(drop.values())}
    assert learnt == {c["id"] for c in SHORT} and flagged == {c["id"] for c in LONG}, drop
    assert SURVIVES  # the verdict name the table prints for the others


def test_a_preference_trainer_is_read_on_its_chosen_side(base_dir, tmp_path):
    """DPO: the chosen side is under the loss (completion_mask), the prompt is not; a canary planted in the prompt is
    caught, one planted in chosen survives, and truncation by max_length is caught there too."""
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import memlens

    def dpo(field=None, **config):
        train, manifest = memlens.inject(Dataset.from_list(rows_of("preference")), SHORT + LONG, seed=0,
                                         heldout_fraction=0.0, field=field, allow_masked=field is not None)
        trainer = trl.DPOTrainer(model=AutoModelForCausalLM.from_pretrained(base_dir),
                                 args=trl.DPOConfig(**{**common_args(tmp_path), **config}), train_dataset=train,
                                 processing_class=AutoTokenizer.from_pretrained(base_dir))
        return _by_id(preflight(trainer, manifest, log=lambda _: None, raise_on_failure=False))

    assert all(r.ok for r in dpo().values())
    assert all(r.reasons == {MASKED: 2} for r in dpo(field="prompt").values())
    cut = dpo(max_length=48)
    assert {cid for cid, r in cut.items() if not r.ok} == {c["id"] for c in LONG}
