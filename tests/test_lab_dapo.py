"""Notebook 03's lab (gpolib/lab/dapo.py) and the DAPO pieces it rests on: the budget's truncation share,
Eq. 13 by hand, per-token weights of the two aggregations, dynamic sampling on a scripted trainer (no
zero-variance group is trained; the max_gen_batches cap), and the D1-D5 evidence from hand-made runs."""

import pytest
import torch

from gpolib import presets
from gpolib.baseline import GroupBaseline
from gpolib.collect import collect
from gpolib.lab import dapo, runs
from gpolib.rewards import soft_overlong_penalty
from gpolib.rollout import Rollout

# ---------------------------------------------------------------- the budget and Eq. 13


def test_truncation_at_a_shorter_budget_by_hand():
    lengths, truncated = [10, 50, 51, 192], [False, False, False, True]  # lengths count the EOS
    assert dapo.truncation_at(lengths, truncated, 50) == 0.5  # 51 and the unfinished one
    assert dapo.truncation_at(lengths, truncated, 10) == 0.75
    assert dapo.truncation_at(lengths, truncated, 192) == 0.25  # no EOS at all: truncated at any budget
    table = dapo.budget_table(lengths, truncated, [1, 1, 0, 0], budgets=(10, 50))
    assert table.loc[50].tolist() == [0.5, 0.5] and table.loc[10].tolist() == [0.75, 0.25]


def test_arms_share_the_budget_and_form_a_ladder():
    cfgs = runs.configs(dapo.ARMS, runs.budget(steps=3, prompts_per_step=4, group_size=4, eval_prompts=8,
                                                eval_samples=1, model="m", device="cpu", dtype="float32"))
    assert list(cfgs) == list(dapo.LADDER) == ["grpo", "overlong_filter", "clip_higher", "overlong", "token_mean", "dapo"]
    assert {(c.mu, c.max_new_tokens, c.steps, c.group_size) for c in cfgs.values()} == {(4, 144, 3, 4)}
    assert set(dapo.PARENT) == set(cfgs) - {"grpo"}  # every rung but the first builds on one other
    diffs = {b: sorted(runs.config_diff(cfgs[b], cfgs[a])) for b, a in dapo.PARENT.items()}
    assert diffs == {"overlong_filter": ["overlong"], "clip_higher": ["loss"], "overlong": ["overlong", "overlong_cache"],
                     "token_mean": ["loss"], "dapo": ["dynamic_sampling", "eval_every", "name"]}
    assert cfgs["overlong_filter"].overlong == "filter" and cfgs["overlong_filter"].loss == cfgs["grpo"].loss
    assert cfgs["grpo"].loss.surrogate.eps_high == 0.2 and cfgs["clip_higher"].loss.surrogate.eps_high == 0.28
    assert cfgs["overlong"].overlong_cache_len == 29 == round(0.2 * 144)  # DAPO's share 4096 / 20480
    assert cfgs["token_mean"].loss.aggregation == cfgs["dapo"].loss.aggregation == "token_mean"


@pytest.mark.parametrize("length,expected", [(0, 0.0), (115, 0.0), (116, -1 / 29), (130, -15 / 29),
                                             (143, -28 / 29), (144, -1.0), (145, -1.0)])
def test_eq13_by_hand_at_the_notebook_budget(length, expected):
    assert dapo.eq13_by_hand(length, 144, 29) == pytest.approx(expected, abs=1e-12)
    assert soft_overlong_penalty(length, 144, 29) == pytest.approx(expected, abs=1e-6)


def test_eq13_table_library_equals_hand():
    table = dapo.eq13_table(144, 29)
    assert table["|y|"].tolist() == [0, 114, 115, 116, 129, 143, 144, 145]
    assert table["abs err"].max() < 1e-6
    assert table["R_length (hand)"].tolist()[-2:] == [-1.0, -1.0]


# ---------------------------------------------------------------- D3: per-token weights


def test_weight_ratio_is_10_and_1():
    r = dapo.weight_ratio()
    assert r["seq_mean_token_mean"] == pytest.approx(10.0, abs=1e-9) and r["token_mean"] == pytest.approx(1.0, abs=1e-9)


