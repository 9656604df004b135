"""DAPO dynamic sampling and GFPO filtering."""
import pytest
import torch

from gpolib.groups import adaptive_k, gfpo_advantages, gfpo_keep, informative_groups


def test_dynamic_sampling_keeps_mixed_groups_only():
    r = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.5, 0.5, 0.5, 0.5])
    assert informative_groups(r, 4).tolist() == [False, False, True, False]


def test_gfpo_keeps_k_shortest():
    r = torch.tensor([1.0, 0, 1, 0, 1, 1, 0, 0])
    lengths = torch.tensor([30, 10, 20, 40, 5, 50, 5, 60])
    keep = gfpo_keep(r, lengths, 4, 2, "length")
    assert keep.tolist() == [False, True, True, False, True, False, True, False]
    assert keep.view(2, 4).sum(1).tolist() == [2, 2]


def test_gfpo_efficiency_ranking():
    r = torch.tensor([1.0, 1.0, 0.0, 1.0])
    lengths = torch.tensor([40, 10, 5, 20])  # efficiency 0.025, 0.1, 0, 0.05
    assert gfpo_keep(r, lengths, 4, 2, "efficiency").tolist() == [False, True, False, True]


def test_gfpo_advantages_over_kept_set_only():
    g = torch.Generator().manual_seed(0)
    r = torch.randint(0, 2, (64,), generator=g).float()
    r[0], r[1] = 1.0, 0.0
    lengths = torch.randint(5, 90, (64,), generator=g)
    keep = gfpo_keep(r, lengths, 16, 6, "length")
    adv = gfpo_advantages(r, keep, 16)
    assert torch.all(adv[~keep] == 0)
    assert keep.view(4, 16).sum(1).tolist() == [6, 6, 6, 6]
    for grp in range(4):
        sl = slice(16 * grp, 16 * grp + 16)
        kept_r = r[sl][keep[sl]]
        kept_a = adv[sl][keep[sl]]
        if kept_r.std() > 0:
            assert kept_a.mean().item() == pytest.approx(0.0, abs=1e-6)
            expected = (kept_r - kept_r.mean()) / (kept_r.std() + 1e-4)
            assert torch.allclose(kept_a, expected, atol=1e-6)


def test_gfpo_hand_example():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    keep = torch.tensor([True, True, False, False])
    adv = gfpo_advantages(r, keep, 4)
    s = torch.tensor([1.0, 0.0]).std().item()
    assert adv.tolist() == pytest.approx([0.5 / (s + 1e-4), -0.5 / (s + 1e-4), 0.0, 0.0], rel=1e-6)


def test_gfpo_bad_k():
    with pytest.raises(ValueError, match="k="):
        gfpo_keep(torch.zeros(8), torch.ones(8), 4, 5)


def test_adaptive_k_quartiles():
    means = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.9, 1.0])
    ks = adaptive_k(means, k_easy=4, group_size=16)
    assert ks.tolist() == [8, 8, 8, 8, 6, 6, 4, 4]
