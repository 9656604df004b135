"""Notebook 90, the objectives explorer: the three axes of `gpolib.objectives` on hand-made inputs.

What the sliders set is a `State`; from it `surrogate_curves` (the clipped surrogate and its gradient
against the ratio, DAPO Eq. 8), `advantage_table` (DeepSeekMath Eq. 3 under each scaling) and
`token_gradients` (per-token gradient weights under each aggregation, GRPO Eq. 3 / DAPO Eq. 8 / Dr. GRPO)
compute every number by calling `policy_loss`, `clipped_surrogate` and `group_advantages`, with
gradients by autograd; nothing here re-implements an objective. `draw` lays the four panels out,
`app` wires them to ipywidgets. Under papermill the notebook renders one static state.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from ..config import LossConfig
from ..objectives import Clip, clipped_surrogate, group_advantages, policy_loss
from ..validation import ADV_SCALES, AGGREGATIONS, RATIO_LEVELS  # noqa: F401  (AGGREGATIONS: re-exported)

LEVELS, SCALES = RATIO_LEVELS, ADV_SCALES
"""the allowed ratio levels and advantage scales (with AGGREGATIONS), read from `gpolib.validation` (one place)"""
RESPONSES = ("short correct", "long wrong")


@dataclass(frozen=True, kw_only=True)
class State:
    """One position of the explorer's controls."""

    eps_low: float = 0.2
    """lower clip range: r is clipped below at 1 - eps_low"""
    eps_high: float = 0.28
    """upper clip range: r is clipped above at 1 + eps_high (DAPO Clip-Higher)"""
    ratio_level: str = "token"
    """'token' | 'sequence' | 'sequence_token' (LossConfig.ratio_level)"""
    aggregation: str = "seq_mean_token_mean"
    """the aggregation drawn in bold among the three"""
    group_size: int = 8
    """G, responses in the group"""
    n_correct: int = 2
    """responses of the group with reward 1 (short); the others get 0 (long)"""
    other_correct: int = 4
    """correct responses of a second group of G in the batch (only the 'batch' scaling sees it)"""
    short_len: int = 8
    """|o_i| of a correct response"""
    long_len: int = 32
    """|o_i| of a wrong response"""
    max_len: int = 48
    """the generation budget L_max, Dr. GRPO's constant normaliser (at least long_len)"""
    log_ratio_spread: float = 0.25
    """amplitude of the tokens' log-ratios log r_t = spread * sin(0.9 t + 1.3 i)"""
    adv_scale: str = "group"
    """advantage scaling used for the gradient weights: 'group' | 'batch' | 'none'"""

    def loss(self, aggregation: str) -> LossConfig:
        """The LossConfig of this state under `aggregation` (Dr. GRPO's max_len: at least long_len)."""
        max_len = max(self.max_len, self.long_len) if aggregation == "seq_mean_token_sum_norm" else None
        return LossConfig(ratio_level=self.ratio_level, surrogate=Clip(eps_low=self.eps_low, eps_high=self.eps_high),
                          aggregation=aggregation, max_len=max_len)


def surrogate_curves(eps_low: float, eps_high: float, ratios=None, advantages=(1.0, -1.0)) -> pd.DataFrame:
    """J(r) = min(r A, clip(r, 1-eps_low, 1+eps_high) A) and dJ/dr for each A: rows (A, ratio, objective, gradient).

    Each point is a one-token response (every ratio level gives the same r there, GSPO Eq. 7); the
    gradient is autograd's through `policy_loss` with loss = -(1/N) sum_i J_i, so dJ_i/dr_i = -N dloss/dr_i.
    """
    ratios = np.linspace(0.5, 1.6, 221) if ratios is None else np.asarray(ratios, float)
    n, k = len(ratios), len(advantages)
    r = torch.tensor(np.tile(ratios, k), dtype=torch.float64, requires_grad=True)  # (N,)
    adv = torch.tensor(advantages, dtype=torch.float64).repeat_interleave(n)  # (N,)
    cfg = LossConfig(ratio_level="token", surrogate=Clip(eps_low=eps_low, eps_high=eps_high),
                     aggregation="seq_mean_token_sum_norm", max_len=1)
    ones = torch.ones(n * k, 1, dtype=torch.float64)  # (N, 1) mask: one token each
    loss, _ = policy_loss(torch.log(r).unsqueeze(1), torch.zeros_like(ones), adv, ones, cfg)
    (grad,) = torch.autograd.grad(loss, r)  # (N,)
    objective = clipped_surrogate(r.detach().unsqueeze(1), adv, eps_low, eps_high).squeeze(1)  # (N,)
    return pd.DataFrame({"A": adv.numpy(), "ratio": r.detach().numpy(), "objective": objective.numpy(),
                         "gradient": (-n * k * grad).numpy() + 0.0})  # + 0.0: no -0.0


