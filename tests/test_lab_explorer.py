"""The objectives explorer (notebook 90): its numbers against hand formulas of the papers' equations."""
import math

import matplotlib
import pytest
import torch

from gpolib.lab import explorer

matplotlib.use("Agg")


def test_surrogate_and_gradient_by_hand():
    # DAPO Eq. 8 with eps_low 0.2, eps_high 0.28: J = min(rA, clip(r, 0.8, 1.28) A), dJ/dr = A inside, 0 clipped
    df = explorer.surrogate_curves(0.2, 0.28, ratios=[0.7, 1.0, 1.3])
    assert df.A.tolist() == [1.0, 1.0, 1.0, -1.0, -1.0, -1.0]
    assert df.objective.tolist() == pytest.approx([0.7, 1.0, 1.28, -0.8, -1.0, -1.3], abs=1e-12)
    assert df.gradient.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0, -1.0, -1.0], abs=1e-12)
    assert not any(math.copysign(1, g) < 0 and g == 0 for g in df.gradient)  # no -0.0 printed


def test_advantages_under_each_scaling_by_hand():
    table = explorer.advantage_table(explorer.State(group_size=8, n_correct=2, other_correct=4))
    std_g = math.sqrt(8 / 7 * 0.25 * 0.75)  # unbiased std of the group: 2 of 8 correct
    std_b = math.sqrt(16 / 15 * (6 / 16) * (10 / 16))  # of the batch: 6 of 16
    assert table["group"].tolist() == pytest.approx([0.75 / (std_g + 1e-4)] * 2 + [-0.25 / (std_g + 1e-4)] * 6)
    assert table["batch"].tolist() == pytest.approx([0.75 / (std_b + 1e-4)] * 2 + [-0.25 / (std_b + 1e-4)] * 6)
    assert table["none"].tolist() == pytest.approx([0.75] * 2 + [-0.25] * 6)


def _weights(state):
    w = explorer.token_gradients(state)
    return {(a, r): sub for (a, r), sub in w.groupby(["aggregation", "response"])}


def test_weights_at_ratio_one_follow_each_normaliser():
    # ratio 1: clip inert, weight of token t of response i = A_i x (1/(G|o_i|) | 1/sum|o| | 1/(G L_max))
    s = explorer.State(group_size=4, n_correct=1, short_len=10, long_len=100, max_len=128, log_ratio_spread=0.0,
                       adv_scale="none")
    w = _weights(s)
    a_c, a_w, total = 0.75, -0.25, 10 + 3 * 100
    hand = {("seq_mean_token_mean", 10): a_c / 40, ("seq_mean_token_mean", 100): a_w / 400,
            ("token_mean", 10): a_c / total, ("token_mean", 100): a_w / total,
            ("seq_mean_token_sum_norm", 10): a_c / (4 * 128), ("seq_mean_token_sum_norm", 100): a_w / (4 * 128)}
    for (agg, resp), sub in w.items():
        n = 10 if resp == "short correct" else 100
        assert len(sub) == n
        assert sub.weight.tolist() == pytest.approx([hand[agg, n]] * n, rel=1e-12)


def test_token_level_weights_carry_the_ratio_and_the_clip():
    s = explorer.State(group_size=4, n_correct=2, short_len=6, long_len=20, log_ratio_spread=0.4)
    w = _weights(s)
    for resp, n in (("short correct", 6), ("long wrong", 20)):
        sub = w["seq_mean_token_mean", resp]
        a, r = float(sub.A.iloc[0]), torch.tensor(sub.ratio.tolist(), dtype=torch.float64)
        clipped = (r > 1.28) if a > 0 else (r < 0.8)  # the active side of the clip for this A's sign
        hand = torch.where(clipped, 0.0, r * a / (4 * n))  # d(r A)/dlog pi = r A, times 1/(G |o_i|)
        assert clipped.any()  # the spread is wide enough for both sides of the test
        assert sub.weight.tolist() == pytest.approx(hand.tolist(), rel=1e-12, abs=1e-15)


def test_sequence_level_weights_are_uniform_and_equal_gspo_token():
    s = explorer.State(ratio_level="sequence", log_ratio_spread=0.3, eps_low=0.5, eps_high=0.5)
    seq = explorer.token_gradients(s)
    tok = explorer.token_gradients(explorer.State(**{**s.__dict__, "ratio_level": "sequence_token"}))
    assert seq.weight.tolist() == pytest.approx(tok.weight.tolist(), rel=1e-12)  # GSPO Eq. 13-14
    spread = seq.groupby(["aggregation", "response"]).weight.agg(lambda x: x.max() - x.min())
    assert spread.max() < 1e-15  # s_i is one number per response: every token weighs the same


def test_missing_response_kind_and_figure_and_widgets():
    none_correct = explorer.token_gradients(explorer.State(n_correct=0))
    assert set(none_correct.response) == {"long wrong"}
    assert (none_correct.weight == 0).all()  # one group, all wrong: A = 0 under any scaling
    fig = explorer.draw(explorer.State())
    assert len(fig.axes) == 4
    box = explorer.app(explorer.State())
    assert len(box.children) == 2
    with pytest.raises(ValueError, match="not explorer fields"):
        explorer.state_of(EPS_LOW=0.2, PROFILE="smoke")
    assert explorer.state_of(EPS_LOW=0.1).eps_low == 0.1


def test_moving_a_control_redraws_that_state(monkeypatch):
    drawn = []
    monkeypatch.setattr(explorer, "draw", lambda state: drawn.append(state))
    ctl = explorer.controls(explorer.State())
    box = explorer.app(explorer.State())
    sliders = {w.description: w for col in box.children[0].children for w in col.children}
    assert set(sliders) == {c.description for c in ctl.values()}
    drawn.clear()
    sliders["eps_high"].value = 0.35
    sliders["aggregation"].value = "token_mean"
    sliders["group size"].value = 4  # correct counts follow G
    assert [s.eps_high for s in drawn] == [0.35, 0.35, 0.35]
    assert drawn[-1].aggregation == "token_mean" and drawn[-1].group_size == 4
    assert drawn[-1].n_correct <= 4 and sliders["correct"].max == 4
