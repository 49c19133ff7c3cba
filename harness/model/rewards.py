"""A reward model's score of a text: the one definition, read by the reward stage, the RL stages' reward and the
training callback's reward ranking (harness/audit/callback.py)."""

from __future__ import annotations

from memlens.harness.model.encode import encode_texts


def score_texts(model, tokenizer, texts: list[str], batch_size: int = 32, max_length: int = 512) -> list[float]:
    """Reward scores (logit of the one-unit head) of full PSM texts, in input order.

    Batches texts of similar length together (sorted by length) so that little compute goes to padding.
    """
    import torch  # heavy: the model layer loads torch on first use

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids = encode_texts(tokenizer, texts, max_length)    # BOS as the family adds it; a long text keeps its end
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [0.0] * len(ids)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            enc = tokenizer.pad({"input_ids": [ids[i] for i in batch]}, return_tensors="pt").to(device)
            for i, score in zip(batch, model(**enc).logits[:, 0].float().tolist()):
                out[i] = score
    model.train(was_training)
    return out
