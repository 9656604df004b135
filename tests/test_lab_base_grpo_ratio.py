"""Measurements of notebooks 00-02 (lab.base_models, lab.grpo, lab.ratio_decay) on inputs with known answers."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from gpolib.lab import base_models, grpo, ratio_decay
from gpolib.rollout import Rollout


def _rollout(lengths, texts, prompt_index, n_ops_task=None) -> Rollout:
    B, T = len(lengths), max(lengths)
    mask = (torch.arange(T) < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return Rollout(torch.ones(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.long),
                   torch.full((B, T), 5), mask, torch.zeros(B, T), torch.zeros(B, dtype=torch.bool),
                   texts, torch.tensor(prompt_index))


def test_sample_outcomes_and_group_mix():
    tasks = [{"prompt": "1+1=?\n", "answer": 2, "n_ops": 1}, {"prompt": "2*3=?\n", "answer": 6, "n_ops": 1},
             {"prompt": "9-1=?\n", "answer": 8, "n_ops": 1}]
    texts = ["A=2", "A=2", "A=5", "x", "A=8", "A=7"]
    df = base_models.sample_outcomes(_rollout([3, 3, 3, 1, 3, 3], texts, [0, 0, 1, 1, 2, 2]), tasks)
    assert df["correct"].tolist() == [1, 1, 0, 0, 1, 0]
    assert df["length"].tolist() == [3, 3, 3, 1, 3, 3]
    mix = base_models.group_outcomes(df)
    assert mix == pytest.approx({"all_correct": 1 / 3, "all_wrong": 1 / 3, "mixed": 1 / 3})


def test_curve_match_prefix():
    out = base_models.curve_match([1.0, 0.5, 0.25], [1.0, 0.5, 0.2, 0.1])
    assert out["steps_compared"] == 3 and out["max_abs_diff"] == pytest.approx(0.05)


def test_a_rebuild_is_reused_only_for_the_same_recipe_and_threads():
    from gpolib.pretrain import PretrainConfig

    cfg = PretrainConfig(arch="moe-fine", steps=20, micro_batches=4, out="runs/rebuild-moe-fine")
    log = {"config": {"arch": "moe-fine", "steps": 20, "micro_batches": 4, "out": "elsewhere"}, "torch_threads": 2}
    assert base_models._same_recipe(log, cfg, threads=2)  # `out` aside, the same recipe
    assert not base_models._same_recipe(log, cfg, threads=1)
    older = {**log, "config": {"arch": "moe-fine", "steps": 20}}  # made before micro-batches: the default, 1
    assert not base_models._same_recipe(older, cfg, threads=2)
    assert base_models._same_recipe(older, PretrainConfig(arch="moe-fine", steps=20), threads=2)


def test_advantage_table_one_correct_of_four():
    df = grpo.advantage_table(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), 4)
    # group 0: mean 1/4, unbiased std 1/2 -> A = (1 - 1/4) / (1/2 + 1e-4)
    assert df["A (group)"][0] == pytest.approx(0.75 / (0.5 + 1e-4))
    assert df["A (none)"].tolist()[:4] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert (df["A (group)"][4:] == 0).all() and df["group"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_kl_check_recovers_exact_kl():
    out = grpo.kl_check(vocab=12, n=100_000, seed=0)
    assert out["k3_rel_err"] < 0.02 and out["k3_min"] >= 0
    assert out["k1_min"] < 0  # the naive estimator goes negative
    assert out["k3_var"] < out["k1_var"]


def test_kl_samples_exact_value():
    logp = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))
    ref = torch.log(torch.tensor([0.25, 0.75], dtype=torch.float64))
    exact = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert grpo.kl_samples(logp, ref, 10)["exact"] == pytest.approx(exact)


def _synthetic_ratios(n_per_len=400, lengths=(10, 20, 30, 40), sigma=0.1, seed=0) -> pd.DataFrame:
    """Token log-ratios iid N(0, sigma^2): Var[log prod rho] = L sigma^2, Var[log s] = sigma^2 / L."""
    rng = np.random.default_rng(seed)
    rows = []
    for L in lengths:
        tok = rng.normal(0, sigma, size=(n_per_len, L))
        rows.append(pd.DataFrame({"length": L, "log_prod_rho": tok.sum(1), "log_s": tok.mean(1)}))
    return pd.concat(rows, ignore_index=True)


def test_bucket_stats_known_variance():
    df = _synthetic_ratios()
    b = ratio_decay.bucket_stats(df, 4)
    assert b["len_mean"].tolist() == [10, 20, 30, 40] and b["n"].tolist() == [400] * 4
    np.testing.assert_allclose(b["var_log_prod_rho"], [0.1, 0.2, 0.3, 0.4], rtol=0.15)
    np.testing.assert_allclose(b["var_log_s"], [1e-3, 5e-4, 1e-3 / 3, 2.5e-4], rtol=0.15)


def test_extreme_share_top_bucket():
    df = pd.DataFrame({"length": [1, 2, 3, 4], "log_prod_rho": [0.0, 0.0, math.log(0.1), math.log(2.0)]})
    out = ratio_decay.extreme_share(df, 2)
    assert out == {"n": 2, "min_length": 3, "share": 0.5}


def test_ratio_records_on_tiny_run(tiny_cfg):
    from gpolib.train import Trainer

    cfg = tiny_cfg("grpo", mu=2, steps=1, prompts_per_step=2, group_size=4, max_new_tokens=32)
    df, tok = ratio_decay.ratio_records(Trainer(cfg), 1)
    assert list(df.columns) == ["step", "prompt", "length", "log_prod_rho", "log_s", "advantage"]
    twin = Trainer(cfg)  # same seed, not yet updated: step 0 collects the same rollout (seeded by the step)
    assert df["length"].tolist() == twin.collect(0).rollout.lengths.tolist()
    np.testing.assert_allclose(df["log_s"] * df["length"], df["log_prod_rho"], atol=1e-5)
    assert df["prompt"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # groups of G = 4
    # the per-token file: one slice per response, its length the response's, its sum the product's log
    assert tok["length"].tolist() == df["length"].tolist()
    sums = [tok["log_rho"][a:b].sum() for a, b in zip(tok["offsets"][:-1], tok["offsets"][1:])]
    np.testing.assert_allclose(sums, df["log_prod_rho"], atol=1e-5)


def test_expert_load_rows_sum_to_one():
    from gpolib.models import EMBEDDED, load_policy

    model, tok = load_policy(EMBEDDED["moe"], lora_r=0)
    ro = _rollout([3, 2], ["A=1", "A="], [0, 0])
    load = base_models.expert_load(model, ro)
    assert load.shape == (model.config.num_hidden_layers, model.config.num_experts)
    np.testing.assert_allclose(load.sum(1), 1.0, atol=1e-6)


def test_robust_spread_by_hand():
    """Two buckets of 100: the second has one outlier; its variance jumps, its IQR does not, and the top 1% (the
    outlier) carries the share of the variance computed by hand."""
    import numpy as np
    import pandas as pd

    from gpolib.lab.ratio_decay import robust_spread

    base = np.linspace(-0.1, 0.1, 100)
    x2 = base.copy()
    x2[-1] = 3.0
    df = pd.DataFrame({"length": np.r_[np.full(100, 10), np.full(100, 50)], "log_prod_rho": np.r_[base, x2]})
    out = robust_spread(df, 2)
    assert out["len_mean"].tolist() == [10, 50]
    assert abs(out.loc[0, "var"] - base.var(ddof=1)) < 1e-12 and abs(out.loc[1, "var"] - x2.var(ddof=1)) < 1e-12
    assert abs(out.loc[0, "IQR"] - out.loc[1, "IQR"]) < 0.01  # the outlier does not move the IQR much
    dev2 = (x2 - x2.mean()) ** 2
    assert abs(out.loc[1, "var share of top 1%"] - dev2.max() / dev2.sum()) < 1e-12
    trimmed = x2[(x2 >= np.quantile(x2, 0.01)) & (x2 <= np.quantile(x2, 0.99))]
    assert abs(out.loc[1, "var trimmed 1%"] - trimmed.var(ddof=1)) < 1e-12
