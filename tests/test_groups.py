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


def test_adaptive_k_quartiles_from_the_running_record():
    # a running record spread evenly over [0, 1]: quartiles 0.25 / 0.5 / 0.75 (torch.quantile, linear)
    history = torch.linspace(0, 1, 101)
    batch = torch.tensor([0.6, 0.7, 0.8, 0.9])
    # against the record these prompts are medium (0.6, 0.7 in (0.5, 0.75]) and easy (0.8, 0.9 > 0.75)
    assert adaptive_k(batch, k_easy=4, group_size=16, history=history).tolist() == [6, 6, 4, 4]
    # against the batch alone (quartiles 0.675 / 0.75 / 0.825) the same prompts span all four buckets
    assert adaptive_k(batch, k_easy=4, group_size=16).tolist() == [8, 8, 6, 4]
    # fewer than 4 recorded means: the batch defines the quartiles
    assert adaptive_k(batch, k_easy=4, group_size=16, history=torch.tensor([0.0, 1.0])).tolist() == [8, 8, 6, 4]
    # a value equal to a quartile falls in the harder bucket (r <= q50: 8, q50 < r <= q75: 6, r > q75: k_easy)
    assert adaptive_k(torch.tensor([0.25, 0.5, 0.75, 0.76]), 4, 16, history).tolist() == [8, 8, 6, 4]
    # G = 8, k_easy = 2: the two hardest keep G/2 = 4, the next round(3) = 3, the easiest 2
    assert adaptive_k(torch.tensor([0.1, 0.4, 0.6, 0.9]), 2, 8, history).tolist() == [4, 4, 3, 2]


def test_adaptive_gfpo_in_collect_keeps_k_per_group_and_records_means():
    from gpolib import presets
    from gpolib.baseline import GroupBaseline
    from gpolib.collect import scored_batch
    from gpolib.rollout import Rollout

    G, n = 16, 4
    cfg = presets.get("gfpo", group_size=G, gfpo_k=4, gfpo_adaptive=True)
    correct_per_group = [1, 4, 10, 15]  # group means 1/16, 4/16, 10/16, 15/16
    correct = torch.tensor([float(j < c) for c in correct_per_group for j in range(G)])  # (64,)
    lengths = torch.arange(1, G * n + 1)  # (64,) all distinct
    T = int(lengths.max())
    mask = (torch.arange(T) < lengths[:, None]).long()  # (64, T)
    ro = Rollout(torch.zeros(G * n, 1, dtype=torch.long), torch.ones(G * n, 1, dtype=torch.long), mask.clone(), mask,
                 torch.zeros(G * n, T), torch.zeros(G * n, dtype=torch.bool), [""] * (G * n),
                 torch.arange(n).repeat_interleave(G))
    baseline = GroupBaseline(cfg)
    baseline.group_means = [0.0] * 8 + [1.0] * 8  # a record: half all-wrong, half all-correct
    batch = scored_batch(cfg, baseline, ro, correct, correct.clone(), {})
    # record after this batch (20 means): 8 x 0, 1/16, 4/16, 10/16, 15/16, 8 x 1; quartiles (linear) 0 / 7/16 / 1:
    # 1/16, 4/16 <= q50 keep 8; 10/16, 15/16 in (q50, q75] keep 6 (no mean exceeds q75 = 1)
    assert torch.bincount(batch.rollout.prompt_index, minlength=n).tolist() == [8, 8, 6, 6]
    assert baseline.group_means[-4:] == pytest.approx([c / G for c in correct_per_group])
    assert len(baseline.group_means) == 20
    # the kept rows of each group are its shortest (lengths rise with the row index inside a group)
    assert batch.rollout.lengths.tolist() == [*range(1, 9), *range(17, 25), *range(33, 39), *range(49, 55)]
