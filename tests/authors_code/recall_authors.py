# Reference transcription of the ReCaLL scoring code, from the authors' repository.
#
#   source repo : https://github.com/ruoyuxie/recall
#   source file : src/run.py  (functions get_ll, get_conditional_ll, get_all_prob,
#                 inference [ReCaLL part only], process_prefix)
#   commit      : c2316410c29b18ef0a00b1d7aa39ff8bc2f4b5c8 (2024-11-27; last change to
#                 src/run.py is c8f5847 "fix ll_ref", 2024-09-26)
#   license     : Apache License 2.0 (LICENSE file in the repo root)
#   paper       : Xie et al., "ReCaLL: Membership Inference via Relative Conditional
#                 Log-Likelihoods", EMNLP 2024 (arXiv 2406.15968)
#
# Only numpy is used. The model/tokenizer calls are replaced by precomputed inputs.
# Every line that is not verbatim carries a "# changed:" or "# added:" comment.
#
# Conventions of the original code (HF causal LM, labels=input_ids, loss = mean CE over
# non-ignored labels after the internal one-position shift):
#   * get_ll(x): tokens x_0..x_{N-1} (tokenizer.encode; no BOS for GPT-2/Pythia). Scored
#     positions are x_1..x_{N-1} (N-1 values); x_0 is never scored.
#   * get_conditional_ll(P, x): ids = tok(P) ++ tok(x); labels of the prefix are -100, so
#     ALL N target tokens x_0..x_{N-1} are scored (x_0 conditioned on the last prefix token).
#     Prefix = "".join(shots) (no separator). Single forward pass, no windowing.
#   * score = LL(x|P) / LL(x), LL = mean per-token log-prob (= -loss). Both LL < 0.
#     Evaluated with sklearn roc_curve(labels, score), label 1 = member
#     => HIGHER score = member.
import numpy as np


def get_all_prob(all_prob):  # changed: was get_all_prob(input_ids, loss, logits); receives the
    #                             precomputed log p(label_t | context) of every NON-ignored label
    all_prob = [float(p) for p in all_prob]  # changed: replaces the log_softmax/gather loop
    loss = -float(np.mean(all_prob))  # changed: HF loss = mean NLL over non-ignored labels
    ll = -loss  # log-likelihood   # changed: was -loss.item()
    ppl = float(np.exp(loss))  # changed: was torch.exp(loss).item()
    prob = float(np.exp(-loss))  # changed: was torch.exp(-loss).item()
    return prob, ll, ppl, all_prob, loss  # changed: loss is already a float (was loss.item())


def get_ll(token_log_probs):  # changed: was get_ll(sentence, model, tokenizer, device);
    #                              token_log_probs = log p(x_t | x_<t) for t = 1..N-1 (N-1 values)
    return get_all_prob(token_log_probs)  # changed: model forward replaced by precomputed input


def get_conditional_ll(cond_token_log_probs):  # changed: was get_conditional_ll(input_text,
    #   target_text, model, tokenizer, device); cond_token_log_probs = log p(x_t | P, x_<t) for
    #   t = 0..N-1 (N values: every target token, including the first one)
    return get_all_prob(cond_token_log_probs)  # changed: model forward replaced by precomputed input


def inference(uncond_token_log_probs, cond_token_log_probs, num_shots):  # changed: signature;
    #   was inference(model1, model2, tokenizer1, tokenizer2, target_data, prefix, accelerator,
    #   num_shots, ex). Baselines (ref, zlib, min-k, min-k++) are omitted.
    pred = {}

    # unconditional log-likelihood
    ll = get_ll(uncond_token_log_probs)[1]  # changed: precomputed input

    # ReCaLL
    if int(num_shots) != 0:
        # conditional log-likelihood with prefix
        ll_nonmember = get_conditional_ll(cond_token_log_probs)[1]  # changed: precomputed input
        pred["recall"] = ll_nonmember / ll

    # loss
    pred["ll"] = ll
    return pred  # changed: original stored pred in ex["pred"] and returned ex


def process_prefix(prefix, avg_length, pass_window, total_shots, token_counts, max_length):
    # changed: signature; was process_prefix(target_model, prefix, avg_length, pass_window,
    #   total_shots) reading the globals model1/tokenizer1. token_counts[i] must equal
    #   len(tokenizer1.encode(prefix[i])); max_length = model1.config.max_position_embeddings
    #   (2048 for mamba).
    # NOTE: in the authors' CLI, --pass_window is argparse type=bool default True, so any value
    #   given on the command line is truthy and this function always returns `prefix` unchanged.
    if pass_window:
        return prefix
    target_token_count = avg_length
    total_tokens = sum(token_counts) + target_token_count
    if total_tokens <= max_length:
        return prefix
    # Determine the maximum number of shots that can fit within the max_length
    max_shots = 0
    cumulative_tokens = target_token_count
    for count in token_counts:
        if cumulative_tokens + count <= max_length:
            max_shots += 1
            cumulative_tokens += count
        else:
            break
    # Truncate the prefix to include only the maximum number of shots
    # NOTE (verbatim behaviour): counts are accumulated from the FIRST shots but the LAST
    #   max_shots shots are kept; if max_shots == 0, prefix[-0:] returns the WHOLE prefix.
    truncated_prefix = prefix[-max_shots:]
    total_shots = max_shots  # noqa: F841 (verbatim: the authors assign it and never read it)
    return truncated_prefix


# ---------------------------------------------------------------------------------------
# added: helpers (not in the source) that reproduce the HF alignment of the two passes from
# raw logits, so a test can start from tiny made-up logits.
def _log_softmax(logits):  # added
    logits = np.asarray(logits, dtype=np.float64)  # added
    m = logits.max(axis=-1, keepdims=True)  # added
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))  # added


def uncond_token_log_probs_from_logits(logits, input_ids):  # added
    """logits: [N, V] for the N target tokens; returns N-1 values (positions 1..N-1)."""
    lp = _log_softmax(logits)  # added
    ids = np.asarray(input_ids)  # added
    return [lp[i, ids[i + 1]] for i in range(len(ids) - 1)]  # added: same as get_all_prob loop


def cond_token_log_probs_from_logits(logits, prefix_ids, target_ids):  # added
    """logits: [len(prefix)+N, V] for prefix++target; returns N values (all target tokens)."""
    lp = _log_softmax(logits)  # added
    concat = list(prefix_ids) + list(target_ids)  # added
    n_pre = len(prefix_ids)  # added
    # label at position j (j >= n_pre) is predicted by logits row j-1  # added
    return [lp[j - 1, concat[j]] for j in range(n_pre, len(concat))]  # added


if __name__ == "__main__":  # added: smoke test on made-up numbers
    rng = np.random.default_rng(0)
    V, N, P = 11, 6, 4
    x = rng.integers(0, V, size=N)
    p = rng.integers(0, V, size=P)
    u = uncond_token_log_probs_from_logits(rng.normal(size=(N, V)), x)
    c = cond_token_log_probs_from_logits(rng.normal(size=(P + N, V)), p, x)
    assert len(u) == N - 1 and len(c) == N
    pred = inference(u, c, num_shots=1)
    assert np.isclose(pred["recall"], np.mean(c) / np.mean(u))
    print("authors_recall OK", pred)
    print(process_prefix(["a", "b", "c"], 5, False, 3, [3, 4, 100], 12))