def batch_rewards(state: State) -> torch.Tensor:
    """Rewards of the batch: the group (n_correct ones first), then the second group. (2G,)."""
    G = state.group_size
    one = [1.0] * state.n_correct + [0.0] * (G - state.n_correct)
    other = [1.0] * state.other_correct + [0.0] * (G - state.other_correct)
    return torch.tensor(one + other)  # (2G,)


def advantage_table(state: State) -> pd.DataFrame:
    """A_i of the group's members under each scaling (`group_advantages` on the two-group batch): rows member."""
    rewards, G = batch_rewards(state), state.group_size
    out = {s: group_advantages(rewards, G, s)[:G].numpy() for s in SCALES}  # (G,) each
    return pd.DataFrame({"reward": rewards[:G].numpy(), **out}, index=pd.RangeIndex(G, name="member"))


def group_batch(state: State) -> tuple:
    """The group as a batch: (logps, old_logps, mask, advantages, lengths); (G, T) with T = long_len.

    Correct members are short, wrong ones long; log r_{i,t} = spread * sin(0.9 t + 1.3 i) around pi_old.
    """
    G, T = state.group_size, max(state.short_len, state.long_len)
    rewards = batch_rewards(state)
    lengths = torch.tensor([state.short_len if r > 0 else state.long_len for r in rewards[:G]])  # (G,)
    mask = (torch.arange(T) < lengths[:, None]).double()  # (G, T)
    t, i = torch.arange(T, dtype=torch.float64), torch.arange(G, dtype=torch.float64)
    log_r = state.log_ratio_spread * torch.sin(0.9 * t[None, :] + 1.3 * i[:, None])  # (G, T)
    old = torch.full((G, T), -1.0, dtype=torch.float64)  # (G, T)
    adv = group_advantages(rewards, G, state.adv_scale)[:G].double()  # (G,)
    return (old + log_r).requires_grad_(), old, mask, adv, lengths


def token_gradients(state: State) -> pd.DataFrame:
    """dJ/dlog pi_theta(o_{i,t}) of the first correct and first wrong member under each aggregation.

    Rows (aggregation, response, t, ratio, weight); weight = -dloss/dlogp by autograd on `policy_loss`
    over the whole group, so B, sum |o_i| and the clip at the state's ratio level are all in it.
    """
    logps, old, mask, adv, lengths = group_batch(state)
    rewards = batch_rewards(state)[: state.group_size]
    picks = {"short correct": (rewards > 0).nonzero(), "long wrong": (rewards == 0).nonzero()}
    rows = []
    for agg in AGGREGATIONS:
        loss, _ = policy_loss(logps, old, adv, mask, state.loss(agg))
        (grad,) = torch.autograd.grad(loss, logps)  # (G, T)
        for name, idx in picks.items():
            if len(idx) == 0:
                continue
            i = int(idx[0])
            n = int(lengths[i])
            rows.append(pd.DataFrame({"aggregation": agg, "response": name, "t": np.arange(n),
                                      "ratio": torch.exp(logps - old)[i, :n].detach().numpy(),
                                      "weight": -grad[i, :n].numpy(), "A": float(adv[i])}))
    return pd.concat(rows, ignore_index=True)


def weight_summary(weights: pd.DataFrame) -> pd.DataFrame:
    """Per (aggregation, response): |o_i|, A, the mean per-token weight and their sum over the response."""
    g = weights.groupby(["aggregation", "response"], sort=False)
    return pd.DataFrame({"|o_i|": g.size(), "A": g["A"].first(), "mean weight": g["weight"].mean(),
                         "sum of weights": g["weight"].sum()})


# ---------------------------------------------------------------- drawing

def _draw_surrogate(ax_j, ax_g, state: State) -> None:
    curves = surrogate_curves(state.eps_low, state.eps_high)
    for (a, sub), colour in zip(curves.groupby("A", sort=False), ("#55A868", "#C44E52")):
        ax_j.plot(sub.ratio, sub.objective, color=colour, label=f"A = {a:+g}")
        ax_g.plot(sub.ratio, sub.gradient, color=colour, label=f"A = {a:+g}")
    for ax in (ax_j, ax_g):
        ax.axvspan(1 - state.eps_low, 1 + state.eps_high, color="0.9", zorder=0, label="clip range")
        ax.set_xlabel("ratio r")
        ax.legend(fontsize=8)
    ax_j.set(ylabel="J(r)", title="clipped surrogate min(rA, clip(r)A)")
    ax_g.set(ylabel="dJ/dr", title="its gradient (autograd)")


