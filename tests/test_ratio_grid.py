"""S1's grid measures (gpolib.lab.ratio_grid) on hand-built per-token ratios, and the long-response panel's
recording (gpolib.lab.ratio_panel) on a tiny run."""
import math
import random

import numpy as np
import pandas as pd
import pytest

from gpolib import tasks
from gpolib.lab import ratio_grid, ratio_panel, ratio_prefix, ratio_runs


def _tok(rows, step=None, prompt=None, advantage=None, update=None):
    """save_tokens' layout (as load_tokens returns it) from a list of per-response log-ratio arrays."""
    lengths = np.array([len(r) for r in rows])
    n = len(rows)
    out = {"log_rho": np.concatenate(rows).astype(np.float32), "offsets": np.concatenate([[0], np.cumsum(lengths)]),
           "step": np.zeros(n, int) if step is None else np.asarray(step),
           "prompt": np.arange(n) if prompt is None else np.asarray(prompt),
           "advantage": np.zeros(n) if advantage is None else np.asarray(advantage, float), "length": lengths}
    if update is not None:
        out["update"] = np.asarray(update)
    return out


def test_leave_at_counts_only_responses_that_reach_L():
    """+0.004 per token: S(200) = 0.8 > log 2 (outside); +0.001: S(200) = 0.2 (inside); a 60-token response
    counts at L = 50 only (S(50) = 0.5 * 50 = 25 outside)."""
    tok = _tok([np.full(200, 0.004), np.full(200, 0.001), np.full(60, 0.5)])
    out = ratio_grid.leave_at(tok)
    assert out[200] == (0.5, 2)
    assert out[100] == (0.0, 2)  # 0.4 and 0.1, both inside [log 0.5, log 2]
    assert out[50] == (pytest.approx(1 / 3), 3)


def test_slope_of_a_square_root_walk_and_its_band_length():
    """Two prompts per step, each a pair +x / -x with x_t = c (sqrt t - sqrt(t-1)): S(L) = +-c sqrt(L), so the
    within-step pooled variance is V(L) = 4 c^2 L / 3 exactly, its slope 4c^2/3, and every prompt resample gives the
    same V: the interval is the estimate."""
    c = 0.05
    t = np.arange(1, 201)
    x = c * (np.sqrt(t) - np.sqrt(t - 1))
    tok = _tok([x, -x, x, -x], prompt=[0, 0, 1, 1])
    fit = ratio_grid.slope_boot(tok, n_boot=20)
    assert fit["slope"] == pytest.approx(4 * c ** 2 / 3, rel=1e-4)
    lo, hi = ratio_grid.band_interval(fit["boots"])
    assert lo == pytest.approx(hi) == pytest.approx(math.log(2) ** 2 / (4 * c ** 2 / 3), rel=1e-4)


def test_drift_by_sign_is_token_weighted():
    tok = _tok([np.array([0.1, 0.3]), np.array([0.2]), np.array([-0.4, -0.2, 0.0]), np.array([1.0])],
               advantage=[1.0, 0.5, -1.0, 0.0])
    out = ratio_grid.drift_by_sign(tok)
    assert out["A>0"] == (pytest.approx(0.2), 3)  # (0.1 + 0.3 + 0.2) / 3
    assert out["A<0"] == (pytest.approx(-0.2), 3)
    assert out["A=0"] == (pytest.approx(1.0), 1)


def test_geo_spread_is_the_pooled_sd_of_the_mean_log_ratio():
    """log s = 0.1 and 0.3 in step 0 (var 0.02), 0 and 0 in step 1: pooled var 0.02 / 2."""
    tok = _tok([np.full(4, 0.1), np.full(2, 0.3), np.zeros(3), np.zeros(5)], step=[0, 0, 1, 1])
    assert ratio_grid.geo_spread(tok) == pytest.approx(math.sqrt(0.01))


def test_collapse_needs_five_consecutive_steps_below_the_base():
    assert ratio_grid.collapsed([0.6, 0.4, 0.4, 0.4, 0.4, 0.4], 0.5)
    assert not ratio_grid.collapsed([0.4, 0.4, 0.4, 0.4, 0.6, 0.4, 0.4, 0.4, 0.4], 0.5)
    assert not ratio_grid.collapsed([0.5] * 10, 0.5)  # equal is not below


def test_at_update_selects_one_k():
    tok = _tok([np.array([0.1]), np.array([0.2, 0.3]), np.array([0.4])], update=[1, 2, 2])
    sub = ratio_grid.at_update(tok, 2)
    assert sub["length"].tolist() == [2, 1] and np.allclose(sub["log_rho"], [0.2, 0.3, 0.4])
    assert sub["offsets"].tolist() == [0, 2, 3]


