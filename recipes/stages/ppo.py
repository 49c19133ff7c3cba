"""PPO with a per-token KL penalty, the RL stage's `algorithm: ppo` (recipes/stages/rl.py keeps the stage).

The form of Ziegler et al. 2019 ("Fine-Tuning Language Models from Human Preferences", Sec. 2.2) and
InstructGPT (Ouyang et al. 2022, Sec. 3.5): the reward of a sampled completion y is

    R(x, y) = r(x, y) - α · log(π(y|x) / π_ref(y|x)),

spread over tokens as r_t = -α (log π(y_t) - log π_ref(y_t)) at every token, plus the reward-model score
r(x, y) at the last real token (EOS or truncation). Advantages come from GAE (Schulman et al. 2016,
"High-Dimensional Continuous Control Using Generalized Advantage Estimation", Eq. 16) on a learned
value model, and the policy follows PPO's clipped surrogate (Schulman et al. 2017, Eq. 7) with a
clipped value loss. TRL 1.13 removed its PPOTrainer, so this is our own, kept small; the reference is
the frozen initial model and the value model is initialised from the reward model (common practice,
as in InstructGPT Sec. 3.5 and TRL's former trainer). With LoRA (a PEFT policy and value model), only
adapters and the value head train, and the reference is the policy with its adapters disabled.

On disk a PPO stage looks like an RLOO one: `checkpoint-<step>/` (a loadable causal LM + tokenizer, or
with LoRA its adapters, plus `value/`, `optimizer.pt`, `rng_state.pth` and, written last,
`trainer_state.json` whose `log_history` uses RLOO's keys `reward`, `reward_std`, `kl`, `loss`), and the
final model (LoRA merged) with its `value/` at the root.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import random
import time
from pathlib import Path
from typing import Any

from memlens.harness.core.console import StageProgress
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, read_json
from memlens.harness.core.layout import checkpoint_name
from memlens.recipes.stages import preemption
from memlens.recipes.stages.fim_context import left_padded_prompts
from memlens.recipes.stages.models import save_final

TRAINER_STATE = "trainer_state.json"
VALUE_DIR = "value"


# --- the math: each piece small enough to check on paper ------------------------------------------------------


def completion_mask(completion_ids, eos_token_id: int | list[int]):
    """1 for the real tokens of each sampled completion: up to and including its first EOS (generate
    pads finished rows afterwards), all of them when the completion was cut at max_completion_length.
    A list of ids: the first of any of them ends the completion (the family's stop tokens, memlens.harness.text.fim)."""
    import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

    stops = torch.tensor(eos_token_id if isinstance(eos_token_id, list) else [eos_token_id],
                         device=completion_ids.device)
    is_eos = torch.isin(completion_ids, stops)
    after_first_eos = (torch.cumsum(is_eos.long(), dim=1) - is_eos.long()) > 0
    return (~after_first_eos).long()


def kl_shaped_rewards(logprobs, ref_logprobs, scores, mask, alpha: float):
    """Per-token rewards r_t = -α (log π(y_t) - log π_ref(y_t)), plus the RM score at the last real token
    (Ziegler et al. Sec. 2.2: the KL penalty makes each token pay for its drift; the score arrives once).
    Padding gets 0."""
    import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

    rewards = -alpha * (logprobs - ref_logprobs) * mask
    last = mask.sum(dim=1).long().clamp(min=1) - 1     # real tokens are a prefix of each row
    rows = torch.arange(mask.shape[0], device=mask.device)
    rewards[rows, last] += scores.to(rewards.dtype)
    return rewards


def gae(rewards, values, mask, gamma: float, lam: float):
    """(advantages, returns) by GAE: δ_t = r_t + γ V_{t+1} - V_t, A_t = δ_t + γλ A_{t+1} (Schulman et al.
    2016, Eq. 16), with V = 0 after the last real token, so the episode ends there; returns = A + V."""
    import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

    values = values * mask
    rewards = rewards * mask
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        next_value = values[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        advantages[:, t] = running
    advantages = advantages * mask
    return advantages, advantages + values


def reward_columns(examples: list[dict]) -> dict[str, list]:
    """The examples' columns as TRL hands them to a reward function (one list per key, the prompt aside): prefix
    and suffix for the reward model, and the row fields a verifiable reward reads (recipes/stages/verifiable_rewards.py)."""
    keys = [k for k in examples[0] if k != "prompt"] if examples else []
    return {k: [ex.get(k) for ex in examples] for k in keys}


def masked_mean(x, mask):
    return (x * mask).sum() / mask.sum().clamp(min=1)


def whiten(x, mask, eps: float = 1e-8):
    """(x - mean) / std over the real tokens of the batch (the advantage normalisation PPO uses)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * (var + eps).rsqrt() * mask


def ppo_losses(logprobs, old_logprobs, advantages, values, old_values, returns, mask, clip_range: float,
               value_clip: float) -> dict[str, Any]:
    """PPO's clipped surrogate (Schulman et al. 2017, Eq. 7) and the clipped value loss of the PPO
    baselines, each a mean over real tokens; plus clipfrac and approx_kl for the logs."""
    import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_range, 1 + clip_range)
    policy_loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    values_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    value_loss = 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (values_clipped - returns) ** 2), mask)
    return {"policy_loss": policy_loss, "value_loss": value_loss,
            "clipfrac": masked_mean(((ratio - 1).abs() > clip_range).float(), mask),
            "approx_kl": 0.5 * masked_mean(log_ratio ** 2, mask)}


class AdaptiveKLController:
    """Ziegler et al. 2019, Sec. 2.2: α_{t+1} = α_t (1 + K_β e_t), e_t = clip(KL_t / KL_target - 1, ±0.2),
    with K_β = (samples this step) / horizon and KL_t the mean KL per completion. Off unless `target_kl`
    is set."""

    def __init__(self, alpha: float, target_kl: float | None, horizon: int):
        self.alpha, self.target_kl, self.horizon = alpha, target_kl, horizon

    def update(self, kl: float, n_samples: int) -> None:
        if self.target_kl is None:
            return
        error = min(max(kl / self.target_kl - 1, -0.2), 0.2)
        self.alpha *= 1 + error * n_samples / self.horizon


# --- forward passes -------------------------------------------------------------------------------------------


def position_ids(attention_mask):
    """Positions that skip the left padding of the prompts, as generate() uses them."""
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def token_logprobs(model, input_ids, attention_mask, prompt_len: int, temperature: float,
                   with_entropy: bool = False):
    """log π(y_t) of each completion token (and the entropy of π at each), from one forward pass over
    prompt + completion; logits are divided by the sampling temperature, so π is the distribution sampled."""
    import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids(attention_mask)).logits
    logits = logits[:, prompt_len - 1:-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return logp
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def is_peft(model) -> bool:
    return hasattr(model, "peft_config")


def token_values(value_model, input_ids, attention_mask, prompt_len: int):
    """V(s_t) for each completion token: the value head (the RM's score layer) on the hidden state that
    precedes the token, i.e. the state in which the token is chosen."""
    # A PEFT model's `base_model` is its adapter layer, not the transformer: reach the classifier first.
    classifier = value_model.get_base_model() if is_peft(value_model) else value_model
    hidden = classifier.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                   position_ids=position_ids(attention_mask)).last_hidden_state
    return classifier.score(hidden[:, prompt_len - 1:-1]).squeeze(-1).float()


# --- the loop ---------------------------------------------------------------------------------------------------



def load_state(path: Path):
    """Optimizer or RNG state saved by save_models, read with `weights_only=True`: tensors, numbers, strings
    and containers only, so a tampered checkpoint folder cannot run code on resume (an unpickled object
    could). What that refuses is named, with the fix."""
    import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        reason = next((line.strip().split(". Please")[0] for line in str(e).splitlines()
                       if "WeightsUnpickler error" in line), "not plain tensors and numbers")
        raise UserError(f"{path}: refused to load: it holds more than tensors and numbers ({reason}), "
                        f"which a checkpoint written by this stage never does; delete {path.parent} to resume from "
                        "the checkpoint before it (or the stage's start)") from None

class PPOTrainer:
    """Rollout -> rewards -> GAE -> `ppo_epochs` passes of clipped updates, one optimizer step per minibatch
    of each pass; checkpoints and resume like a transformers Trainer's."""

    def __init__(self, cfg, policy, ref_policy, value_model, tokenizer, reward_fn, examples: list[dict],
                 out_dir: Path, seed: int, device: str, name: str = "ppo", train_log=None):
        """`ref_policy` None: `policy` is a PEFT model whose adapter-disabled base is the reference. `name` labels
        the progress bar; `train_log` (memlens.recipes.stages.training_log.TrainLog) receives every logged step."""
        import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

        self.cfg, self.policy, self.ref, self.value = cfg, policy, ref_policy, value_model
        self.tokenizer, self.reward_fn, self.examples = tokenizer, reward_fn, examples
        # Where a sampled completion ends: the policy's generation stop tokens (the family's, EOS first;
        # memlens.recipes.stages.models.stop_generation_at_family_stops), else the tokenizer's EOS.
        stops = policy.generation_config.eos_token_id
        self.stop_ids = list(stops) if isinstance(stops, (list, tuple)) else [stops if stops is not None
                                                                              else tokenizer.eos_token_id]
        self.out_dir, self.seed, self.device = Path(out_dir), seed, device
        self.name, self.train_log = name, train_log
        if self.ref is None and not is_peft(policy):
            raise ValueError("PPOTrainer needs a reference model unless the policy is a PEFT model")
        if self.ref is not None:
            self.ref.requires_grad_(False).eval()
        # Only what trains (everything without LoRA; adapters and the value head with it).
        self.policy_opt = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=cfg.lr)
        self.value_opt = torch.optim.AdamW([p for p in self.value.parameters() if p.requires_grad], lr=cfg.lr)
        self.kl_ctl = AdaptiveKLController(float(cfg.beta), cfg.target_kl, int(cfg.kl_horizon))
        self.step, self.log_history = 0, []
        steps_per_epoch = math.ceil(len(examples) / cfg.prompts_per_step)
        self.total_steps = (cfg.max_steps if cfg.max_steps > 0
                            else max(1, math.ceil(cfg.epochs * steps_per_epoch)))

    def mixed_precision(self):
        """bf16 autocast on CUDA over fp32 master weights (what a Trainer does with bf16=True); none on CPU,
        where bf16 is slower."""
        import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

        if self.device != "cuda":
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)

    # prompts of a step: a seeded permutation per epoch, so a resumed run draws the same ones
    def step_examples(self, step: int) -> list[dict]:
        n, per = len(self.examples), self.cfg.prompts_per_step
        out = []
        for k in range(step * per, (step + 1) * per):
            epoch, i = divmod(k, n)
            order = list(range(n))
            random.Random(f"{self.seed}:ppo-epoch-{epoch}").shuffle(order)
            out.append(self.examples[order[i]])
        return out

    def rollout(self, examples: list[dict]) -> dict[str, Any]:
        import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

        cfg, tok = self.cfg, self.tokenizer
        examples = [ex for ex in examples for _ in range(cfg.num_generations)]
        enc = left_padded_prompts(tok, [ex["prompt"] for ex in examples]).to(self.device)
        prompt_len = enc["input_ids"].shape[1]
        with torch.no_grad(), self.mixed_precision():
            self.policy.eval()
            seq = self.policy.generate(**enc, do_sample=True, temperature=cfg.temperature, top_k=0, top_p=1.0,
                                       max_new_tokens=cfg.max_completion_length,
                                       pad_token_id=tok.pad_token_id, eos_token_id=self.stop_ids)
            completion = seq[:, prompt_len:]
            mask = completion_mask(completion, self.stop_ids)
            attention = torch.cat([enc["attention_mask"], mask], dim=1)
            logp = token_logprobs(self.policy, seq, attention, prompt_len, cfg.temperature)
            if self.ref is not None:
                ref_logp = token_logprobs(self.ref, seq, attention, prompt_len, cfg.temperature)
            else:
                with self.policy.disable_adapter():   # the frozen base: the initial model
                    ref_logp = token_logprobs(self.policy, seq, attention, prompt_len, cfg.temperature)
            values = token_values(self.value, seq, attention, prompt_len)
            texts = tok.batch_decode(completion * mask + tok.pad_token_id * (1 - mask), skip_special_tokens=True)
            scores = torch.tensor(self.reward_fn(prompts=[ex["prompt"] for ex in examples], completions=texts,
                                                 **reward_columns(examples)), dtype=torch.float32, device=self.device)
        mask = mask.float()
        rewards = kl_shaped_rewards(logp, ref_logp, scores, mask, self.kl_ctl.alpha)
        advantages, returns = gae(rewards, values, mask, cfg.gamma, cfg.gae_lambda)
        return {"seq": seq, "attention": attention, "prompt_len": prompt_len, "mask": mask, "logp": logp,
                "values": values * mask, "advantages": whiten(advantages, mask), "returns": returns,
                "scores": scores, "kl": masked_mean(logp - ref_logp, mask).item(),
                "kl_per_completion": ((logp - ref_logp) * mask).sum(dim=1).mean().item()}

    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

        cfg, n = self.cfg, batch["seq"].shape[0]
        self.policy.train()
        self.value.train()
        sums: dict[str, float] = {}
        updates = 0
        for _ in range(cfg.ppo_epochs):
            for idx in torch.randperm(n).chunk(min(cfg.ppo_minibatches, n)):
                pick = {k: v[idx] for k, v in batch.items() if torch.is_tensor(v) and v.dim() and k != "scores"}
                with self.mixed_precision():
                    logp, entropy = token_logprobs(self.policy, pick["seq"], pick["attention"], batch["prompt_len"],
                                                   cfg.temperature, with_entropy=True)
                    values = token_values(self.value, pick["seq"], pick["attention"], batch["prompt_len"])
                out = ppo_losses(logp, pick["logp"], pick["advantages"], values, pick["values"], pick["returns"],
                                 pick["mask"], cfg.clip_range, cfg.value_clip)
                loss = out["policy_loss"] + cfg.vf_coef * out["value_loss"]
                self.policy_opt.zero_grad()
                self.value_opt.zero_grad()
                loss.backward()
                self.policy_opt.step()
                self.value_opt.step()
                out["entropy"], out["loss"] = masked_mean(entropy, pick["mask"]), loss
                for key, value in out.items():
                    sums[key] = sums.get(key, 0.0) + float(value.detach())
                updates += 1
        return {key: value / updates for key, value in sums.items()}

    def train(self) -> None:
        start = time.perf_counter()
        progress = StageProgress(self.name, self.total_steps, initial=self.step)
        if self.train_log is not None:
            self.train_log.start(self.step)
        for step in range(self.step, self.total_steps):
            batch = self.rollout(self.step_examples(step))
            stats = self.update(batch)
            self.step = step + 1
            self.kl_ctl.update(batch["kl_per_completion"], batch["seq"].shape[0])
            if self.step % self.cfg.logging_steps == 0 or self.step == self.total_steps:
                scores = batch["scores"]
                # RLOO's names for what harness/report/evidence.py reads; PPO's own under ppo/.
                self.log_history.append({
                    "step": self.step, "loss": stats["loss"], "reward": scores.mean().item(),
                    "reward_std": scores.std().item() if scores.numel() > 1 else 0.0, "kl": batch["kl"],
                    "beta": self.kl_ctl.alpha, **{f"ppo/{k}": v for k, v in stats.items() if k != "loss"}})
                if self.train_log is not None:
                    self.train_log.append(self.step, self.log_history[-1])
            progress.update(self.step, loss=stats["loss"])
            on_schedule = self.step % self.cfg.save_steps == 0 or self.step == self.total_steps   # as a Trainer does
            if on_schedule or preemption.requested():
                self.save_models(self.out_dir / checkpoint_name(self.step), resumable=True)
            if preemption.requested():          # a job being stopped: saved above, resumed from there when requeued
                preemption.record_stop(self.step, on_schedule)
                break
        progress.close()
        if self.train_log is not None:
            self.train_log.close()
        self.train_seconds = time.perf_counter() - start     # read by benchmarks/bench_rl_step.py

    # --- checkpoints --------------------------------------------------------------------------------------

    def save_models(self, directory: Path, resumable: bool = False) -> None:
        """Policy (a loadable causal LM + tokenizer) and `value/`; with `resumable`, also both optimizers and
        every RNG the loop draws from. trainer_state.json goes last: the marker of a complete checkpoint
        (memlens.recipes.stages.contract.latest_checkpoint)."""
        import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

        if not resumable:
            # The stage root: plain models (LoRA merged, in place), loadable like any other stage's.
            self.policy = save_final(self.policy, self.tokenizer, directory)
            self.value = save_final(self.value, None, directory / VALUE_DIR)
        else:
            # Training goes on from here, so LoRA adapters are saved unmerged (memlens.harness.model.decode loads
            # such a checkpoint merged onto its base for the audit).
            self.policy.save_pretrained(str(directory))
            self.tokenizer.save_pretrained(str(directory))
            self.value.save_pretrained(str(directory / VALUE_DIR))
            torch.save({"policy": self.policy_opt.state_dict(), "value": self.value_opt.state_dict()},
                       directory / "optimizer.pt")
            torch.save({"torch": torch.get_rng_state(), "python": random.getstate(),
                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
                       directory / "rng_state.pth")
        atomic_write_json(directory / TRAINER_STATE, {
            "global_step": self.step, "max_steps": self.total_steps, "log_history": self.log_history,
            "kl_coef": self.kl_ctl.alpha})

    def resume(self, directory: Path) -> None:
        """Continue from a checkpoint exactly: weights of both models, optimizer moments, RNG, α, logs."""
        import torch  # torch (~1 s): rl.py imports ppo.py when the plan is composed

        self.load_weights(self.policy, directory)
        self.load_weights(self.value, directory / VALUE_DIR)
        opt = load_state(directory / "optimizer.pt")
        self.policy_opt.load_state_dict(opt["policy"])
        self.value_opt.load_state_dict(opt["value"])
        rng = load_state(directory / "rng_state.pth")
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        state = read_json(directory / TRAINER_STATE)
        self.step, self.log_history = int(state["global_step"]), list(state["log_history"])
        self.kl_ctl.alpha = float(state["kl_coef"])

    @staticmethod
    def load_weights(model, directory: Path) -> None:
        # safetensors.torch imports torch (~1 s): rl.py imports ppo.py when the plan is composed
        from safetensors.torch import load_file

        if is_peft(model):
            # Only the adapters (and a value head) trained; the frozen base was loaded from the init model.
            from peft import set_peft_model_state_dict  # peft (~3 s): a LoRA model only

            result = set_peft_model_state_dict(model, load_file(str(Path(directory) / "adapter_model.safetensors")))
            if result.unexpected_keys:
                raise RuntimeError(f"{directory}: adapters do not match the model (unexpected "
                                   f"{result.unexpected_keys[:3]})")
            return
        state = {}
        for shard in sorted(Path(directory).glob("model*.safetensors")):   # one file, or save_pretrained's shards
            state.update(load_file(str(shard)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        # tied embeddings are saved once; anything else missing means a different architecture
        if unexpected or any("lm_head" not in k for k in missing):
            raise RuntimeError(f"{directory}: checkpoint does not match the model (missing {missing[:3]}, "
                               f"unexpected {unexpected[:3]})")