def _draw_advantages(ax, state: State) -> None:
    table = advantage_table(state).drop(columns="reward").reset_index()
    long = table.melt(id_vars="member", var_name="scale", value_name="A")
    sns.barplot(long, x="member", y="A", hue="scale", ax=ax)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_title(f"advantages: {state.n_correct}/{state.group_size} correct "
                 f"(batch: + a group with {state.other_correct})")
    ax.legend(fontsize=8, title="scale")


def _draw_weights(ax, state: State) -> None:
    w = token_gradients(state)
    colours = dict(zip(AGGREGATIONS, sns.color_palette("deep", 3)))
    for (agg, resp), sub in w.groupby(["aggregation", "response"], sort=False):
        bold = agg == state.aggregation
        ax.plot(sub.t, sub.weight, "-" if resp == RESPONSES[0] else "--", color=colours[agg],
                lw=2.4 if bold else 1.0, alpha=1.0 if bold else 0.6, label=f"{agg} · {resp}")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set(xlabel="token position t", ylabel="dJ / d log pi(o_t)",
           title=f"per-token gradient weights ({state.ratio_level} ratio, {state.adv_scale} scale)")
    ax.legend(fontsize=7)


def draw(state: State):
    """The four panels of a state: surrogate, its gradient, advantages, per-token gradient weights."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    _draw_surrogate(axes[0, 0], axes[0, 1], state)
    _draw_advantages(axes[1, 0], state)
    _draw_weights(axes[1, 1], state)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- widgets

def controls(state: State) -> dict:
    """One ipywidget per State field, starting at `state`'s values."""
    import ipywidgets as w

    G = state.group_size
    return {
        "eps_low": w.FloatSlider(value=state.eps_low, min=0.0, max=0.5, step=0.01, description="eps_low"),
        "eps_high": w.FloatSlider(value=state.eps_high, min=0.0, max=0.5, step=0.01, description="eps_high"),
        "ratio_level": w.Dropdown(options=LEVELS, value=state.ratio_level, description="ratio level"),
        "aggregation": w.Dropdown(options=AGGREGATIONS, value=state.aggregation, description="aggregation"),
        "adv_scale": w.Dropdown(options=SCALES, value=state.adv_scale, description="adv. scale"),
        "group_size": w.IntSlider(value=G, min=2, max=16, description="group size"),
        "n_correct": w.IntSlider(value=state.n_correct, min=0, max=G, description="correct"),
        "other_correct": w.IntSlider(value=state.other_correct, min=0, max=G, description="2nd group"),
        "short_len": w.IntSlider(value=state.short_len, min=1, max=64, description="|o| correct"),
        "long_len": w.IntSlider(value=state.long_len, min=1, max=128, description="|o| wrong"),
        "max_len": w.IntSlider(value=state.max_len, min=1, max=256, description="L_max (Dr.)"),
        "log_ratio_spread": w.FloatSlider(value=state.log_ratio_spread, min=0.0, max=1.0, step=0.05,
                                          description="log r spread"),
    }


def _show(**fields) -> None:
    fields["n_correct"] = min(fields["n_correct"], fields["group_size"])
    fields["other_correct"] = min(fields["other_correct"], fields["group_size"])
    draw(State(**fields))
    plt.show()


def app(state: State):
    """Controls and live figure: an ipywidgets box that redraws on every change."""
    import ipywidgets as w

    ctl = controls(state)

    def follow_group(change) -> None:  # the correct-counts cannot exceed G
        ctl["n_correct"].max = ctl["other_correct"].max = change["new"]

    ctl["group_size"].observe(follow_group, names="value")
    out = w.interactive_output(_show, ctl)
    boxes = [w.VBox(list(ctl.values())[i:i + 4]) for i in range(0, len(ctl), 4)]
    return w.VBox([w.HBox(boxes), out])


def state_of(**params) -> State:
    """A State from the notebook's parameters (names upper or lower case); unknown names raise."""
    names = {f.name for f in dataclasses.fields(State)}
    fields = {k.lower(): v for k, v in params.items()}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise ValueError(f"not explorer fields: {unknown}; allowed: {sorted(names)}")
    return State(**fields)
