"""Ship a PT stage's model as the project's embedded base (`conf/model/tiny_base.yaml`), with provenance.

    memlens train stage=PT experiment=base run_dir=runs/base
    python -m memlens.recipes.stages.ship_base runs/base assets/base_tiny

Paper 003 (App. A.3) fine-tunes a base pre-trained once on public code; the quickstart cannot afford a
long pre-training on 2 CPU cores, so `experiment=base` trains one and this module stores it: weights in
bf16 safetensors (half the size of fp32; the held-out loss of both is measured and recorded, and every
stage loads them back into its own dtype), the tokenizer, and `provenance.json` with the command, the
commit, the corpus hash, the token budget, the final training loss and the weights' hash, so that the
shipped file can be traced to what produced it and rebuilt.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, file_sha256, read_json
from memlens.harness.core.layout import data_dir, models_dir
from memlens.harness.model.logprobs import token_losses_batched
from memlens.recipes.stages.contract import PROVENANCE_FILE
from memlens.synthetic_data import public_code as pc

WEIGHTS_FILE = "model.safetensors"
HELD_OUT_CHUNKS = 300       # public-code chunks outside the base pool scored for the held-out loss
HELD_OUT_SEED = 0


def final_training_loss(pt_dir: Path) -> float | None:
    """Mean of the last logged training losses (the last 5 logging points) in trainer_state.json."""
    state = pt_dir / "trainer_state.json"
    if not state.is_file():
        return None
    losses = [e["loss"] for e in read_json(state).get("log_history", []) if "loss" in e]
    return round(sum(losses[-5:]) / len(losses[-5:]), 4) if losses else None


def held_out_chunks(pd: dict, n: int) -> list[str]:
    """Chunks of the base's corpus source from files outside the base pool: code the base never saw.
    `pd` is the data.pd settings the base's pd_pt was built with (its manifest)."""
    root = Path(pd["source_dir"]) if pd["source_dir"] is not None else pc.default_source_dir()
    rels = pc.list_source_files(root, pd["include"], pd["exclude"], None, HELD_OUT_SEED, "outside_base_pool",
                                pd["base_pool_share"])
    chunks = [c for _, text in pc.load_directory(root, rels).files
              for c in pc.chunk_source(text, pd["max_chunk_chars"], pd["min_chunk_chars"], pd["window_lines"])]
    step = max(len(chunks) // n, 1)
    return chunks[::step][:n]


def mean_token_loss(model, tokenizer, texts: list[str], max_length: int = 512) -> float:
    """Token-weighted mean next-token loss (nats) of `texts`, each followed by EOS, cut at max_length:
    every token but the first is a target of memlens.harness.model.logprobs.token_losses_batched (summed per text)."""
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_length - 1] + [tokenizer.eos_token_id]
           for t in texts]
    sums = token_losses_batched(model, [(x[:1], x[1:]) for x in ids], pad_id=tokenizer.pad_token_id,
                                reduction="sum")
    return float(sums.sum()) / sum(len(x) - 1 for x in ids)


def ship(run_dir: Path, out_dir: Path, command: str, code_note: str | None = None) -> dict:
    """Write the bf16 weights, tokenizer and provenance of `run_dir/models/PT` into `out_dir`."""
    import torch  # torch (~1 s): pretrain.py imports ship_base.py when the plan is composed
    from transformers import AutoModelForCausalLM, AutoTokenizer  # transformers (~1.5 s): when a base is shipped

    pt_dir = models_dir(run_dir) / "PT"
    if not (pt_dir / PROVENANCE_FILE).is_file():
        raise UserError(f"{pt_dir}: no finished PT stage ({PROVENANCE_FILE} missing); train it first with "
                        f"`memlens train stage=PT experiment=base run_dir={run_dir}`")
    pt_prov = read_json(pt_dir / PROVENANCE_FILE)
    data_manifest = data_dir(run_dir, "pd_pt") / "manifest.json"
    manifest = read_json(data_manifest) if data_manifest.is_file() else {}
    pd_settings = manifest.get("settings", {}).get("pd", {})
    if pd_settings.get("use_files") != "base_pool" or pd_settings.get("hf_dataset") is not None:
        raise UserError(f"{data_manifest}: the PT corpus was not the base pool (data.pd.use_files="
                        f"{pd_settings.get('use_files')!r}); train with experiment=base so that experiments "
                        "starting from the shipped base can exclude every file it saw")
    tokenizer = AutoTokenizer.from_pretrained(str(pt_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(pt_dir), dtype=torch.float32, use_safetensors=True,
                                                 local_files_only=True)
    texts = held_out_chunks(pd_settings, HELD_OUT_CHUNKS)
    loss_fp32 = mean_token_loss(model, tokenizer, texts)
    model = model.to(torch.bfloat16)
    loss_bf16 = mean_token_loss(model.float(), tokenizer, texts)   # the bf16-rounded weights, computed in fp32

    # Written beside out_dir and renamed at the end: a killed run leaves the old base (or none), never half.
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.to(torch.bfloat16).save_pretrained(str(staging))
    tokenizer.save_pretrained(str(staging))
    record = {
        "what": "the embedded default's base model (conf/model/tiny_base.yaml), pre-trained by experiment=base",
        "rebuild": "bash scripts/build_base.sh", "shipped_with": command,
        "git_commit": pt_prov.get("git_commit"), "code_note": code_note, "packages": pt_prov.get("packages"), "seed": pt_prov.get("seed"),
        "corpus": {"dataset": "pd_pt", "sha256": (pt_prov.get("datasets") or {}).get("pd_pt"),
                   "use_files": "base_pool", "base_pool_share": pd_settings["base_pool_share"],
                   "source_files": manifest.get("source_files")},
        "settings": pt_prov.get("settings"), "parameters": pt_prov.get("parameters"),
        "training_tokens": (pt_prov.get("settings") or {}).get("max_tokens"),
        "final_training_loss": final_training_loss(pt_dir),
        "held_out": {"chunks": len(texts), "what": "stdlib chunks outside the base pool, mean token loss (nats)",
                     "loss_fp32": round(loss_fp32, 4), "loss_bf16_weights": round(loss_bf16, 4),
                     "perplexity_bf16_weights": round(math.exp(loss_bf16), 2)},
        "weights": {"file": WEIGHTS_FILE, "dtype": "bfloat16", "sha256": file_sha256(staging / WEIGHTS_FILE)},
    }
    atomic_write_json(staging / PROVENANCE_FILE, record)
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlens.recipes.stages.ship_base", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the experiment=base run directory (holds models/PT)")
    parser.add_argument("out_dir", type=Path, help="where to write the shipped base, e.g. assets/base_tiny")
    parser.add_argument("--code-note", default=None,
                        help="what the recorded git_commit does not say (e.g. the code ran from a dirty tree)")
    args = parser.parse_args(argv)
    try:
        record = ship(args.run_dir, args.out_dir, "python -m memlens.recipes.stages.ship_base " + " ".join(argv or sys.argv[1:]),
                      args.code_note)
    except UserError as e:
        print(f"ship_base: error: {e}", file=sys.stderr)
        return 2
    print(f"shipped {args.out_dir}: {record['training_tokens']} tokens, final training loss "
          f"{record['final_training_loss']}, held-out loss {record['held_out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
