"""sd_rl_prompts: the RL-prompt memorization split (paper 003 Sec. 5.3, Appendix E).

RLFT.4 is RL fine-tuned on SD's prompts: as in every RL stage "only the prompts are used, while the
associated targets are discarded" (Sec. 5.2), so an SD example's RL prompt is its FIM context, prefix and
suffix (App. D: "the prompt will consist of the concatenation of the prefix and suffix"; Fig. 11 counts
its tokens). Sec. 5.3 then takes "examples with at least 100 tokens in the prompt, splitting them into a
prompt and target of 50 tokens each" (as Carlini et al. 2022): here the first 50 tokens of that RL
prompt, read as the policy reads it (prefix, then suffix), are the audit prompt and the next 50 the
audit target. So every audited target is text the policy was trained on as a prompt.

Each row carries both: `rl_prefix` / `rl_suffix`, the RL training prompt (memlens.recipes.stages.rl trains on these),
and `prefix` / `target` / `suffix` (= ""), the audit split, with the character offsets of both cuts in
`rl_prefix + rl_suffix`. When the prefix is shorter than the audited 100 tokens, the audited text runs
on into the suffix (`spans_hole`): the policy saw the two parts on either side of the `<fim_suffix>`
sentinel, the audit target joins them without it.

The embedded tokenizer is trained by the pre-training stage after the data is built, so this set is
built only when `data.rl_prompts.tokenizer` names a tokenizer directory.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from memlens.harness.core.errors import UserError
from memlens.synthetic_data.common import tokenizer_fingerprint
from memlens.synthetic_data.doses import dose_of


class OffsetTokenizer:
    """A saved HF tokenizer, used only for token offsets (the `tokenizers` library when the folder
    has tokenizer.json, which avoids importing transformers; AutoTokenizer otherwise)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise UserError(f"data.rl_prompts.tokenizer: {path} is not a directory; give a saved HF "
                            "tokenizer folder (e.g. <run_dir>/models/PT) or null to skip sd_rl_prompts and its held-out twin")
        tj = self.path / "tokenizer.json"
        if tj.is_file():
            self._fast = Tokenizer.from_file(str(tj))
            self._hf = None
        else:
            # transformers (~1.5 s): a tokenizer folder without tokenizer.json only
            from transformers import AutoTokenizer

            try:
                self._hf = AutoTokenizer.from_pretrained(str(self.path), trust_remote_code=False,
                                                         local_files_only=True)
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
        return tokenizer_fingerprint(self.path)


def rl_prompt_rows(sd_rows: list[dict], tokenizer: OffsetTokenizer, prompt_tokens: int,
                   target_tokens: int) -> tuple[list[dict], dict]:
    """Rows for the SD examples whose RL prompt (prefix + suffix) has prompt_tokens + target_tokens
    tokens or more; plus token-length figures of the SD prompts/targets (paper Fig. 11)."""
    rows, skipped, spans_hole, prompt_lens = [], 0, 0, []
    # Prefix and suffix are tokenized separately, as the policy reads them: the FIM sentinel between
    # them stops BPE from merging across the hole.
    target_lens = [len(o) for o in tokenizer.offsets([r["target"] for r in sd_rows])]
    prefix_offsets = tokenizer.offsets([r["prefix"] for r in sd_rows])
    suffix_offsets = tokenizer.offsets([r["suffix"] for r in sd_rows])
    for r, p_off, s_off in zip(sd_rows, prefix_offsets, suffix_offsets):
        hole = len(r["prefix"])
        # Token ends in prompt = prefix + suffix coordinates (the suffix's shifted by the prefix length).
        ends = [b for _, b in p_off] + [hole + b for _, b in s_off]
        prompt_lens.append(len(ends))
        if len(ends) < prompt_tokens + target_tokens:
            skipped += 1
            continue
        # End of token k-1 = start of token k for byte-level BPE (offsets tile the text); taking the
        # end keeps a multi-byte character that two tokens share inside the earlier piece.
        p_end, t_end = ends[prompt_tokens - 1], ends[prompt_tokens + target_tokens - 1]
        prompt = r["prefix"] + r["suffix"]
        crosses = 0 < hole < t_end
        spans_hole += crosses
        rows.append({"id": f"rl:{r['id']}", "prefix": prompt[:p_end], "target": prompt[p_end:t_end], "suffix": "",
                     "prompt_char_end": p_end, "target_char_end": t_end, "spans_hole": crosses,
                     "rl_prefix": r["prefix"], "rl_suffix": r["suffix"], "source_id": r["id"],
                     "subset": r["subset"], "label": r["label"], **dose_of(r)})
    return rows, {"too_short_skipped": skipped, "spans_hole": spans_hole, "prompt_token_lengths": prompt_lens,
                  "target_token_lengths": target_lens}