def test_cells_regime_share_and_mu_slope():
    """V' = a mu^0.5 in every seed: the slope of log V' on log mu is 0.5 with a zero-width interval; the regime share
    is the largest out@200 among the cells that do not collapse."""
    measures, rewards = {}, {}
    for mu in (1, 4, 16):
        for s in range(3):
            measures[(mu, 1, s)] = {"V'": 1e-3 * (s + 1) * mu ** 0.5, "out@200": 0.01 * mu}
            rewards[(mu, 1, s)] = [0.5] + ([0.6] * 9 if mu < 16 else [0.1] * 9)  # mu = 16 collapses
    rewards[(1, 1, 0)] = [0.5] + [0.4] * 5 + [0.6] * 4  # one seed of mu = 1 does, its cell's mean not
    cells = ratio_grid.cell_table(measures, rewards, card=0.58)
    assert cells["collapsed"].tolist() == [False, False, True]
    assert cells["seeds collapsed"].tolist() == [1, 0, 3]
    assert cells["collapsed vs card"].tolist() == [True, False, True]  # (0.4 + 1.2) / 3 < 0.58 for 5 steps at mu 1
    assert cells["base reward"].tolist() == [0.5, 0.5, 0.5]
    assert cells.loc[1, "L*"] == pytest.approx(math.log(2) ** 2 / (2e-3 * 2))  # mean V' at mu 4: 2e-3 x 2
    assert ratio_grid.regime_share(cells) == (pytest.approx(0.04), (4, 1.0))
    fit = ratio_grid.mu_slope(measures, 1)
    assert fit["slope"] == pytest.approx(0.5) and fit["lo"] == pytest.approx(0.5) and fit["n"] == 3
    assert "No cell" in ratio_grid.regime_begins(cells)
    assert ratio_grid.regime_begins(cells, at_least=0.04) == ("The seed's regime (>= 4% of 200-token prefix products "
                                                              "outside [0.5, 2]) begins at mu = 4 at lr x 1.")


def test_panel_prompts_and_saved_updates():
    spec = ratio_panel.PanelSpec(prompts=5, samples=2, n_ops=12)
    first = ratio_panel.panel_tasks(spec)
    assert first == ratio_panel.panel_tasks(spec)  # deterministic from the seed
    assert len({t["prompt"] for t in first}) == 5
    assert all(t["prompt"].count("=") == 1 and sum(t["prompt"].count(o) for o in "+-*") == 12 for t in first)
    skip = ratio_panel.panel_tasks(spec, exclude={first[0]["prompt"]})
    assert first[0] not in skip and skip[:4] == first[1:]
    assert ratio_panel.saved_updates(1) == [1] and ratio_panel.saved_updates(16) == [1, 2, 4, 8, 16]
    assert ratio_panel.saved_updates(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError, match="samples"):
        ratio_panel.PanelSpec(samples=1)


def test_make_chain_draws_as_make_problem():
    a, b = random.Random(3), random.Random(3)
    assert [tasks.make_chain(a, 5) for _ in range(20)] == [tasks.make_problem(b, 5) for _ in range(20)]
    assert tasks.make_chain(random.Random(0), 30).n_ops == 30


def test_panel_run_leaves_training_alone_and_scores_after_each_update(tiny_cfg, tmp_path):
    """The panel is sampled under its own seed and only read: the RL batch's ratios equal those of a run without it
    (`ratio_decay.ratio_records`); the panel at k = mu is scored by the policy after the step's last update, and each
    saved k holds every panel response; the files are reused only while complete and of the same panel."""
    from gpolib.lab import ratio_decay
    from gpolib.train import Trainer

    cfg = tiny_cfg("grpo", mu=2, steps=2, prompts_per_step=2, group_size=4, max_new_tokens=32)
    spec = ratio_panel.PanelSpec(prompts=2, samples=2, n_ops=6, budget=40)
    rec = ratio_runs.cached_grid_run(cfg, tmp_path / "run", spec)
    df, _ = ratio_decay.ratio_records(Trainer(cfg), 2)
    pd.testing.assert_frame_equal(rec["ratios"], df, check_dtype=False, atol=1e-6)
    pan = rec["panel"]
    assert pd.Series(list(zip(pan["step"], pan["update"]))).value_counts().to_dict() == {
        (s, k): 4 for s in range(2) for k in (1, 2)}
    assert ratio_runs.panel_problem(tmp_path / "run", 2, 2, spec) is None
    assert "another panel" in ratio_runs.panel_problem(tmp_path / "run", 2, 2, ratio_panel.PanelSpec(prompts=3))
    assert ratio_runs.panel_problem(tmp_path / "run", 3, 2, spec) is not None  # a step missing
    assert rec["steps"]["step"].tolist() == [0, 1] and (rec["steps"]["clip/frac"] >= 0).all()


def test_update_hook_sees_each_optimiser_step(tiny_cfg):
    from gpolib.train import Trainer

    cfg = tiny_cfg("grpo", mu=3, steps=1, prompts_per_step=3, group_size=4, max_new_tokens=32)
    trainer = Trainer(cfg)
    batch = trainer.collect(0)
    seen = []
    out = trainer.update(batch, 0, after_minibatch=lambda k: seen.append((k, trainer.sched.last_epoch)))
    if out.get("update/skipped"):
        assert seen == []
    else:
        assert seen == [(1, 1), (2, 2), (3, 3)]


