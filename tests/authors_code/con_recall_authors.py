# Reference transcription of the Con-ReCall scoring code, from the authors' repository.
#
#   source repo : https://github.com/WangCheng0116/CON-RECALL
#   source file : run.py (functions get_ll, get_conditional_ll, get_all_prob, inference
#                 [ReCaLL / Con-ReCall part only]); eval.py (sweep: roc_curve(labels, score))
#   commit      : 8c2bb7e6f6c9a3dc47f7bc449469cec372f28824 (2024-11-17; run.py unchanged
#                 since 80e3b66 "Upload python files", 2024-09-06)
#   license     : Apache License 2.0 (LICENSE file in the repo root)
#   paper       : Wang et al., "Con-ReCall: Detecting Pre-training Data in LLMs via
#                 Contrastive Decoding", COLING 2025 (arXiv 2409.03363)
#
# run.py is adapted from ruoyuxie/recall; get_ll / get_conditional_ll / get_all_prob are
# identical to the ReCaLL repo (see authors_recall.py for the token alignment). Three
# teacher-forced passes are needed: x alone, P_nonmember ++ x, P_member ++ x.
# Score: (LL(x|P_nm) - gamma * LL(x|P_m)) / LL(x); label 1 = member in roc_curve
# => HIGHER score = member. The code reports every gamma of a fixed grid (no selection).
import numpy as np


def get_all_prob(all_prob):  # changed: was get_all_prob(input_ids, loss, logits); receives the
    #                             precomputed log-probs of the NON-ignored labels
    all_prob = [float(p) for p in all_prob]  # changed: replaces the log_softmax/gather loop
    loss = -float(np.mean(all_prob))  # changed: HF loss = mean NLL over non-ignored labels
    ll = -loss  # changed: was -loss.item()
    ppl = float(np.exp(loss))  # changed: was torch.exp(loss).item()
    prob = float(np.exp(-loss))  # changed: was torch.exp(-loss).item()
    return prob, ll, ppl, all_prob, loss  # changed: loss already a float


def get_ll(token_log_probs):  # changed: was get_ll(sentence, model, tokenizer, device);
    #   token_log_probs: log p(x_t | x_<t), t = 1..N-1 (N-1 values; x_0 never scored)
    return get_all_prob(token_log_probs)  # changed: precomputed input


def get_conditional_ll(cond_token_log_probs):  # changed: was get_conditional_ll(input_text,
    #   target_text, model, tokenizer, device); cond_token_log_probs: log p(x_t | P, x_<t),
    #   t = 0..N-1 (N values), P = "".join(prefix shots), prefix labels = -100
    return get_all_prob(cond_token_log_probs)  # changed: precomputed input


GAMMAS = [0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]  # added: the literal list used in inference (note: no 0.4)


def inference(uncond_token_log_probs, nonmember_cond_token_log_probs,
              member_cond_token_log_probs, num_shots):  # changed: signature; was
    #   inference(model1, model2, tokenizer1, tokenizer2, target_data, nonmember_data_prefix,
    #   member_data_prefix, accelerator, num_shots, ex). Baselines omitted.
    pred = {}

    # unconditional log-likelihood
    ll = get_ll(uncond_token_log_probs)[1]  # changed: precomputed input

    if int(num_shots) != 0:
        # conditional log-likelihood with prefix
        ll_nonmember = get_conditional_ll(nonmember_cond_token_log_probs)[1]  # changed
        ll_member = get_conditional_ll(member_cond_token_log_probs)[1]  # changed
        for gamma in [0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]:
            pred[f"con-recall_{gamma}"] = (ll_nonmember - gamma * ll_member) / ll
        pred["recall"] = ll_nonmember / ll

    pred["ll"] = ll
    return pred  # changed: original stored pred in ex["pred"] and returned ex


if __name__ == "__main__":  # added: smoke test
    rng = np.random.default_rng(1)
    N = 7
    u = rng.normal(-2.0, 0.3, size=N - 1)
    cn = rng.normal(-2.4, 0.3, size=N)
    cm = rng.normal(-1.9, 0.3, size=N)
    pred = inference(u, cn, cm, num_shots=3)
    g = 0.5
    assert np.isclose(pred[f"con-recall_{g}"], (np.mean(cn) - g * np.mean(cm)) / np.mean(u))
    assert np.isclose(pred["recall"], np.mean(cn) / np.mean(u))
    print("authors_con_recall OK", pred)
