"""sd_rl_prompts: the RL-prompt memorization split (paper 003 Sec. 5.3).

SD examples with at least prompt_tokens + target_tokens tokens (in the given tokenizer) give a
prompt of their first 50 tokens and a target of the next 50 (the paper follows Carlini et al. 2022).
Rows also store the character offsets of both cuts, so any tokenizer can re-derive them.

The embedded tokenizer is trained by the pre-training stage after the data is built, so this set is
built only when `data.rl_prompts.tokenizer` names a tokenizer directory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.errors import UserError


class OffsetTokenizer:
    """A saved HF tokenizer, used only for token offsets (the `tokenizers` library when the folder
    has tokenizer.json, which avoids importing transformers; AutoTokenizer otherwise)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise UserError(f"data.rl_prompts.tokenizer: {path} is not a directory; give a saved HF "
                            "tokenizer folder (e.g. <run_dir>/models/PT) or null to skip sd_rl_prompts")
        tj = self.path / "tokenizer.json"
        if tj.is_file():
            from tokenizers import Tokenizer

            self._fast = Tokenizer.from_file(str(tj))
            self._hf = None
        else:
            from transformers import AutoTokenizer

            try:
                self._hf = AutoTokenizer.from_pretrained(str(self.path), trust_remote_code=False)
            except Exception as e:
                raise UserError(f"data.rl_prompts.tokenizer: cannot load a tokenizer from {path}: {e}") from None
            if not self._hf.is_fast:
                raise UserError(f"data.rl_prompts.tokenizer: {path} is a slow tokenizer; offsets need a fast one")
            self._fast = None

    def offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Character offsets of each text's tokens (no special tokens), batched."""
        if not texts:
            return []
        if self._fast is not None:
            return [list(e.offsets) for e in self._fast.encode_batch(texts, add_special_tokens=False)]
        return [list(o) for o in self._hf(texts, add_special_tokens=False,
                                          return_offsets_mapping=True)["offset_mapping"]]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for f in sorted(self.path.glob("*.json")) + sorted(self.path.glob("*.model")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()


def rl_prompt_rows(sd_rows: list[dict], tokenizer: OffsetTokenizer, prompt_tokens: int,
                   target_tokens: int) -> tuple[list[dict], dict]:
    """Rows for examples long enough; plus token-length figures of the SD prompts/targets."""
    rows, skipped, prompt_lens = [], 0, []
    # Lengths of the FIM split in a real tokenizer (paper Fig. 11). The target is tokenized on its
    # own; the prompt (prefix + suffix) is counted as the program's tokens that do not overlap the
    # target, which saves tokenizing every program twice more (tokenizing prefix and suffix
    # separately can differ by a token at each cut, where BPE merges across the boundary).
    target_lens = [len(o) for o in tokenizer.offsets([r["target"] for r in sd_rows])]
    for r, offsets in zip(sd_rows, tokenizer.offsets([r["code"] for r in sd_rows])):
        t_start, t_stop = len(r["prefix"]), len(r["prefix"]) + len(r["target"])
        prompt_lens.append(sum(1 for a, b in offsets if b <= t_start or a >= t_stop))
        if len(offsets) < prompt_tokens + target_tokens:
            skipped += 1
            continue
        # End of token k-1 = start of token k for byte-level BPE (offsets tile the text); taking the
        # end keeps a multi-byte character that two tokens share inside the earlier piece.
        p_end = offsets[prompt_tokens - 1][1]
        t_end = offsets[prompt_tokens + target_tokens - 1][1]
        code = r["code"]
        rows.append({"id": f"rl:{r['id']}", "prefix": code[:p_end], "target": code[p_end:t_end], "suffix": "",
                     "prompt_char_end": p_end, "target_char_end": t_end, "source_id": r["id"],
                     "subset": r["subset"], "label": r["label"]})
    return rows, {"too_short_skipped": skipped, "prompt_token_lengths": prompt_lens,
                  "target_token_lengths": target_lens}
