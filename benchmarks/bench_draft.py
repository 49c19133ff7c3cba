"""Audit decoding with the target as a draft (harness/model/draft.py) against batched `generate` and a
per-example loop, on the real audit mix of a finished findings run (experiment=findings, which trains FT.1).

Workload: every model named by --models (default: two FT.1 checkpoints, FT.1, and the control
FT.2) on the audit's own PSM prompts of sd_base + sd_links_pos + pd_eval (memorized, near-miss and
unrelated rows), 64 new tokens, batch 32; then the untrained worst case (a seeded random model of the
same shape, which never follows a draft and never stops at EOS).

Paths, all greedy, all on the same length-sorted batches:
  generate   batched `model.generate`, left padding, default (dynamic) cache: how Pythia's
             memorization script and lm-eval's HF backend decode (the fair anchor);
  static     `greedy_complete` with drafts off (audit.draft=none): `generate` with a static cache;
  draft      `greedy_complete` with the targets as drafts (audit.draft=target, the default);
  loop       one `generate` call per prompt (batch 1), on every --loop-every'th prompt.

Prints ex/s per path and model, the speed-ups, how many draft completions equal `generate`'s and
`static`'s, the prefill floor (one forward over the prompts: t_generate / t_prefill bounds any
speed-up over `generate`), and for every difference the first differing token with the gap between the top two
logits there (a floating-point near-tie is < 1e-4; anything else would be a bug).

    .venv/bin/python benchmarks/bench_draft.py --run runs/findings --threads 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_audit import prefill_floor  # noqa: E402
from memlens.harness.core.io import read_jsonl  # noqa: E402
from memlens.harness.model.decode import _eos_ids, _pad_id, greedy_complete, length_sorted_batches  # noqa: E402
from memlens.harness.model.draft import draft_greedy_generate, draft_ids  # noqa: E402
from memlens.harness.model.encode import encode_texts  # noqa: E402
from memlens.harness.model.load import load_causal_lm  # noqa: E402
from memlens.harness.text.fim import detect_sentinels, format_psm_prompt  # noqa: E402

DATASETS = ("sd_base", "sd_links_pos", "pd_eval")
MODELS = ("FT.1/checkpoint-150", "FT.1/checkpoint-450", "FT.1", "FT.2")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def batched_generate(model, tok, prompts, max_new_tokens, batch_size):
    """The anchor: `generate` on length-sorted, left-padded batches with its default cache."""
    import torch

    eos = _eos_ids(tok, model, None)
    pad = _pad_id(tok, eos)
    enc = encode_texts(tok, prompts)
    out = [None] * len(prompts)
    for idx in length_sorted_batches([len(e) for e in enc], batch_size):
        rows = [enc[i] for i in idx]
        w = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (w - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (w - len(r)) + [1] * len(r) for r in rows])
        with torch.inference_mode():
            g = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, num_beams=1,
                               max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                               use_cache=True, temperature=None, top_p=None, top_k=None)
        for i, row in zip(idx, g[:, w:].tolist()):
            row = row[:next((j for j, t in enumerate(row) if t in eos), len(row))]
            out[i] = tok.decode(row, skip_special_tokens=True)
    return out


def per_example_loop(model, tok, prompts, max_new_tokens):
    return [batched_generate(model, tok, [p], max_new_tokens, 1)[0] for p in prompts]


def near_tie(model, tok, prompt, draft, max_new_tokens):
    """(first differing token index, top-2 logit gap there) between plain greedy and the draft path,
    both at batch 1; None when they agree at batch 1."""
    import torch

    eos = _eos_ids(tok, model, None)
    ids = encode_texts(tok, [prompt])[0]
    x = torch.tensor([ids])
    with torch.inference_mode():
        g = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                           max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=_pad_id(tok, eos),
                           output_logits=True, return_dict_in_generate=True, temperature=None, top_p=None,
                           top_k=None)
    plain = g.sequences[0, len(ids):].tolist()
    drafted = draft_greedy_generate(model, [ids], draft_ids(tok, [draft], eos), max_new_tokens, eos,
                                    _pad_id(tok, eos))[0]
    for i, (a, b) in enumerate(zip(plain, drafted)):
        if a != b:
            top = torch.topk(g.logits[i][0].float(), 2).values
            return i, float(top[0] - top[1])
    return None


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    dt = time.perf_counter() - t0
    print(f"  {getattr(fn, '__name__', 'path')}: {dt:.1f}s", flush=True)
    return out, dt


def bench_model(name, model, tok, prompts, targets, args) -> dict:
    mnt, bs = args.max_new_tokens, args.batch_size
    gen, t_gen = timed(batched_generate, model, tok, prompts, mnt, bs)
    static, t_static = timed(lambda: greedy_complete(model, tok, prompts, mnt, bs, progress=False))
    stats: dict = {}
    draft, t_draft = timed(lambda: greedy_complete(model, tok, prompts, mnt, bs, progress=False,
                                                   drafts=targets, stats=stats))
    t_prefill = prefill_floor(model, tok, prompts, bs)   # same batches; t_generate / t_prefill bounds any speed-up
    print(f"  prefill_floor: {t_prefill:.1f}s", flush=True)
    sub = list(range(0, len(prompts), args.loop_every))
    _, t_loop = timed(per_example_loop, model, tok, [prompts[i] for i in sub], mnt)
    diffs = [i for i, (a, b) in enumerate(zip(gen, draft)) if a != b]
    ties = [near_tie(model, tok, prompts[i], targets[i], mnt) for i in diffs]
    n = len(prompts)
    row = {"model": name, "n": n, "generate_ex_s": n / t_gen, "static_ex_s": n / t_static,
           "draft_ex_s": n / t_draft, "loop_ex_s": len(sub) / t_loop,
           "draft_vs_generate": t_gen / t_draft, "draft_vs_static": t_static / t_draft,
           "draft_vs_loop": (n / t_draft) / (len(sub) / t_loop),
           "bound_vs_generate": t_gen / t_prefill,
           "identical_to_generate": n - len(diffs),
           "identical_to_static": sum(a == b for a, b in zip(static, draft)),
           "settled_by_draft": stats.get("settled_by_draft", 0),
           "seconds": {"generate": t_gen, "static": t_static, "draft": t_draft, "loop": t_loop,
                       "prefill": t_prefill},
           "differences": [{"row": i, "first_token": t[0], "top2_gap": t[1]} if t else
                           {"row": i, "at_batch_1": "no difference"} for i, t in zip(diffs, ties)]}
    print(json.dumps(row), flush=True)
    return row


def untrained_like(model):
    """A seeded random model with `model`'s config: never follows a draft, never emits EOS early."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(model.config).eval()


