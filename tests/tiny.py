"""Builders of tiny *real* models for tests: a trained BPE tokenizer, a seeded LlamaForCausalLM, a seeded
T5 seq2seq model, a few seconds of plain-torch training, and saving as a normal HF directory.

Everything is deterministic given the seed, runs on CPU in seconds, and produces directories the real
loaders (`memlens.harness.model.decode.load_causal_lm`, `from_pretrained`) read like any public model.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

from memlens.recipes.stages.tokenizer import train_code_tokenizer


def tiny_tokenizer(texts: Sequence[str], vocab_size: int = 512):
    """Byte-level BPE with `<pad>`=0, `<eos>`=1 and the FIM sentinels, trained on `texts`."""
    return train_code_tokenizer(list(texts), vocab_size=vocab_size)


def tiny_llama(tokenizer, hidden: int = 64, layers: int = 2, heads: int = 4, ffn: int | None = None,
               max_positions: int = 512, seed: int = 0):
    """A randomly initialised (seeded) LlamaForCausalLM sized to `tokenizer`, fp32, eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=ffn or 4 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def tiny_t5(tokenizer, d_model: int = 64, layers: int = 2, heads: int = 4, seed: int = 0):
    """A randomly initialised (seeded) T5ForConditionalGeneration; decoder starts from `<pad>` as in T5."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=len(tokenizer), d_model=d_model, d_kv=d_model // heads, d_ff=4 * d_model,
        num_layers=layers, num_decoder_layers=layers, num_heads=heads,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return T5ForConditionalGeneration(config).eval()


@contextmanager
def torch_threads(n: int = 1):
    """Run a block with `n` intra-op threads. Tiny models gain nothing from a second thread, and on a
    shared 2-core machine two spinning threads per process make a step ~15x slower (measured: 34 ms
    with 1 thread vs 540 ms with 2 at load 6)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_on_texts(model, tokenizer, texts: Sequence[str], steps: int = 100, lr: float = 3e-3,
                   batch_size: int = 8, seed: int = 0, threads: int = 1) -> list[float]:
    """Plain AdamW next-token training on `texts` (full batches cycled); returns the loss per step.

    Texts are encoded as they are (FIM training texts already end in `<eos>`); padding is masked out
    of the loss with label -100. Leaves the model in eval mode.
    """
    with torch_threads(threads):
        return _train(model, tokenizer, texts, steps, lr, batch_size, seed)


def _train(model, tokenizer, texts, steps, lr, batch_size, seed) -> list[float]:
    import torch

    torch.manual_seed(seed)
    enc = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    pad = tokenizer.pad_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        start = (step * batch_size) % len(enc)
        batch = [enc[(start + j) % len(enc)] for j in range(min(batch_size, len(enc)))]
        width = max(len(b) for b in batch)
        ids = torch.tensor([b + [pad] * (width - len(b)) for b in batch])
        mask = torch.tensor([[1] * len(b) + [0] * (width - len(b)) for b in batch])
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def save(model, tokenizer, out_dir: str | Path) -> Path:
    """Save as a standard HF directory (safetensors weights + config + tokenizer)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir
