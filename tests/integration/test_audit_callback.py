"""`memlens.AuditCallback` inside real TRL trainers (SFT, DPO with two objectives, KTO, reward, GRPO, RLOO) on a tiny
seeded Llama: `memlens.inject` plants the canaries in the format's trained field, each trainer saves two checkpoints,
and the callback leaves rows for each of them in the audit layout, which `memlens report` renders. Also: the PEFT
`control="base"` path, training unchanged by the callback, a 2-process DDP run scored by its main process alone
(rows equal to a one-process scoring of the same checkpoints), a checkpoint without weights deferred, bad
arguments refused before training."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json, read_jsonl
from tests.integration.callback_helpers import CANARIES, SMALL, STEPS, make_base, manifest_of, train_with_callback
from tests.integration.run_helpers import memlens as memlens_command
from tests.integration.run_helpers import run_python, user_directory_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return make_base(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def plain_run(base_dir, tmp_path_factory):
    """plain_run(kind, loss_type) -> (run folder, manifest): the trainer `kind` trained once per module with the
    callback's defaults, for every test that only reads such a run (a test that writes into it, e.g. a report,
    works on a copy: plain_copy)."""
    runs: dict[tuple, tuple[Path, dict]] = {}

    def get(kind: str, loss_type: str | None = None) -> tuple[Path, dict]:
        if (kind, loss_type) not in runs:
            out = tmp_path_factory.mktemp(f"plain_{kind}_{loss_type}")
            runs[kind, loss_type] = (out, train_with_callback(kind, base_dir, out, [], loss_type=loss_type)[1])
        return runs[kind, loss_type]
    return get


def plain_copy(run: tuple[Path, dict], dest: Path) -> Path:
    """A copy of a plain run at `dest`, to write into (a report)."""
    import shutil

    return shutil.copytree(run[0], dest, dirs_exist_ok=True)


def _log(out: Path) -> dict[str, dict]:
    return {r["checkpoint"]: r for r in read_jsonl(out / "audit" / "callback.jsonl")}


@pytest.mark.parametrize("kind,loss_type", [("sft", None), ("dpo", "sigmoid"), ("dpo", "ipo"), ("kto", None),
                                            ("cpo", None), ("orpo", None), ("grpo", None), ("rloo", None),
                                            ("online_dpo", None)])
def test_every_saved_checkpoint_of_a_trl_trainer_is_scored(kind, loss_type, base_dir, plain_run):
    tmp_path, manifest = plain_run(kind, loss_type)
    planted, heldout = len(manifest["canaries"]), len(manifest["heldout"])
    assert planted and heldout
    log = _log(tmp_path)
    assert sorted(log) == [f"checkpoint-{s}" for s in range(1, STEPS + 1)]
    for checkpoint, record in log.items():
        assert record["seconds"] > 0 and record["control"]["kind"] == "as given"
        for dataset, n in (("canaries", planted), ("canaries_heldout", heldout)):
            rows = read_jsonl(tmp_path / "audit" / "model" / checkpoint / f"{dataset}.jsonl")
            assert sorted(r["id"] for r in rows) == sorted(c["id"] for c in manifest[
                "canaries" if dataset == "canaries" else "heldout"])
            assert len(rows) == n == record["extraction"][dataset]["n_scored"] + sum(
                1 for r in rows if r["excluded"])
        assert set(record["mia"]) >= {"loss", "zlib", "min_k", "min_k_plus_plus", "reference", "ez_mia", "rmia"}, record["mia"]
        # DC-PDD's reference: the trainer's own processed rows; the sequence attacks from the second save on
        assert "dc_pdd" in record["mia"], (kind, sorted(record["mia"]))
        assert ("sequence_loss" in record["mia"]) == (checkpoint != "checkpoint-1")
        assert record["exposure"]["planted"]["count"] == planted and record["exposure"]["heldout"]["count"] == heldout
        # preference-pair membership wherever the trainer reads pairs (the manifest holds them), RL-prompt membership
        # wherever it samples from prompts, nowhere else
        assert ("pair_mia" in record) == (manifest["format"] == "preference"), (kind, sorted(record))
        assert ("prompt_mia" in record) == (manifest["format"] == "prompt_only"), (kind, sorted(record))
        for row in read_jsonl(tmp_path / "audit" / "exposure" / "model" / f"{checkpoint}.jsonl"):
            # a planted canary ranks among every held-out target, a held-out one among the others
            assert row["n_candidates"] == heldout + row["member"] and 1 <= row["rank"] <= row["n_candidates"]
            assert row["exposure"] == pytest.approx(math.log2(row["n_candidates"]) - math.log2(row["rank"]))
    mia = read_json(tmp_path / "audit" / "mia" / "model" / "summary.json")
    assert mia["checkpoints"] == sorted(log, key=lambda c: int(c.split("-")[1]))
    summary = read_json(tmp_path / "audit" / "summary.json")["results"]["model"]
    assert sorted(summary) == sorted(log)
    if manifest["format"] == "prompt_only":
        _check_prompt_membership(tmp_path, base_dir, manifest, log)


def _check_prompt_membership(tmp_path, base_dir, manifest: dict, log: dict) -> None:
    """A GRPO / RLOO run: each checkpoint's canary prompts, planted vs held out, by Min-kNN of completions sampled from
    it and from the model the run started from (base_dir, found at train begin); the summary gathers both
    checkpoints, the trackers get the AUCs, and a row's Min-kNN is that of the checkpoint's seeded samples after the
    whole canary, the prompt as the trainer held it (drawn again here)."""
    from memlens.harness.audit.callback import tracker_metrics
    from memlens.harness.core.injected import prompt_only_text
    from memlens.harness.core.stats import BOOTSTRAP_SEED
    from memlens.harness.measures.prompt_mia import PROMPT_ATTACKS, min_knn_distance
    from memlens.harness.model.load import load_causal_lm, model_sentinels
    from memlens.harness.model.sampling import sample_prompts

    for record in log.values():
        # the sample-only attacks; DIBA's reward gain and drift need the run's reward, which the callback lacks
        assert set(record["prompt_mia"]) == {"min_knn", "mean_nn", "min_knn_vs_initial"} < set(PROMPT_ATTACKS)
        auc = record["prompt_mia"]["min_knn"]["auc"]["value"]
        assert tracker_metrics(record)["memlens/prompt_mia/min_knn/auc"] == auc
    summary = read_json(tmp_path / "audit" / "prompt_mia" / "model" / "summary.json")
    assert summary["checkpoints"] == ["checkpoint-1", "checkpoint-2"] and summary["initial"] == str(base_dir)
    rows = read_jsonl(tmp_path / "audit" / "prompt_mia" / "model" / "checkpoint-2" / "canaries.jsonl")
    assert sorted((r["id"], r["member"]) for r in rows) == sorted(
        [(c["id"], 1) for c in manifest["canaries"]] + [(c["id"], 0) for c in manifest["heldout"]])
    checkpoint = tmp_path / "model" / "checkpoint-2"
    model, tok = load_causal_lm(checkpoint, "cpu")
    sentinels = model_sentinels(checkpoint, "prefix")
    canary = manifest["canaries"][0]
    (again,) = sample_prompts(model, tok, [sentinels.prompt(prompt_only_text(canary), "")], [canary["id"]], sentinels,
                              samples=8, temperature=1.0, max_new_tokens=SMALL["max_new_tokens"], seed=BOOTSTRAP_SEED)
    row = next(r for r in rows if r["id"] == canary["id"])
    assert row["min_knn"]["policy"] == pytest.approx(min_knn_distance(again, 4))


def test_with_enough_canaries_every_attack_and_the_one_run_bounds_are_scored(base_dir, tmp_path):
    """24 canaries, held out by fair coins: each side has its three prefix shots and more, so ReCaLL and Con-ReCall
    score as well; `measures=[..., "epsilon"]` ranks all 24 by their LOSS scores, shots included, into the three
    labelled one-run bounds, written where `memlens audit` writes them, and the report renders them."""
    from memlens.harness.measures.mia import ATTACKS
    from tests.integration.callback_helpers import CANARIES as SIX

    canaries = [{**SIX[i % 6], "id": f"k{i}", "target": SIX[i % 6]["target"].replace("sk-", f"sk{i}-")}
                for i in range(24)]
    _, manifest = train_with_callback("sft", base_dir, tmp_path, [], canaries=canaries,
                                      measures=("extraction", "mia", "epsilon"))
    assert manifest["heldout_fraction"] == 0.5 and len(manifest["canaries"]) >= 5 <= len(manifest["heldout"])
    log = _log(tmp_path)
    last = log[f"checkpoint-{STEPS}"]
    assert set(last["mia"]) == set(ATTACKS), sorted(set(ATTACKS) - set(last["mia"]))
    assert "sequence_loss" not in log["checkpoint-1"]["mia"]
    bounds = last["epsilon"]["bounds"]
    assert last["epsilon"]["m"] == 24 and set(bounds) == {"steinke2023", "xiang2025_order_statistics", "xiang2025_gdp"}
    assert all(b["epsilon_lower_bound"] is None or b["epsilon_lower_bound"] >= 0 for b in bounds.values())
    record = read_json(tmp_path / "audit" / "epsilon" / "model" / "summary.json")
    assert record["checkpoints"] == ["checkpoint-1", "checkpoint-2"]
    done = memlens_command("report", f"run_dir={tmp_path}", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Xiang 2025 order statistics" in (tmp_path / "report" / "report.md").read_text()


def test_the_callback_run_renders_as_a_report_and_prompts_as_trained(plain_run, tmp_path):
    plain_copy(plain_run("sft"), tmp_path)
    rows = read_jsonl(tmp_path / "audit" / "model" / "checkpoint-2" / "canaries.jsonl")
    meta = read_json(tmp_path / "audit" / "model" / "checkpoint-2" / "canaries.meta.json")
    assert meta["settings"]["fim_family"] == "prefix"          # a prompt-completion fine-tune: asked left to right
    assert all(r["target"] and r["control_completion"] is not None for r in rows)
    done = memlens_command("report", f"run_dir={tmp_path}", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| model | checkpoint-2 | canaries |" in report and "canaries_heldout" in report
    assert "Memorization over training" in report
    # a callback run measures none of the papers' findings: its own results lead, the findings are one line after
    assert report.index("## Memorization over training") < report.index("## The papers' findings")
    assert "| id | finding |" not in report and "None measured by this run" in report
    assert "Exposure of the canaries over training" in report and "| model | checkpoint-2 |" in report
    # MIA at the last checkpoint (no 'final' here), attacks ranked by AUC
    assert re.search(r"\| model \| canaries \| target \| \d+ \| LOSS \|", report)


def test_a_dpo_run_scores_its_canaries_pairs_against_the_control_as_reference(base_dir, plain_run, tmp_path):
    """DPO on a preference set with canaries: each checkpoint's planted pairs against the held-out ones (PREMIA), the
    model the run started from the reference of the ratios (here the base the control also is). A row's reference
    log-prob of its chosen side is that model's own summed log-prob of the completion after the prompt (computed here
    with transformers, outside memlens), its pair score the margin of the two log-ratios; the summary gathers both
    checkpoints, the trackers get the AUCs, and the report shows the pairs' membership table."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from memlens.harness.audit.callback import tracker_metrics
    from memlens.harness.measures.preference_mia import PAIR_ATTACKS

    run = plain_run("dpo", "sigmoid")
    manifest = run[1]
    plain_copy(run, tmp_path)
    log = _log(tmp_path)
    assert sorted(log) == ["checkpoint-1", "checkpoint-2"]
    for record in log.values():
        assert set(record["pair_mia"]) == set(PAIR_ATTACKS), record["pair_mia"]
        metrics = tracker_metrics(record)
        assert metrics["memlens/pair_mia/premia_pair/auc"] == record["pair_mia"]["premia_pair"]["auc"]["value"]
    summary = read_json(tmp_path / "audit" / "pair_mia" / "model" / "summary.json")
    # the reference: the model the run started from (the trainer's model was loaded from base_dir), found at train begin
    assert summary["checkpoints"] == ["checkpoint-1", "checkpoint-2"] and summary["reference"] == str(base_dir)
    rows = read_jsonl(tmp_path / "audit" / "pair_mia" / "model" / "checkpoint-2" / "canaries.jsonl")
    assert sorted(r["id"] for r in rows) == sorted(c["id"] for c in manifest["canaries"] + manifest["heldout"])
    pairs = {c["id"]: c["pair"] for c in manifest["canaries"] + manifest["heldout"]}
    tok = AutoTokenizer.from_pretrained(base_dir)
    control = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    for row in rows:
        logp = row["logp"]
        assert row["score"]["premia_pair"] == pytest.approx(
            (logp["chosen"] - logp["ref_chosen"]) - (logp["rejected"] - logp["ref_rejected"]), abs=1e-9)
        prompt = tok(pairs[row["id"]]["prompt"])["input_ids"]
        chosen = tok(pairs[row["id"]]["chosen"], add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = control(torch.tensor([prompt + chosen])).logits[0].float()
        by_token = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
        assert logp["ref_chosen"] == pytest.approx(float(by_token[torch.arange(len(chosen)), chosen].sum()), abs=1e-3)
    assert member_counts(rows) == (len(manifest["canaries"]), len(manifest["heldout"]))
    done = memlens_command("report", f"run_dir={tmp_path}", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PREMIA (pair margin)" in (tmp_path / "report" / "report.md").read_text()


def test_pair_membership_takes_the_reference_given_or_says_once_why_it_is_not_scored(base_dir, tmp_path):
    """`pair_reference` names PREMIA's reference (a directory that is no model is refused before anything is
    written); a model that was not loaded from a local directory leaves the pairs unscored, said once in the log."""
    import shutil

    import memlens
    from memlens.harness.audit.callback import initial_model_dir

    with pytest.raises(UserError, match=r"AuditCallback\(pair_reference='.*nowhere'\): not a model directory"):
        memlens.AuditCallback(manifest_of(), control=base_dir, out_dir=tmp_path / "bad", pair_reference=tmp_path /
                              "nowhere")
    assert not (tmp_path / "bad").exists()
    other = shutil.copytree(base_dir, tmp_path / "start")
    train_with_callback("dpo", base_dir, tmp_path / "given", [], loss_type="sigmoid", pair_reference=other)
    assert read_json(tmp_path / "given" / "audit" / "pair_mia" / "model" / "summary.json")["reference"] == str(other)

    class FromTheHub:
        config = type("Config", (), {"_name_or_path": "org/model-on-the-hub"})()

    assert initial_model_dir(FromTheHub()) is None
    lines: list[str] = []
    audit = memlens.AuditCallback(train_with_callback("dpo", base_dir, tmp_path / "plain", [], loss_type="sigmoid",
                                                      audit=False)[1], control=base_dir, out_dir=tmp_path / "hub",
                                  log=lines.append, **SMALL)
    record = audit.score(tmp_path / "plain" / "model" / "checkpoint-1", 1)    # no on_train_begin: no reference found
    assert "pair_mia" not in record and "extraction" in record
    audit.score(tmp_path / "plain" / "model" / "checkpoint-2", 2)
    said = [line for line in lines if "preference-pair membership is not scored" in line]
    assert len(said) == 1 and "pass pair_reference=" in said[0]


def member_counts(rows: list[dict]) -> tuple[int, int]:
    return sum(r["member"] == 1 for r in rows), sum(r["member"] == 0 for r in rows)


def test_a_reward_model_is_scored_by_its_ranking_of_planted_over_heldout(base_dir, tmp_path):
    train_with_callback("reward", base_dir, tmp_path, [])
    log = _log(tmp_path)
    assert sorted(log) == ["checkpoint-1", "checkpoint-2"]
    assert all("reward" in r and "extraction" not in r for r in log.values())
    summary = read_json(tmp_path / "audit" / "reward" / "model" / "summary.json")
    done = memlens_command("report", f"run_dir={tmp_path}", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "A reward model's ranking of the canaries" in (tmp_path / "report" / "report.md").read_text()
    for entry in summary["results"].values():
        assert 0 <= entry["metrics"]["auc"]["value"] <= 1 and len(entry["metrics"]["auc"]["ci95"]) == 2
        assert entry["n_members"] + entry["n_nonmembers"] == len(CANARIES)


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto", "orpo", "grpo"])   # one per family of objective
def test_peft_control_base_scores_against_the_base_with_adapters_off(kind, base_dir, tmp_path):
    train_with_callback(kind, base_dir, tmp_path, [], peft=True, loss_type="sigmoid" if kind == "dpo" else None)
    log = _log(tmp_path)
    assert sorted(log) == ["checkpoint-1", "checkpoint-2"]
    for record in log.values():
        assert record["control"]["dir"] == str(base_dir) and "weaker" in record["control"]["kind"]
        assert set(record["mia"]) >= {"loss", "reference"}                 # the base with adapters off: a control
        # GRPO's prompts are sampled from the adapter merged into its base, beside the base itself
        assert ("prompt_mia" in record) == (kind == "grpo") and all(
            m["auc"]["value"] is not None for m in record.get("prompt_mia", {}).values())
    assert (tmp_path / "model" / "checkpoint-1" / "adapter_config.json").is_file()   # scored from the adapter alone


def test_training_is_unchanged_by_the_callback(base_dir, tmp_path):
    from transformers import TrainerCallback

    class Losses(TrainerCallback):
        def __init__(self):
            self.losses = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    with_it, without = Losses(), Losses()
    train_with_callback("sft", base_dir, tmp_path / "with", [with_it])
    train_with_callback("sft", base_dir, tmp_path / "without", [without], audit=False)
    assert len(with_it.losses) == STEPS and with_it.losses == without.losses
    assert (tmp_path / "with" / "audit" / "callback.jsonl").is_file()
    assert not (tmp_path / "without" / "audit").exists()


def test_exposure_ranks_among_a_seeded_pool_of_heldout_targets(base_dir, tmp_path):
    from datasets import Dataset

    import memlens

    canaries = [{**c, "id": f"{c['id']}-{k}", "target": c["target"][:-2] + f"{k}{c['target'][-2:]}"}
                for c in CANARIES for k in range(3)]
    manifest = memlens.inject(Dataset.from_list([{"prompt": "a", "completion": "b"}]), canaries, seed=1)[1]
    assert len(manifest["heldout"]) > 3
    runs = []
    for out in ("a", "b"):
        cb = memlens.AuditCallback(manifest, control=base_dir, out_dir=tmp_path / out, measures=["exposure"],
                                   exposure_candidates=3, model_name="m", log=lambda _: None, **SMALL)
        runs.append(cb.score(base_dir, 0)["exposure"])
        rows = read_jsonl(tmp_path / out / "audit" / "exposure" / "m" / f"{base_dir.name}.jsonl")
        assert [r["n_candidates"] for r in rows] == [4] * len(manifest["canaries"]) + [3] * 3
    assert runs[0] == runs[1] and runs[0]["heldout"]["count"] == 3     # the same seeded pool every time


def test_a_checkpoint_without_weights_is_deferred_with_the_way_to_audit_it(base_dir, tmp_path):
    import memlens

    manifest = manifest_of()
    cb = memlens.AuditCallback(manifest, control=base_dir, out_dir=tmp_path / "out", log=lambda _: None)
    sharded = tmp_path / "model" / "checkpoint-5"
    (sharded / "global_step5").mkdir(parents=True)          # what ZeRO-3 leaves without a gathered save
    record = cb.score(sharded, 5)
    assert "deferred" in record and "memlens audit" in record["deferred"]
    assert not (tmp_path / "out" / "audit" / "model").exists()


@pytest.mark.parametrize("kwargs,needle", [
    ({"control": "/nonexistent"}, "AuditCallback(control='/nonexistent')"),
    ({"every": 0}, "AuditCallback(every=0)"),
    ({"measures": ["bleu"]}, "AuditCallback(measures=['bleu'])"),
    ({"model_name": "../x"}, "AuditCallback(model_name)='../x'"),
    ({"exposure_candidates": 0}, "AuditCallback(exposure_candidates=0)"),
])
def test_bad_arguments_are_refused_before_training(base_dir, tmp_path, kwargs, needle):
    import memlens

    args = {"control": base_dir, "out_dir": tmp_path / "out", **kwargs}
    with pytest.raises(UserError) as e:
        memlens.AuditCallback(manifest_of(), **args)
    assert needle in str(e.value)


def test_a_refused_argument_writes_nothing_and_the_saved_arguments_rebuild_the_callback(base_dir, tmp_path):
    import memlens

    with pytest.raises(UserError, match="preflight='maybe'"):
        memlens.AuditCallback(manifest_of(), control=base_dir, out_dir=tmp_path / "out", preflight="maybe")
    assert not (tmp_path / "out").exists()          # checked before the manifest is copied under out_dir
    cb = memlens.AuditCallback(manifest_of(), control=base_dir, out_dir=tmp_path / "out", every=2, k=0.2,
                               reference=("a b", "c"), log=lambda _: None)
    saved = cb.state()["args"]
    assert saved["manifest"] == str(tmp_path / "out" / "canaries" / "manifest.json") and saved["reference"] == ["a b", "c"]
    assert memlens.AuditCallback(**saved, log=lambda _: None).state()["args"] == saved


def test_a_manifest_that_is_not_one_is_refused(tmp_path, base_dir):
    import memlens

    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(UserError, match="not a memlens.inject manifest"):
        memlens.AuditCallback(bad, control=base_dir, out_dir=tmp_path / "out")


DDP_SCRIPT = """
import os, sys, torch
from pathlib import Path
torch.set_num_threads(1)
sys.path.insert(0, {repo!r})
from tests.integration.callback_helpers import train_with_callback
trainer, _ = train_with_callback("sft", Path({base!r}), Path({out!r}), [])
# a file per rank: two processes' prints interleave on one stdout (measured: a line cut in two by the other's log)
Path(f"rank{{trainer.args.process_index}}.txt").write_text(f"world size {{trainer.args.world_size}}")
# torch's advice: destroy the group before exit; left to interpreter shutdown, gloo's threads once aborted rank 0
# after its work ("terminate called without an active exception": the project CI of d4b8a66)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
# and no interpreter teardown: with the group destroyed, rank 0 still aborted once at exit the same way (the fresh-clone
# CI of 206ef5c, after its work was written); every result this test reads is on disk by now
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def test_under_ddp_the_main_process_scores_and_the_rows_equal_a_single_process_scoring(base_dir, tmp_path):
    import memlens

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT.format(repo=str(REPO), base=str(base_dir), out=str(tmp_path / "ddp")))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29531", str(script)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["world size 2"] * 2
    log = read_jsonl(tmp_path / "ddp" / "audit" / "callback.jsonl")
    assert [r["checkpoint"] for r in log] == ["checkpoint-1", "checkpoint-2"]     # once each: the main process
    again = memlens.AuditCallback(tmp_path / "ddp" / "canaries" / "manifest.json", control=base_dir,
                                  out_dir=tmp_path / "single", log=lambda _: None, **SMALL)
    for step in (1, 2):
        again.score(tmp_path / "ddp" / "model" / f"checkpoint-{step}", step)
        for dataset in ("canaries", "canaries_heldout"):
            ddp_rows = read_jsonl(tmp_path / "ddp" / "audit" / "model" / f"checkpoint-{step}" / f"{dataset}.jsonl")
            one = read_jsonl(tmp_path / "single" / "audit" / "model" / f"checkpoint-{step}" / f"{dataset}.jsonl")
            assert sorted(ddp_rows, key=lambda r: r["id"]) == sorted(one, key=lambda r: r["id"])


@pytest.mark.parametrize("route", ["attach", "callbacks", "add_callback"])
def test_the_audit_reaches_tensorboard_beside_the_loss_at_each_checkpoints_step(route, base_dir, tmp_path,
                                                                                 monkeypatch):
    """However the callback joins the trainer (`audit.attach(trainer)`, TRL's `callbacks=[audit]`,
    `trainer.add_callback(audit)`), it logs each scored checkpoint through the trainer's own log(): TensorBoard's
    event files (read back with tensorboard's own reader) hold memlens/ scalars at steps 1 and 2, equal to
    callback.jsonl's figures, beside the trainer's loss, and the trainer's loss rows are still one per step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from memlens.harness.audit.callback import tracker_metrics

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))    # transformers 5: where TensorBoard writes
    trainer, _ = train_with_callback("sft", base_dir, tmp_path, [], tensorboard=tmp_path / "tb", route=route)
    audit = next(c for c in trainer.callback_handler.callbacks if type(c).__name__ == "AuditCallback")
    assert audit.trainer is trainer
    events = EventAccumulator(str(tmp_path / "tb")).Reload()
    tags = events.Tags()["scalars"]
    # transformers' TensorBoard integration files every training-time row under train/, beside the loss
    assert {"train/loss", "train/memlens/extraction_rate", "train/memlens/mia/loss/auc"} <= set(tags), tags
    checked = 0
    for checkpoint, record in _log(tmp_path).items():
        step = int(checkpoint.split("-")[1])
        for key, value in tracker_metrics(record).items():
            logged = {e.step: e.value for e in events.Scalars(f"train/{key}")}
            assert logged[step] == pytest.approx(value, abs=1e-6), (key, step)
            checked += 1
    assert checked >= 2 * 8
    assert [r["step"] for r in trainer.state.log_history if "loss" in r] == [1, 2]
    assert [r["step"] for r in trainer.state.log_history if "memlens/extraction_rate" in r] == [1, 2]


def test_a_callback_with_no_trainer_to_log_through_says_so_once_naming_attach(base_dir, tmp_path):
    """Events delivered by something other than a Trainer's train() (a custom loop): with report_to set, the callback
    says once that its figures reach no tracker and names attach(); with no report_to it says nothing."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    import memlens

    lines: list[str] = []
    audit = memlens.AuditCallback(manifest_of(), control=base_dir, out_dir=tmp_path / "out", preflight="off",
                                  log=lines.append, **SMALL)
    quiet = TrainingArguments(output_dir=str(tmp_path / "m"), report_to="none", use_cpu=True)
    audit.on_train_begin(quiet, TrainerState(), TrainerControl())
    assert lines == [] and audit.trainer is None
    tracked = TrainingArguments(output_dir=str(tmp_path / "m"), report_to=["tensorboard"], use_cpu=True)
    for _ in range(2):
        audit.on_train_begin(tracked, TrainerState(), TrainerControl())
    assert len(lines) == 1 and "report_to=['tensorboard']" in lines[0] and "audit.attach(trainer)" in lines[0], lines


KILLED_RUN = r"""
import os, signal, sys
from pathlib import Path
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
import memlens
from tests.integration.callback_helpers import CANARIES, SMALL, common_args, rows_of

base, out, resume, restore = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "resume", sys.argv[4] == "restore"
train, manifest = memlens.inject(Dataset.from_list(rows_of("prompt_completion")), CANARIES, seed=1)

class KillAfterScoring(TrainerCallback):          # runs after the audit's on_save: checkpoint-2 is scored, then kill
    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 2 and not resume:
            os.kill(os.getpid(), signal.SIGKILL)

audit = memlens.AuditCallback(manifest, control=base, out_dir=out, **SMALL)
args = trl.SFTConfig(**{**common_args(out, restore_callback_states_from_checkpoint=restore), "max_steps": 3})
trainer = trl.SFTTrainer(model=AutoModelForCausalLM.from_pretrained(base), args=args, train_dataset=train,
                         processing_class=AutoTokenizer.from_pretrained(base))
audit.attach(trainer)
trainer.add_callback(KillAfterScoring())
trainer.train(resume_from_checkpoint=True if resume else None)
restored = next(c for c in trainer.callback_handler.callbacks if type(c).__name__ == "AuditCallback")
print("COUNTERS", restored.saves, restored.scored, restored is not audit, restored.trainer is trainer)
"""


@pytest.mark.parametrize("restore", [True, False])
def test_a_killed_and_resumed_run_audits_each_checkpoint_exactly_once(base_dir, tmp_path, restore):
    """SIGKILL right after checkpoint-2 is scored; `train(resume_from_checkpoint=True)` in a new process continues:
    checkpoint-3 is scored, 1 and 2 are not scored again, the MIA summary holds all three, and the counters are
    right whether the trainer restores the callback's ExportableState (restore_callback_states_from_checkpoint) or
    the callback recovers them from callback.jsonl."""
    env = user_directory_env()                          # offline, the checkout first on the path
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN)
    mode = "restore" if restore else "plain"
    killed = run_python(script, [str(base_dir), str(tmp_path / "out"), "first", mode], env, REPO, 600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert [r["checkpoint"] for r in read_jsonl(tmp_path / "out" / "audit" / "callback.jsonl")] == [
        "checkpoint-1", "checkpoint-2"]
    state = json.loads((tmp_path / "out" / "model" / "checkpoint-2" / "trainer_state.json").read_text())
    # the trainer writes trainer_state.json before this save's callbacks run: the state one save behind
    assert state["stateful_callbacks"]["AuditCallback"]["attributes"] == {"saves": 1, "scored": 1}
    assert state["stateful_callbacks"]["AuditCallback"]["args"]["out_dir"] == str(tmp_path / "out")
    resumed = run_python(script, [str(base_dir), str(tmp_path / "out"), "resume", mode], env, REPO, 600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = [r["checkpoint"] for r in read_jsonl(tmp_path / "out" / "audit" / "callback.jsonl")]
    assert log == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    mia = read_json(tmp_path / "out" / "audit" / "mia" / "model" / "summary.json")
    assert mia["checkpoints"] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    counters = next(line for line in resumed.stdout.splitlines() if line.startswith("COUNTERS")).split()[1:]
    assert counters[:2] == ["3", "3"] and counters[3] == "True"        # the trainer link survives a restore
    assert counters[2] == str(restore)                                 # restored: a new instance, rebuilt from state


def test_the_report_compares_several_callback_runs_on_one_manifest(plain_run, tmp_path):
    """An SFT and a DPO run on the same canaries, each audited by the callback: `memlens report run_dir=<sft>
    report.runs=[<dpo>]` draws both runs' rates over steps on one axis and tables each run's last checkpoint, its
    interval and n, the held-out rate and the best MIA attack's AUC, and says the canaries are the same."""
    for kind in ("sft", "dpo"):
        plain_copy(plain_run(kind, "sigmoid" if kind == "dpo" else None), tmp_path / kind)
    done = memlens_command("report", f"run_dir={tmp_path / 'sft'}", f"report.runs=[{tmp_path / 'dpo'}]", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = read_json(tmp_path / "sft" / "report" / "summary.json")["runs_compared"]
    assert summary["same_canaries"] is True
    rows = {r["model"]: r for r in summary["rows"] if r["dataset"] == "canaries"}
    assert set(rows) == {"sft:model", "dpo:model"}
    for r in rows.values():
        assert r["checkpoint"] == f"checkpoint-{STEPS}" and r["n_scored"] and r["ci95"][0] <= r["rate"] <= r["ci95"][1]
        assert r["best_attack"] and 0 <= r["auc"] <= 1
    assert (tmp_path / "sft" / "report" / "figures" / "runs_canaries.png").is_file()
    assert "## Runs compared" in (tmp_path / "sft" / "report" / "report.md").read_text()


def test_background_scoring_gives_the_rows_synchronous_scoring_gives(base_dir, plain_run, tmp_path):
    """`background=True`: each checkpoint is snapshotted and scored by a spawned worker while training goes on; at
    train end the queue is drained. Every row file (extraction, MIA, exposure, and RL-prompt membership: a GRPO run
    scores every measure an SFT run does, and samples its canary prompts besides) is byte-identical to synchronous
    scoring of the same run, callback.jsonl holds every checkpoint once, and no snapshot is left behind."""
    sync = plain_run("grpo")[0]
    trainer, _ = train_with_callback("grpo", base_dir, tmp_path / "background", [], background=True)
    audit = next(c for c in trainer.callback_handler.callbacks if type(c).__name__ == "AuditCallback")
    assert audit.background.pending == 0 and audit.background.process is None
    log = _log(tmp_path / "background")
    assert sorted(log) == [f"checkpoint-{s}" for s in range(1, STEPS + 1)]
    patterns = ["model/checkpoint-*/canaries*.jsonl", "mia/model/checkpoint-*/canaries.jsonl",
                "exposure/model/checkpoint-*.jsonl", "prompt_mia/model/checkpoint-*/canaries.jsonl"]
    compared = 0
    for pattern in patterns:
        synchronous = sorted((sync / "audit").glob(pattern))
        assert synchronous, pattern
        for path in synchronous:
            twin = tmp_path / "background" / "audit" / path.relative_to(sync / "audit")
            assert twin.read_bytes() == path.read_bytes(), twin
            compared += 1
    assert compared >= 10
    assert not any((tmp_path / "background" / "audit" / "pending").iterdir())