def total(rows, key_s) -> float:
    return sum(r["n"] for r in rows) / sum(r["seconds"][key_s] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True,
                    help="a finished run of experiment=findings (runs/findings), which trains FT.1")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--loop-every", type=int, default=8, help="time the per-example loop on every N'th prompt")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    run = Path(args.run)
    print("load before:", uptime(), flush=True)
    examples = [ex for d in DATASETS for ex in read_jsonl(run / "data" / d / "rows.jsonl")]
    rows = []
    model = tok = prompts = None
    for name in args.models:
        model, tok = load_causal_lm(run / "models" / name, "cpu")
        s = detect_sentinels(tok)
        prompts = [format_psm_prompt(ex["prefix"], ex["suffix"], s) for ex in examples]
        targets = [ex["target"] for ex in examples]
        rows.append(bench_model(name, model, tok, prompts, targets, args))
    mix = {"mix_generate_ex_s": total(rows, "generate"), "mix_static_ex_s": total(rows, "static"),
           "mix_draft_ex_s": total(rows, "draft"),
           "mix_draft_vs_generate": total(rows, "draft") / total(rows, "generate"),
           "mix_draft_vs_static": total(rows, "draft") / total(rows, "static"),
           "mix_bound_vs_generate": total(rows, "prefill") / total(rows, "generate"),
           "mix_draft_vs_loop": total(rows, "draft") / (sum(len(range(0, r["n"], args.loop_every)) for r in rows)
                                                      / sum(r["seconds"]["loop"] for r in rows)),
           "identical_to_generate": f"{sum(r['identical_to_generate'] for r in rows)}/{sum(r['n'] for r in rows)}",
           "identical_to_static": f"{sum(r['identical_to_static'] for r in rows)}/{sum(r['n'] for r in rows)}",
           "settled_by_draft": f"{sum(r['settled_by_draft'] for r in rows)}/{sum(r['n'] for r in rows)}"}
    print(json.dumps(mix), flush=True)
    worst = bench_model("untrained", untrained_like(model), tok, prompts, [ex["target"] for ex in examples], args)
    print(json.dumps({"untrained_draft_vs_static": worst["draft_vs_static"],
                      "untrained_draft_vs_generate": worst["draft_vs_generate"],
                      "untrained_identical_to_generate": worst["identical_to_generate"]}))
    print("load after:", uptime())


if __name__ == "__main__":
    main()
