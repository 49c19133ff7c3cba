"""`memlens.inject` against TRL's own preprocessing: SFTTrainer, given a prompt-completion set with planted canaries,
computes its loss on every copy's target (completion mask 1) and never on a prompt. The trainer is only built (its
dataset tokenized), not trained."""

from __future__ import annotations

import logging

from memlens.synthetic_data.inject import inject
from tests.tiny import tiny_llama, tiny_tokenizer

CANARIES = [{"id": f"c{i}", "prefix": f"def load_{i}():\n    key = ", "target": f"'sk-{i:02d}-f3a9c1e7b2d4'",
             "suffix": "\n    return key\n", "repeat": 2} for i in range(4)]


def _prepared(tmp_path, rows):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    train, manifest = inject(Dataset.from_list(rows), CANARIES, heldout_fraction=0)
    texts = [c["prefix"] + c["target"] + c["suffix"] for c in CANARIES] + [str(r) for r in rows]
    tok = tiny_tokenizer(texts, vocab_size=300)
    trainer = SFTTrainer(model=tiny_llama(tok), processing_class=tok, train_dataset=train,
                         args=SFTConfig(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True))
    return trainer.train_dataset, manifest, tok


def test_sft_computes_its_loss_on_the_planted_targets_and_not_on_prompts(tmp_path, caplog):
    rows = [{"prompt": f"# task {i}\n", "completion": f"x = {i}\n"} for i in range(6)]
    with caplog.at_level(logging.WARNING):
        prepared, manifest, tok = _prepared(tmp_path, rows)
    assert len(prepared) == 6 + 8
    for c in manifest["canaries"]:
        for position in c["positions"]:
            ids, labels = prepared[position]["input_ids"], prepared[position]["labels"]
            trained = tok.decode([i for i, label in zip(ids, labels) if label != -100])
            masked = tok.decode([i for i, label in zip(ids, labels) if label == -100])
            assert c["target"] in trained and c["target"] not in masked, (trained, masked)
            assert masked + trained.removesuffix("<eos>") == c["prefix"] + c["target"] + c["suffix"]
    # The prompt ends on a token boundary (its trailing space moved to the completion): TRL keeps every token.
    assert "is not a prefix of the tokenized prompt+completion" not in caplog.text
