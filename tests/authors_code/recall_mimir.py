# Reference transcription of mimir's ReCaLL attack (for comparing against the authors' one).
#
#   source repo : https://github.com/iamgroot42/mimir
#   source file : mimir/attacks/recall.py  (ReCaLLAttack._attack, process_prefix,
#                 get_conditional_ll); mimir/models.py (Model.get_ll)
#   commit      : 1b6fd649eeeecc887275a2336c7da808ee58757d (2025-07-10; last change to
#                 recall.py is bdb3c06 "made requested changes", 2024-09-15)
#   license     : MIT (Copyright (c) 2023 Anshuman Suri)
#
# numpy only; model/tokenizer calls replaced by precomputed inputs ("# changed:" / "# added:").
#
# Sign: mimir's get_ll returns the mean NLL (positive) and get_conditional_ll returns the
# mean log-likelihood (negative), so recall_mimir = LL(x|P) / NLL(x) = -(authors' ratio).
# mimir treats LOWER scores as member (get_roc_metrics negates all scores), so
# -recall_mimir (= authors' score) HIGHER = member: same ranking as the authors when the
# sequence fits in one window.
import numpy as np


def get_ll(probs):  # changed: was Model.get_ll(self, text, tokens=None, probs=None); `probs` are
    #   the N-1 per-token log-probs returned by Model.get_probabilities (tokens 1..N-1, no BOS
    #   added, sliding window stride=max_length//2 when N > max_length)
    all_prob = probs
    return -np.mean(all_prob)


def mimir_chunk_layout(prefix_len, text_len, max_length):  # added: the index bookkeeping of
    #   ReCaLLAttack.get_conditional_ll, verbatim except tensors -> python lists.
    #   Returns a list of (begin_loc, end_loc, target_is_scored[list of bool over the chunk]).
    total_length = prefix_len + text_len
    out = []
    for i in range(0, total_length, max_length):
        begin_loc = i
        end_loc = min(i + max_length, total_length)
        target_ids = [True] * (end_loc - begin_loc)  # changed: True == "not -100"
        if begin_loc < prefix_len:
            prefix_overlap = min(prefix_len - begin_loc, max_length)
            for k in range(prefix_overlap):  # changed: target_ids[:, :prefix_overlap] = -100
                target_ids[k] = False
        if end_loc > total_length - text_len:
            target_overlap = min(end_loc - (total_length - text_len), max_length)
            for k in range(len(target_ids) - target_overlap, len(target_ids)):  # changed
                target_ids[k] = True  # (no-op in the original too: target_ids is a clone)
        if not any(target_ids):  # changed: torch.all(target_ids == -100)
            continue
        out.append((begin_loc, end_loc, target_ids))
    return out


def get_conditional_ll(chunks):  # changed: was get_conditional_ll(self, nonmember_prefix, text,
    #   num_shots, avg_length, tokens=None). `chunks` is a list, one entry per chunk of
    #   mimir_chunk_layout, of the log-probs that HF scores in that chunk, i.e. for every chunk
    #   position j >= 1 whose label is not -100: log p(ids[begin+j] | ids[begin:begin+j]).
    #   Each chunk is a SEPARATE forward pass with no context from earlier chunks.
    #   Each chunk entry is (chunk_token_log_probs, non_masked_tokens) where non_masked_tokens
    #   is mimir's count (target_ids != -100).sum(), which also counts chunk position 0.
    total_loss = 0
    total_tokens = 0
    for chunk_token_log_probs, non_masked_tokens in chunks:  # changed: loop over precomputed
        loss = -float(np.mean(chunk_token_log_probs))  # changed: outputs.loss of model(input_ids, labels=target_ids)
        if np.isnan(loss):
            continue
        total_loss += loss * non_masked_tokens
        total_tokens += non_masked_tokens

    average_loss = total_loss / total_tokens if total_tokens > 0 else 0
    return -average_loss


def _attack(probs, chunks):  # changed: was ReCaLLAttack._attack(self, document, probs, tokens=None, **kwargs)
    lls = get_ll(probs)  # changed: self.target_model.get_ll(document, probs=probs, tokens=tokens)
    ll_nonmember = get_conditional_ll(chunks)  # changed: precomputed
    recall = ll_nonmember / lls

    assert not np.isnan(recall)
    return recall


def process_prefix(prefix, avg_length, total_shots, token_counts, max_length, cached=None):
    # changed: signature; was process_prefix(self, prefix, avg_length, total_shots), using
    #   self.target_model.max_length (GPT-NeoX/Pythia: max_position_embeddings) and the
    #   tokenizer; the result is cached in self.prefix after the first call (`cached`).
    if cached is not None:
        # We only need to process the prefix once, after that we can just return
        return cached
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
    truncated_prefix = prefix[-max_shots:]
    return truncated_prefix


if __name__ == "__main__":  # added: smoke test
    rng = np.random.default_rng(0)
    N, P = 6, 4
    u = rng.normal(-2, 0.5, size=N - 1)
    c = rng.normal(-2.5, 0.5, size=N)
    # single chunk (P+N <= max_length): layout has one chunk whose non-masked count is N
    layout = mimir_chunk_layout(P, N, max_length=32)
    assert len(layout) == 1 and sum(layout[0][2]) == N
    s = _attack(u, [(c, N)])
    assert np.isclose(s, -(np.mean(c) / np.mean(u)))  # = -(authors' ReCaLL score)
    print("mimir_recall OK", s, mimir_chunk_layout(5, 7, max_length=4))
