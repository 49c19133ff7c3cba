# Reference transcription of mimir's DC-PDD attack (for comparing against the authors' one).
#
#   source repo : https://github.com/iamgroot42/mimir
#   source file : mimir/attacks/dc_pdd.py (DC_PDDAttack.__init__ smoothing, _fre_dis, _attack)
#   commit      : 1b6fd649eeeecc887275a2336c7da808ee58757d (2025-07-10; last change to
#                 dc_pdd.py is 704ca41 "Update dc_pdd.py", 2025-07-10)
#   license     : MIT (Copyright (c) 2023 Anshuman Suri)
#
# numpy only; torch/tokenizer/model calls replaced by precomputed inputs ("# changed:").
# Sign: returns beta = -mean(min(alpha, a)); mimir treats LOWER = member (it negates all
# scores before roc_curve), so mean(min(alpha, a)) HIGHER = member, same as the authors.
import numpy as np


def _fre_dis(fre_dis, ref_data_token_ids, max_tok=1024):  # changed: was _fre_dis(self, ref_data,
    #   max_tok); ref_data_token_ids[i] = tokenizer(text, truncation=True, max_length=max_tok).input_ids
    for input_ids in ref_data_token_ids:  # changed: tokenizer call precomputed
        input_ids = list(input_ids)[:max_tok]  # changed: truncation done by the tokenizer in source
        fre_dis[input_ids] += 1  # verbatim. NOTE: torch (and numpy) advanced-index `+=` with
        #   repeated indices increments each distinct index ONCE, so this counts the number of
        #   documents containing the token (document frequency), not total occurrences.
    return fre_dis  # added


def laplace(fre_dis):  # added: wraps the line in __init__ (len(fre_dis) = len(tokenizer), which
    #   includes the '[PAD]' token mimir adds to every tokenizer)
    fre_dis = (1 + fre_dis) / (np.sum(fre_dis) + len(fre_dis))  # changed: ch.sum -> np.sum
    return fre_dis  # added


def _attack(probs_with_start_token, tokens_og, fre_dis, a=0.01):  # changed: was
    #   _attack(self, document, probs, tokens=None, **kwargs).
    #   tokens_og = tokenizer(document).input_ids (1-D); probs_with_start_token = the N log-probs
    #   of tokens_og[0..N-1] from get_probabilities on [eos_token_id] + tokens_og, i.e. the first
    #   token IS scored (conditioned on EOS used as BOS). fre_dis = laplace(counts).
    # Hyper-params specific to DC-PDD
    # a: float = kwargs.get("a", 0.01)   (never passed by run.py -> always 0.01)
    x_pro = np.exp(np.asarray(probs_with_start_token, dtype=np.float64))

    indexes = []
    current_ids = []
    input_ids = np.asarray(tokens_og)  # changed: tokens_og[0] (torch tensor)
    for i, input_id in enumerate(input_ids):
        if input_id not in current_ids:
            indexes.append(i)
            current_ids.append(input_id)

    x_pro = x_pro[indexes]
    x_fre = fre_dis[input_ids[indexes]]  # changed: .numpy() dropped

    # Compute alpha values
    alpha = x_pro * np.log(1 / x_fre)

    # Compute membership score
    alpha[alpha > a] = a

    beta = - np.mean(alpha)

    return beta


if __name__ == "__main__":  # added: smoke test
    counts = _fre_dis(np.zeros(9), [[1, 2, 2, 3], [3, 3, 8], [0] * 5], max_tok=4)
    assert counts.tolist() == [1, 1, 1, 2, 0, 0, 0, 0, 1]  # document frequency, not 4,1,2,3,...
    f = laplace(counts)
    rng = np.random.default_rng(0)
    toks = [5, 1, 2, 1, 7, 2, 0]
    lp = np.log(rng.dirichlet(np.ones(9), size=len(toks))[np.arange(len(toks)), toks])
    print("mimir_dc_pdd OK", _attack(lp, toks, f))