def test_prefetch_trains_a_grid_run_through_the_notebook_hook(tmp_path):
    """`gpolib.workbook.prefetch`'s worker trains a notebook-02 run with `ratio_decay.prefetch_train` (the folder's
    notebook has the hook) and leaves a complete folder of the notebook's panel behind."""
    from gpolib.workbook import prefetch

    params = dict(PROFILE="smoke", MODEL="data/models/tiny-qwen3", DEVICE="cpu", DTYPE="float32", STEPS=1,
                  PROMPTS_PER_STEP=2, GROUP=4, SEEDS=1, MUS=[2], LR_SCALES=[3], PANEL_PROMPTS=2, PANEL_SAMPLES=2,
                  PANEL_OPS=6, PANEL_BUDGET=24, N_BUCKETS=4)
    cfgs, dirs, spec = ratio_runs.notebook_plan(params)
    assert list(cfgs) == ["grpo-mu2-lr3x/seed0"] and cfgs["grpo-mu2-lr3x/seed0"].lr == pytest.approx(9e-4)
    assert ratio_runs.cell_of(cfgs["grpo-mu2-lr3x/seed0"]) == (2, 3.0)
    folder = tmp_path / "02_ratio_decay" / "run"
    label, secs, why = prefetch._train_one(("02 grpo-mu2-lr3x/seed0", cfgs["grpo-mu2-lr3x/seed0"], folder, params))
    assert why is None and (folder / "summary.json").exists()
    assert ratio_runs.panel_problem(folder, 1, 2, spec) is None


def test_cell_interval_averages_the_seeds_resampled_slopes():
    """Seed 0's resampled slopes 1e-3 and 3e-3, seed 1's 3e-3 and 5e-3: resample by resample the cell's are 2e-3
    and 4e-3, so its L* interval is (log 2)^2 / 4e-3 .. (log 2)^2 / 2e-3 (percentiles of two values: their ends)."""
    measures = {(4, 1, 0): {"V'": 2e-3, "V' boots": np.array([1e-3, 3e-3]), "out@200": 0.1},
                (4, 1, 1): {"V'": 4e-3, "V' boots": np.array([3e-3, 5e-3]), "out@200": 0.2}}
    cells = ratio_grid.cell_table(measures, {(4, 1, 0): [0.5] * 6, (4, 1, 1): [0.5] * 6})
    q = math.log(2) ** 2
    lo_slope, hi_slope = np.percentile([2e-3, 4e-3], [2.5, 97.5])
    assert cells.loc[0, "L*"] == pytest.approx(q / 3e-3)
    assert (cells.loc[0, "L* lo"], cells.loc[0, "L* hi"]) == (pytest.approx(q / hi_slope), pytest.approx(q / lo_slope))
    assert cells.loc[0, "out@200"] == pytest.approx(0.15)


def test_ratio_difference_with_an_earlier_run(tmp_path):
    df = pd.DataFrame({"step": [0, 0], "prompt": [0, 1], "length": [3, 4], "log_prod_rho": [0.1, -0.2],
                       "log_s": [0.03, -0.05], "advantage": [1.0, -1.0]})
    assert ratio_runs.ratio_difference(tmp_path / "none", df) is None
    df.assign(log_prod_rho=[0.1, -0.25]).to_csv(tmp_path / "ratios.csv", index=False)
    assert ratio_runs.ratio_difference(tmp_path, df) == pytest.approx(0.05)
    df.assign(length=[3, 5]).to_csv(tmp_path / "ratios.csv", index=False)
    assert ratio_runs.ratio_difference(tmp_path, df) == math.inf  # other responses


def test_run_measures_reads_the_panel_at_k_mu_and_the_batch_beside():
    """Panel after update 2 (= mu): +0.004 and +0.001 per token over 200 tokens (one product outside at L = 200);
    the k = 1 record (-0.5 per token) is not read. RL batch: +0.008 per token over 100 tokens (S(50) = 0.4 inside,
    S(100) = 0.8 outside) and 0 (inside)."""
    panel = _tok([np.full(200, 0.004), np.full(200, 0.001), np.full(200, -0.5)], prompt=[0, 1, 0], update=[2, 2, 1])
    batch = _tok([np.full(100, 0.008), np.zeros(100)], advantage=[1.0, -1.0])
    steps = pd.DataFrame({"clip/frac": [0.1, 0.3], "panel/acc": [0.0, 0.0]})
    m = ratio_grid.run_measures({"panel": panel, "tokens": batch, "steps": steps}, mu=2, n_boot=10)
    assert (m["out@200"], m["n@200"], m["out@50"]) == (0.5, 2, 0.0)
    assert (m["batch out@50"], m["batch out@100"]) == (0.0, 0.5)
    assert m["panel drift"] == pytest.approx(0.0025) and m["batch drift A>0"] == pytest.approx(0.008)
    assert m["batch drift A<0"] == 0.0 and m["clip"] == pytest.approx(0.2) and m["panel len"] == 200
