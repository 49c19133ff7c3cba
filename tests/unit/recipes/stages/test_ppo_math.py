"""PPO's pieces (recipes/stages/ppo.py) on hand-computed tensors: completion mask, KL-shaped rewards, GAE, losses."""

import pytest

torch = pytest.importorskip("torch")

from memlens.recipes.stages import ppo  # noqa: E402

EOS = 1


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def close(tensor, rows, abs=1e-6):
    """Elementwise tensor == nested list (pytest.approx does not nest)."""
    return tensor.flatten().tolist() == pytest.approx([x for row in rows for x in row], abs=abs)


def test_completion_mask_keeps_the_first_eos_and_whole_truncated_rows():
    ids = torch.tensor([[5, 6, EOS, 0, 0],      # finished: EOS is real, generate's padding is not
                        [5, 6, 7, 8, 9],        # cut at max_completion_length: every token is real
                        [EOS, EOS, EOS, EOS, EOS]])  # pad == eos (public models): only the first counts
    assert ppo.completion_mask(ids, EOS).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_completion_mask_ends_at_the_first_of_several_stop_tokens():
    sep = 9                                     # a family's file separator beside EOS (harness.text.fim.stop_tokens)
    ids = torch.tensor([[5, sep, 6, EOS, 0], [5, 6, EOS, sep, 0], [5, 6, 7, 8, 4]])
    assert ppo.completion_mask(ids, [EOS, sep]).tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]


def test_kl_reward_sign_placement_and_score_on_the_last_real_token():
    # Row 0 has 3 real tokens, row 1 all 4: the score goes to index 2 and 3, never to the padding.
    logp = t([[-1.0, -2.0, -0.5, -9.0], [-1.0, -1.0, -1.0, -1.0]])
    ref = t([[-1.5, -1.0, -0.5, -0.1], [-1.0, -2.0, -1.0, -0.5]])
    mask = t([[1, 1, 1, 0], [1, 1, 1, 1]])
    rewards = ppo.kl_shaped_rewards(logp, ref, t([10.0, 20.0]), mask, alpha=0.1)
    # r_t = -0.1 (logp - ref): token more likely under π than π_ref (logp > ref) is penalised (< 0).
    # row 0: -0.1*(0.5), -0.1*(-1.0), -0.1*0 + 10, padding 0
    # row 1: 0, -0.1*(1.0), 0, -0.1*(-0.5) + 20
    assert close(rewards, [[-0.05, 0.1, 10.0, 0.0], [0.0, -0.1, 0.0, 20.05]])


def test_gae_on_a_four_token_hand_example():
    # γ = 1, λ = 0.5, one episode of 4 tokens, score 1 at the end, values V = (0.5, 0.4, 0.3, 0.2), V_4 = 0:
    #   δ3 = 1 + 0   - 0.2 =  0.8   A3 =  0.8
    #   δ2 = 0 + 0.2 - 0.3 = -0.1   A2 = -0.1 + 0.5 * 0.8   =  0.3
    #   δ1 = 0 + 0.3 - 0.4 = -0.1   A1 = -0.1 + 0.5 * 0.3   =  0.05
    #   δ0 = 0 + 0.4 - 0.5 = -0.1   A0 = -0.1 + 0.5 * 0.05  = -0.075
    #   returns = A + V = (0.425, 0.45, 0.6, 1.0)
    # Row 1 ends after 3 tokens (score 1 at index 2); its padded value 9.9 and reward 5 must not leak in:
    #   δ2 = 1 - 0.3 = 0.7  A2 = 0.7;  A1 = -0.1 + 0.35 = 0.25;  A0 = -0.1 + 0.125 = 0.025;  A3 = 0
    rewards = t([[0, 0, 0, 1], [0, 0, 1, 5]])
    values = t([[0.5, 0.4, 0.3, 0.2], [0.5, 0.4, 0.3, 9.9]])
    mask = t([[1, 1, 1, 1], [1, 1, 1, 0]])
    adv, ret = ppo.gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert close(adv, [[-0.075, 0.05, 0.3, 0.8], [0.025, 0.25, 0.7, 0.0]])
    assert close(ret, [[0.425, 0.45, 0.6, 1.0], [0.525, 0.65, 1.0, 0.0]])


def test_gae_discounts_by_gamma():
    # γ = 0.5, λ = 1, V = 0: A_t = 0.5^(3-t) * 1 = (0.125, 0.25, 0.5, 1)
    adv, _ = ppo.gae(t([[0, 0, 0, 1]]), t([[0, 0, 0, 0]]), t([[1, 1, 1, 1]]), gamma=0.5, lam=1.0)
    assert close(adv, [[0.125, 0.25, 0.5, 1.0]])


def test_whiten_uses_only_real_tokens():
    x, mask = t([[1.0, 3.0, 100.0]]), t([[1, 1, 0]])
    assert close(ppo.whiten(x, mask), [[-1.0, 1.0, 0.0]], abs=1e-4)


def test_losses_at_ratio_one_have_no_clipping_and_no_kl():
    logp, adv, mask = t([[-1.0, -2.0, -3.0]]), t([[1.0, -1.0, 2.0]]), t([[1, 1, 0]])
    values, returns = t([[0.0, 0.0, 0.0]]), t([[1.0, 2.0, 0.0]])
    out = ppo.ppo_losses(logp, logp, adv, values, values, returns, mask, clip_range=0.2, value_clip=0.2)
    assert out["clipfrac"].item() == 0 and out["approx_kl"].item() == 0
    assert out["policy_loss"].item() == pytest.approx(-(1.0 - 1.0) / 2)   # -mean(A · 1) over real tokens
    assert out["value_loss"].item() == pytest.approx(0.5 * (1 + 4) / 2)


def test_clipped_surrogate_stops_the_gain_beyond_the_clip():
    # A = 1 and ratio e^0.5 ≈ 1.65 > 1.2: the objective is capped at 1.2 A, clipfrac 1
    old, new = t([[-1.0]]), t([[-0.5]])
    out = ppo.ppo_losses(new, old, t([[1.0]]), t([[0.0]]), t([[0.0]]), t([[0.0]]), t([[1]]), 0.2, 0.2)
    assert out["policy_loss"].item() == pytest.approx(-1.2) and out["clipfrac"].item() == 1
    # the value moved 1.0 from 0 towards a return of 2; the clipped prediction 0.2 is further: max wins
    out = ppo.ppo_losses(old, old, t([[0.0]]), t([[1.0]]), t([[0.0]]), t([[2.0]]), t([[1]]), 0.2, 0.2)
    assert out["value_loss"].item() == pytest.approx(0.5 * 1.8 ** 2)


def test_adaptive_kl_controller_follows_ziegler_et_al():
    ctl = ppo.AdaptiveKLController(0.1, target_kl=6.0, horizon=100)
    ctl.update(kl=12.0, n_samples=10)          # e = clip(12/6 - 1) = 0.2: α *= 1 + 0.2 * 10/100
    assert ctl.alpha == pytest.approx(0.102)
    fixed = ppo.AdaptiveKLController(0.1, target_kl=None, horizon=100)
    fixed.update(kl=12.0, n_samples=10)
    assert fixed.alpha == 0.1