def test_aggregation_weights_match_hand_formulas():
    lengths, rewards = [3, 7, 5, 5], [1.0, 0.0, 1.0, 1.0]  # two groups of G = 2
    w = dapo.aggregation_weights(lengths, rewards, 2)
    a = 0.5 / (0.5 ** 0.5 + 1e-4)  # (1 - mean) / (unbiased std sqrt(1/2) + 1e-4); the second group has A = 0
    seq = w[w.aggregation == "seq_mean_token_mean"]
    tok = w[w.aggregation == "token_mean"]
    assert seq["weight"].tolist() == pytest.approx([-a / (4 * 3), a / (4 * 7), 0.0, 0.0], rel=1e-6)
    assert tok["weight"].tolist() == pytest.approx([-a / 20, a / 20, 0.0, 0.0], rel=1e-6)
    assert w["spread"].max() == 0.0


# ---------------------------------------------------------------- D2: dynamic sampling on a scripted trainer


class ScriptedTrainer:
    """`collect`'s draw with scripted correctness per round: rounds[r] = list of groups of 0/1 (each of G)."""

    def __init__(self, cfg, rounds, lengths=None):
        self.cfg, self.rounds, self.lengths = cfg, rounds, lengths
        self.seen_rounds = []

    def draw(self, step, round_):
        tasks = self.sample_prompts(step, round_)
        ro = self.rollout(tasks, self.cfg.group_size)
        return (ro, *self.score(ro, tasks))

    def sample_prompts(self, step, round_):
        self.seen_rounds.append(round_)
        return [{"round": round_, "group": g} for g in range(self.cfg.prompts_per_step)]

    def rollout(self, tasks, G):
        r = tasks[0]["round"]
        correct = [c for grp in self.rounds[r] for c in grp]
        B = len(correct)
        lengths = self.lengths[r] if self.lengths else [4] * B
        T = max(lengths)
        mask = (torch.arange(T) < torch.tensor(lengths)[:, None]).long()
        ro = Rollout(torch.ones(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.long), mask.clone(), mask,
                     torch.zeros(B, T), torch.zeros(B, dtype=torch.bool), [f"r{r}-{i}" for i in range(B)],
                     torch.arange(B) // G)
        ro.correct = torch.tensor(correct, dtype=torch.float32)
        return ro

    def score(self, ro, tasks):
        rewards = ro.correct.clone()
        if self.cfg.overlong == "shaping":
            rewards = rewards + soft_overlong_penalty(ro.lengths, self.cfg.max_new_tokens, self.cfg.overlong_cache_len)
        return ro.correct, rewards


def _cfg(**kw):
    return presets.get("dapo", **{"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 16, "overlong": "none", **kw})


def test_dynamic_sampling_trains_no_zero_variance_group():
    rounds = [[[1, 1], [1, 0], [0, 0]],  # round 0: all-correct, mixed, all-wrong -> 1 informative group
              [[0, 1], [1, 1], [1, 0]]]  # round 1: 2 more -> the batch of 3 groups is full
    tr = ScriptedTrainer(_cfg(), rounds)
    batch = collect(tr.cfg, 0, tr.draw, 0, GroupBaseline(tr.cfg))
    s = batch.stats
    assert tr.seen_rounds == [0, 1]
    assert (s["gen/batches"], s["gen/samples"], s["groups/kept"]) == (2, 12, 3)
    assert s["groups/zero_var_trained"] == 0.0
    assert batch.rewards.view(3, 2).tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    assert bool((batch.advantages.view(3, 2).abs() > 0).all())  # every trained response carries a gradient
    # the step's group shares describe the first (fresh) round, before the filter
    assert (s["groups/all_correct"], s["groups/all_wrong"], s["groups/zero_var"]) == pytest.approx((1 / 3, 1 / 3, 2 / 3))


def test_without_dynamic_sampling_zero_variance_groups_are_trained():
    tr = ScriptedTrainer(_cfg(dynamic_sampling=False), [[[1, 1], [1, 0], [0, 0]]])
    batch = collect(tr.cfg, 0, tr.draw, 0, GroupBaseline(tr.cfg))
    assert (batch.stats["gen/batches"], batch.stats["groups/kept"]) == (1, 3)
    assert batch.stats["groups/zero_var_trained"] == pytest.approx(2 / 3)
    assert batch.advantages.view(3, 2)[[0, 2]].abs().max() == 0  # they carry no gradient


def test_dynamic_sampling_stops_at_max_gen_batches_with_a_smaller_batch():
    rounds = [[[1, 1], [1, 0], [0, 0]]] * 2  # one informative group per round
    tr = ScriptedTrainer(_cfg(max_gen_batches=2), rounds)
    batch = collect(tr.cfg, 0, tr.draw, 0, GroupBaseline(tr.cfg))
    assert (batch.stats["gen/batches"], batch.stats["gen/samples"], batch.stats["groups/kept"]) == (2, 12, 2)
    assert len(batch.rewards) == 4 and batch.stats["groups/zero_var_trained"] == 0.0


def test_under_shaping_equally_correct_answers_of_different_lengths_are_informative():
    # L_max 16, L_cache 8: a 15-token answer gets (8 - 15) / 8 = -0.875, a 4-token one 0
    cfg = _cfg(overlong="shaping", overlong_cache=8, max_gen_batches=1)
    tr = ScriptedTrainer(cfg, [[[1, 1], [1, 1], [0, 0]]], lengths=[[4, 15, 4, 4, 4, 4]])
    batch = collect(tr.cfg, 0, tr.draw, 0, GroupBaseline(tr.cfg))
    assert batch.stats["groups/kept"] == 1 and batch.rewards.tolist() == pytest.approx([1.0, 0.125])
    assert batch.stats["groups/all_correct"] == pytest.approx(2 / 3)  # by correctness
    assert batch.stats["groups/zero_var"] == pytest.approx(2 / 3)  # by shaped reward: the 2nd and 3rd group


# ---------------------------------------------------------------- reading runs


def test_group_shares_and_sampling_table():
    rows = [{"step": 0, "groups/all_correct": 0.25, "groups/all_wrong": 0.5, "groups/zero_var": 0.75,
             "groups/zero_var_trained": 0.0, "gen/batches": 3, "gen/samples": 96, "groups/kept": 3},
            {"step": 1, "groups/all_correct": 0.5, "groups/all_wrong": 0.0, "groups/zero_var": 0.5,
             "groups/zero_var_trained": 0.0, "gen/batches": 1, "gen/samples": 32, "groups/kept": 4}]
    g = dapo.group_shares(rows)
    assert g["mixed"].tolist() == [0.25, 0.5]
    t = dapo.sampling_table({"dapo/seed0": rows}, max_gen_batches=3).loc["dapo/seed0"]
    assert (t["gen batches / step"], t["samples / step"], t["steps at max_gen_batches"]) == (2.0, 64.0, 0.5)
    assert (t["groups trained / step"], t["steps with a zero-var group trained"]) == (3.5, 0)


def test_eval_at_samples_reads_the_last_evaluation_within_the_budget():
    metrics = [{"gen/samples": n} for n in (10, 20, 10, 20, 10, 20)]  # cumulative 10, 30, 40, 60, 70, 90
    assert dapo.cumulative_samples(metrics) == [0, 10, 30, 40, 60, 70, 90]
    summary = {"eval": [{"step": s, "acc/sample": s / 10} for s in (0, 2, 4, 6)]}
    assert dapo.eval_at_samples(summary, metrics, 60) == {"step": 4, "acc/sample": 0.4, "samples": 60}
    assert dapo.eval_at_samples(summary, metrics, 59)["step"] == 2
    assert dapo.eval_at_samples(summary, metrics, 90)["step"] == 6


def _fake_runs(seeds=(0, 1, 2), n=8):
    """Metrics and summaries of every arm and seed: values chosen so each evidence item has a hand value."""
    metrics, summaries = {}, {}
    for arm in dapo.ARMS:
        for s in seeds:
            rows = []
            for t in range(n):
                rows.append({"step": t, "entropy/mean": (0.5 if arm == "clip_higher" else 0.3) if t >= 6 else 1.0,
                             "clip/high_pi_old": 0.1 + 0.01 * s, "groups/all_correct": 0.1 if t < 2 else 0.4 if t >= 6 else 0.2,
                             "groups/zero_var_trained": 0.0, "gen/batches": 2 if arm == "dapo" else 1,
                             "gen/samples": 16 if arm == "dapo" else 8,
                             "trunc/frac": {"overlong": 0.02, "overlong_filter": 0.15}.get(arm, 0.1) if t >= 6 else 0.05,
                             "clip/high": 0.004, "clip/low": 0.001, "acc/mean": 0.5 if t >= 6 else 0.4,
                             "len/mean": 110.0 if arm == "overlong_filter" else 100.0, "groups/kept": 4})
            metrics[f"{arm}/seed{s}"] = rows
            acc = {a: 0.3 + 0.02 * i for i, a in enumerate(dapo.ARMS)}[arm] + 0.001 * s
            evals = [{"step": t, "acc/sample": acc * t / n, "trunc/frac": 0.06} for t in range(0, n + 1, 2)]
            summaries[f"{arm}/seed{s}"] = {"eval": evals, "eval_start": evals[0], "eval_end": evals[-1], "wall_s": 60.0}
    return metrics, summaries


def test_evidence_from_hand_made_runs():
    metrics, summaries = _fake_runs()
    e = dapo.d_evidence(metrics, summaries, range(3), samples_budget=8 * 8)
    assert e["entropy_high"] == [0.5] * 3 and e["entropy_base"] == [0.3] * 3  # last 25% of 8 steps = steps 6, 7
    assert e["all_correct_first"] == [0.1] * 3 and e["all_correct_last"] == [0.4] * 3
    assert e["pi_old_upclipped"] == pytest.approx([0.10, 0.11, 0.12])
    assert e["ds_clean_steps"] == [1.0] * 3 and e["gen_batches_per_step"] == [2.0] * 3
    assert e["trunc_with_shaping"] == [0.02] * 3 and e["trunc_without_shaping"] == [0.1] * 3
    assert e["trunc_base"] == [0.06] * 3
    # DAPO generates 16 per step: 64 samples are reached after step 4, its evaluation at step 4
    assert e["ds_eval_step"] == [4] * 3 and e["ds_eval_samples"] == [64] * 3
    assert e["ladder"]["dapo"] == pytest.approx([0.40 * 4 / 8 + 0.001 * s * 4 / 8 for s in range(3)])
    assert e["ladder_steps"]["dapo"] == pytest.approx([0.40 + 0.001 * s for s in range(3)])
    assert e["ladder"]["grpo"] == e["ladder_steps"]["grpo"]
    v = {cid: dapo.VERDICTS[cid]({**e, "eq13_exact": True, "base_entropy": 0.4}) for cid in ("D1", "D2", "D4", "D5")}
    # equal per-seed differences: a zero-width interval at the difference
    assert v["D1"].word == dapo.stats.REPRODUCED  # entropy +0.2; accuracy +0.02 (not worse)
    assert v["D2"].word == dapo.stats.NOT_RUN  # no fixed panel in these runs; no zero-variance group trained
    panel = {"panel_first": [0.1] * 3, "panel_last": [0.2] * 3, "panel_acc_rise": [0.05] * 3,
             "panel_predicted_rise": [0.08] * 3, "panel_steps": [0, 50, 100]}
    assert dapo.verdict_d2({**e, **panel, "panel_rise": [0.1, 0.1, 0.1]}).word == dapo.stats.REPRODUCED
    assert v["D4"].word == dapo.stats.REPRODUCED  # base truncates 6% >= 3%; shaping cuts 0.08
    assert "mean pi_old of up-clipped tokens 0.110" in v["D1"].text
    assert v["D5"].word == dapo.stats.NOT  # DAPO at half its steps: 0.20 < GRPO's 0.30
    assert "worst rung: dapo" in v["D5"].text
    # the filtering side arm is noted under D4: truncation 0.15 vs GRPO's 0.10, accuracy +0.02 in every seed
    assert e["trunc_with_filter"] == [0.15] * 3 and e["trunc_naive"] == [0.1] * 3
    assert "overlong filtering vs naive GRPO: truncation share over the last 20% of steps 0.1500 vs 0.1000" in v["D4"].text
    assert "filtering - naive GRPO: mean +0.020" in v["D4"].text


def test_what_we_saw_states_the_evidence_in_words():
    metrics, summaries = _fake_runs()
    e = dapo.d_evidence(metrics, summaries, range(3), samples_budget=8 * 8)
    words = {"D1": "w1", "D2": "w2", "D4": "w4", "D5": "w5"}
    text = "\n".join(dapo.what_we_saw(e, metrics, summaries, words, max_gen=3, l_max=144))
    assert "entropy over the last 25% of steps 0.3000 (GRPO) vs 0.5000 (Clip-Higher)" in text
    assert "0.400% of tokens were clipped above and 0.100% below" in text  # the rare-clip sentence follows
    assert "GRPO's all-correct share 0.10 (first 20% of steps) -> 0.40 (last 20%), a change of +0.30" in text
    assert "2.00 generation batches per step, hit max_gen_batches = 3 in 0% of steps" in text
    assert "D4 (w4): the base truncates 6.0%" in text and "10.0% of responses were truncated without and 2.0% with" in text
    assert "truncated share 15.0% vs 10.0% without it, mean length 110 vs 100 tokens" in text
    assert "D5 (w5): held-out accuracy 30.1 -> 32.1 -> 34.1 -> 36.1 -> 38.1 -> 20.1" in text  # DAPO read at step 4 of 8: 0.2005
    assert "total 18.0." in text  # 6 arms x 3 seeds x 1 min
    assert "fixed panel" not in text.split("D2 (w2)")[1].split("\n")[0]  # no panel: the batches lead
    e |= {"panel_steps": [0, 50, 100], "panel_first": [0.1] * 3, "panel_last": [0.2, 0.16, 0.24],
          "panel_rise": [0.1, 0.06, 0.14], "panel_acc_rise": [0.1] * 3, "panel_predicted_rise": [0.05] * 3}
    text = "\n".join(dapo.what_we_saw(e, metrics, summaries, words, max_gen=3, l_max=144))
    assert ("D2 (w2): on the fixed panel of training prompts (notebook 01's GRPO runs, steps [0, 50, 100]) the "
            "all-correct share went 0.100 -> 0.200, a rise of +0.100 (per seed +0.060 to +0.140); the panel's "
            "accuracy rose +0.100, and the share its per-prompt accuracies predict (mean p^8) rose +0.050.") in text


def test_d5_needs_every_rung_within_its_interval():
    good = {"grpo": [0.30, 0.31, 0.32], "clip_higher": [0.32, 0.33, 0.35], "overlong": [0.33, 0.35, 0.36],
            "token_mean": [0.35, 0.36, 0.38], "dapo": [0.40, 0.42, 0.41]}
    assert dapo.verdict_d5({"ladder": good}).word == dapo.stats.REPRODUCED
    drop = {**good, "overlong": [0.20, 0.21, 0.23]}  # a rung loses 12 points, interval below 0
    v = dapo.verdict_d5({"ladder": drop})
    assert v.word == dapo.stats.PARTLY and "worst rung: overlong" in v.text  # the gain holds, a rung loses
    steps = dict(dapo.step_intervals(good))
    assert list(steps) == ["clip_higher", "overlong", "token_mean", "dapo"]  # no filtering rung in `good`
    side = dict(dapo.step_intervals({**good, "overlong_filter": [0.36, 0.37, 0.38]}))
    assert side["overlong_filter"].mean == pytest.approx(0.06)  # against naive GRPO, its parent
    assert side["clip_higher"].mean == pytest.approx(steps["clip_higher"].mean)  # Clip-Higher too
    assert steps["dapo"].mean == pytest.approx((0.05 + 0.06 + 0.03) / 3)


def test_d3_is_an_identity():
    assert dapo.verdict_d3({"weight_ratio_seq_mean": 10.0, "weight_ratio_token_mean": 1.0})[0] == dapo.REPRODUCED
    assert dapo.verdict_d3({"weight_ratio_seq_mean": 10.0, "weight_ratio_token_mean": 1.000002})[0] == dapo.NOT


def test_clip_higher_keeps_the_gradient_of_a_token_between_1_2_and_1_28():
    from gpolib.config import LossConfig
    from gpolib.objectives import Clip, policy_loss

    old = torch.log(torch.tensor([[0.4]], dtype=torch.float64))  # (1, 1)
    grads = {}
    for eps_high in (0.2, 0.28):
        logps = (old + torch.log(torch.tensor(1.25, dtype=torch.float64))).requires_grad_(True)  # ratio 1.25
        cfg = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=eps_high), aggregation="token_mean")
        loss, _ = policy_loss(logps, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64), cfg)
        loss.backward()
        grads[eps_high] = float(logps.grad)
    assert grads[0.2] == 0.0  # clipped at 1.2: no gradient pushes the token further up
    assert grads[0.28] == pytest.approx(-1.25)  # d(-rho A)/d log pi = -rho A inside the wider range
