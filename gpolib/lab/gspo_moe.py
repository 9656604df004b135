"""Notebook 08, GSPO on the mixture-of-experts policy (Zheng et al., 2025, Sec. 5.3-5.4): claims P3, P4, P5.

- the training arms on the fine-grained MoE (and one on the 8-expert MoE, `COARSE`) in one dict, `ARMS`;
- P3, the paper's measure as the trainer logs it at every optimiser step (`moe/expert_change/l{i}`, the share of
  activated experts that differ from pi_old's): per run and layer `layer_means`, per arm `arm_layers`, the
  evidence `p3_evidence`, the table and figure `expert_change_table`, `expert_change_figure`; P4's condition,
  `no_replay_change`;
- P4 and P5: per-run instability signs, `run_table`; per-seed evidence, `p4_evidence`, `p5_evidence`;
- P5, engine vs trainer likelihoods of one rollout batch, `engine_mismatch`, measured once and kept in the
  run folder by `run_engine_mismatch` (the distributions of
  `gspo.token_mismatch` and `gspo.sequence_mismatch`) and the share of sequences GSPO's clip range would clip
  before any update, `clipped_by_mismatch`;
- the verdicts: `verdict_p3` (thresholds of claims.yaml), `verdict_p4`, `verdict_p5` (rules of evidence, `stats`).
The measurement helpers shared with notebook 04 (`mismatch_stats`, ...) live in `gspo.py`; derivations live in
notebook 08.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import torch

from ..folders import write_bytes
from ..models import EMBEDDED
from . import collapse, stats
from .base_models import card
from .gspo import clip_share, final_mean, mismatch_stats, sequence_mismatch, token_mismatch
from .moe_grid import P4_LABELS
from .runs import arm_of, end_accuracy, max_over, mean_over, run_key

ENGINE = {"rollout_autocast": "bfloat16"}
"""the rollout engine of every arm: sampling under bf16 autocast (the decoder's matmuls and KV cache in bf16) while
the trainer computes in float32, so the engine's and the trainer's log-probs genuinely differ, as between vLLM and
the training framework (Sec. 5.4)"""
MOE_TRAINING = {"mu": 4, "train_router": True, **ENGINE}
"""shared by every arm: the paper's several minibatch updates per rollout batch (mu = 4, Sec. 5.1), the router
trained (its weight in full, beside LoRA), so that the update can move the routing directly"""
COARSE = EMBEDDED["moe"]
"""the 8-expert, top-2, 4-layer embedded MoE: P3's measure on it is shown beside the fine-grained model's"""
ARMS = {
    "grpo": {"preset": "grpo", "loss_eps_high": 0.28, **MOE_TRAINING},
    "grpo_replay": {"preset": "grpo", "loss_eps_high": 0.28, "routing_replay": True, **MOE_TRAINING},
    "gspo": {"preset": "gspo", **MOE_TRAINING},
    "gspo_engine": {"preset": "gspo", "old_logps": "engine", **MOE_TRAINING},
    "grpo_frozen": {"preset": "grpo", "loss_eps_high": 0.28, **MOE_TRAINING, "train_router": False},
    "grpo_coarse": {"preset": "grpo", "loss_eps_high": 0.28, **MOE_TRAINING, "model": COARSE},
}
"""P3: GRPO (Clip-Higher 0.2 / 0.28, as in notebook 04) with the router trainable, its measure logged at every
update (`moe/expert_change`), beside the same arm with the router frozen and on the 8-expert MoE (`COARSE`);
P4: GRPO without and with Routing Replay, GSPO (3e-4 / 4e-4) without it; P5: GSPO with the engine's sampling
log-probs as pi_old against `gspo` (pi_old recomputed by the trainer), the two differing in that field only. All
but `grpo_coarse` on the notebook's MODEL, the fine-grained embedded MoE."""
P3_ARM = "grpo"
"""the arm P3 judges: GRPO without replay, router trainable"""
P3_BESIDE = {"router trainable": "grpo", "router frozen": "grpo_frozen", "8-expert MoE": "grpo_coarse",
             "GRPO + replay": "grpo_replay", "GSPO": "gspo", "GSPO, engine pi_old": "gspo_engine"}
"""label -> arm whose per-layer measure notebook 08 draws"""
NO_REPLAY = ("grpo", "gspo")
"""P4's runs without Routing Replay, whose measure is P4's condition"""
P4_REPLAY = stats.Greater("held-out accuracy (T = 1), GRPO + replay - GRPO", "accuracy")
P4_GSPO = stats.NotWorse("held-out accuracy (T = 1), GSPO - GRPO + replay")
P4_ROUTING = stats.AtLeast("share of activated experts that change per update (P3's measure, mean over layers)",
                           at_least=0.02, fmt=".2%")
"""P4's condition: without routing that changes there is nothing for Routing Replay to fix"""
LOAD_BALANCE = stats.AtLeast("lowest expert's share of routed held-out tokens / uniform share 1/E, per layer (model "
                             "card)", at_least=0.25, every=True, fmt=".2f")
"""P3 and P4's premise at our scale (DESIGN): every expert carries >= 0.25 x its uniform share in every layer"""
P4_RULE = stats.AllOf(parts=(P4_REPLAY, P4_GSPO), conditions=(LOAD_BALANCE, P4_ROUTING))
"""P4: GRPO with Routing Replay beats GRPO without it, and GSPO without replay is not worse than GRPO with it"""
P5_ACC = stats.NotWorse("held-out accuracy (T = 1), GSPO engine pi_old - GSPO recomputed pi_old")
P5_MISMATCH = stats.AtLeast("mean token-level / mean sequence-level |log ratio| engine vs trainer", at_least=1.0,
                            fmt=".2f")
P5_RULE = stats.AllOf(parts=(P5_ACC,), checks=(P5_MISMATCH,))
"""P5: engine log-probs as pi_old are not worse than recomputed ones (the empirical part); the sequence-level
mismatch below the token-level mismatch is a check (a mean of a sequence's token log ratios is at most the mean of
their absolute values, so it holds by construction)"""
RULES = {"P4": P4_RULE, "P5": P5_RULE}
"""claim id -> the rule that judges it and writes its criterion"""
P4_ARMS = {"p4_grpo": {"preset": "grpo", "loss_eps_high": 0.28},
           "p4_grpo_replay": {"preset": "grpo", "loss_eps_high": 0.28, "routing_replay": True},
           "p4_gspo": {"preset": "gspo"},
           "p4_sapo": {"preset": "sapo"}}
"""P4 at its operating point (DESIGN: the grid cell chosen by `moe_grid.operating_point`, written into full.yaml as
P4_CELL before these runs): GRPO (Clip-Higher 0.2 / 0.28, as the grid) without and with Routing Replay, GSPO without
it, SAPO beside (C5); each takes the cell's model, training mode, lr, mu, engine and no warm-up, and trains on the
RL split with the notebook's held-out evaluation"""
P4_KEYS = {"grpo": "p4_grpo", "grpo_replay": "p4_grpo_replay", "gspo": "p4_gspo", "sapo": "p4_sapo"}
"""P4's evidence keys -> the arms at the operating point"""
DEFAULT_P4_KEYS = {"grpo": "grpo", "grpo_replay": "grpo_replay", "gspo": "gspo"}
"""the same at the default cell (the fine MoE, lr 3e-4, mu 4): P4's runs before the grid, reported beside"""
_CELL_ONLY = ("preset", "loss_eps_high", "task_train", "eval_prompts", "eval_samples", "expert_change", "steps")
"""a grid cell's fields that P4's runs do not take from it (objective, split, evaluation, measure's mode, length)"""


# ---------------------------------------------------------------- P3: the paper's measure, logged at every update

def one_seed_arms(params: dict) -> dict:
    """The arms notebook 08 trains with seed 0 only: P3's grid from its parameters (`moe_grid.grid_from_params`) and
    the replay probe at its GRID_PROBE cells (`moe_grid.probe_arms`), which `workbook.prefetch` trains ahead."""
    from .moe_grid import grid_from_params, probe_arms

    return {**grid_from_params(params), **probe_arms(params)}


def p4_arms(params: dict) -> dict:
    """P4's arms at the operating point `params["P4_CELL"]` (a grid cell's arm name; "" or absent: none yet), each
    `P4_STEPS` steps: `P4_ARMS` on the cell's fields less `_CELL_ONLY`. `workbook.prefetch` trains them with the
    notebook's seeds (`seeded_arms`)."""
    from .moe_grid import grid_from_params

    cell = params.get("P4_CELL") or ""
    if not cell:
        return {}
    grid = grid_from_params(params)
    if cell not in grid:
        raise ValueError(f"P4_CELL={cell!r} is not a cell of the grid; cells: {sorted(grid)}")
    shared = {k: v for k, v in grid[cell].items() if k not in _CELL_ONLY}
    return {arm: {**shared, **fields, "steps": params["P4_STEPS"]} for arm, fields in P4_ARMS.items()}


seeded_arms = p4_arms
"""the arms beside ARMS that `workbook.prefetch` trains with the notebook's SEEDS"""


def layer_means(metrics: list) -> list:
    """Per layer, the run-mean of `moe/expert_change/l{i}`: the share of the rollout's activated (token, slot)
    experts that the policy routes elsewhere than pi_old after each optimiser step (mean over a step's mu
    updates, `moe.ExpertChange`), over the steps that logged it. [] for a run that logged none."""
    n = len({k for r in metrics for k in r if k.startswith("moe/expert_change/l")})
    return [mean_over(metrics, f"moe/expert_change/l{i}") for i in range(n)]


def _mean(xs) -> float:
    return sum(xs) / len(xs)


def arm_layers(metrics_by_run: dict, arm: str, seeds) -> list:
    """Per layer, `layer_means` averaged over the arm's seeds."""
    return _layer_means_over(layer_means(metrics_by_run[run_key(arm, s)]) for s in seeds)


def _layer_means_over(per_seed) -> list:
    return [_mean(col) for col in zip(*per_seed)]


def card_routing(model: str) -> dict | None:
    """The routing record of a MoE's model card (`base_metrics.json`: per-layer expert shares of held-out tokens)."""
    return card(model).get("routing")


def load_balance(routing: dict | None) -> stats.Verdict:
    """P3/P4's premise from a routing record (`router_stats.routing_stats`): each layer's lowest expert share over the uniform
    share 1/E, which must be >= 0.25 in every layer; without a record the premise has no value (not met)."""
    if not routing:
        return LOAD_BALANCE.judge(None)  # no record: no value, the premise is not met
    n_experts = round(1 / routing["uniform_share"])  # the card rounds 1/E to 4 decimals
    return LOAD_BALANCE.judge([m * n_experts for m in routing["expert_share_min"]])


def p3_evidence(metrics_by_run: dict, seeds, moe_experts: int, routing: dict | None = None) -> dict:
    """P3 from the runs' own logs: per seed, the run-mean over layers of the judged arm (`P3_ARM`, judged); per
    layer, the seed means of the judged arm, the frozen router and the 8-expert MoE (reported). moe_experts: the
    expert count of the judged arm's model (the criterion asks >= 64)."""
    judged = [layer_means(metrics_by_run[run_key(P3_ARM, s)]) for s in seeds]  # per seed, per layer
    return {"expert_change_runs": [_mean(layers) for layers in judged],
            "expert_change_per_layer": _layer_means_over(judged),
            "expert_change_frozen": arm_layers(metrics_by_run, "grpo_frozen", seeds),
            "expert_change_coarse": arm_layers(metrics_by_run, "grpo_coarse", seeds), "moe_experts": moe_experts,
            "routing": routing}


def expert_change_table(metrics_by_run: dict, seeds) -> pd.DataFrame:
    """`P3_BESIDE` label -> per layer the share (%) of activated experts that change per update (seed means), and
    the mean over layers; the 8-expert MoE has fewer layers (NaN beyond)."""
    rows = {}
    for label, arm in P3_BESIDE.items():
        layers = arm_layers(metrics_by_run, arm, seeds)
        rows[label] = {**{f"layer {i}": 100 * x for i, x in enumerate(layers)}, "mean": 100 * _mean(layers)}
    return pd.DataFrame.from_dict(rows, orient="index")


def expert_change_figure(table: pd.DataFrame, metrics_by_run: dict, paper: float = 0.10):
    """P3's figure: left, the share of activated experts that change per update by layer (`expert_change_table`,
    one line per row); right, the same share per training step (mean over layers, sd band over seeds) per
    `P3_BESIDE` label, in the same colours; the paper's ~10% dashed on both, log scale (a 0 is not drawn)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from . import plots
    label_of = {arm: label for label, arm in P3_BESIDE.items()}
    colours = dict(zip(P3_BESIDE, sns.color_palette(n_colors=len(P3_BESIDE))))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    layers = [c for c in table.columns if c.startswith("layer ")]
    for label, row in table[layers].iterrows():
        left.plot(range(len(layers)), row.to_numpy(), marker="o", label=label, color=colours.get(label))
    left.set(xlabel="layer")
    rows = [(label_of[arm_of(run)], r["step"], 100 * r["moe/expert_change"])
            for run, m in metrics_by_run.items() if arm_of(run) in label_of for r in m if "moe/expert_change" in r]
    frame = pd.DataFrame(rows, columns=["arm", "step", "value"])
    sns.lineplot(frame, x="step", y="value", hue="arm", palette=colours, errorbar="sd", ax=right, legend=False)
    right.set(xlabel="step")
    for ax in (left, right):
        ax.axhline(100 * paper, ls="--", c="grey", lw=1, label=f"paper ~{100 * paper:.0f}%")
        ax.set(ylabel="activated experts changed (%)", yscale="log")
    left.legend(fontsize=7)
    plots.title(left, "P3", "per layer (seed means)")
    plots.title(right, "P3", "per step (mean over layers, sd over seeds)")
    fig.tight_layout()
    return fig


def no_replay_change(metrics_by_run: dict, seeds, arms=NO_REPLAY) -> float:
    """P4's condition: the share of activated experts that change per update, mean over layers, seeds and the P4
    runs without Routing Replay (`arms`, default `NO_REPLAY`; at the operating point "p4_grpo", "p4_gspo")."""
    return _mean([_mean(layer_means(metrics_by_run[run_key(arm, s)])) for arm in arms for s in seeds])


# ---------------------------------------------------------------- P5: engine vs trainer likelihoods

@torch.no_grad()
def engine_mismatch(trainer) -> dict:
    """One rollout batch of `trainer` (its engine: `cfg.rollout_autocast`), the engine's sampling log-probs
    against the trainer's recomputed ones: `mismatch_stats`, the raw distributions and the share of sequences
    whose ratio s_i = pi_trainer / pi_engine (Eq. 7) lies outside GSPO's clip range before any update."""
    batch = trainer.collect(0)
    ro = batch.rollout
    trainer.model.eval()
    lp = trainer.logps(ro).detach().double()  # (B, T) float32 trainer forward
    eng, mask = ro.sample_logps.double(), ro.completion_mask.double()  # (B, T)
    out = mismatch_stats(eng, lp, mask)
    out["token"] = token_mismatch(eng, lp, mask)  # (n_tokens,)
    clip = trainer.cfg.loss.surrogate  # GSPO's clip of the sequence ratio
    out["sequence"] = sequence_mismatch(eng, lp, mask)  # (B,)
    out["seq_clipped"] = clipped_by_mismatch(out["sequence"], clip.eps_low, clip.eps_high)
    return out


MISMATCH_FILE = "engine_mismatch.npz"
"""P5's measurement of a configuration's engine at the start, kept in its first seed's run folder"""


def run_engine_mismatch(cfg, run_dir) -> dict:
    """`engine_mismatch` of a fresh `Trainer(cfg)` (the base policy, before any update), measured once and kept in
    `run_dir/engine_mismatch.npz`, then read back: the bf16 engine's numbers depend on the CPU's bf16 matmuls, so
    a re-execution on another machine reads the committed measurement instead of writing a new one. Same keys as
    `engine_mismatch` (token and sequence as float64 tensors)."""
    import numpy as np

    from ..train import Trainer

    f = Path(run_dir) / MISMATCH_FILE
    if not f.is_file():
        m = engine_mismatch(Trainer(cfg))
        f.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, **{k: (v.numpy() if torch.is_tensor(v) else np.float64(v)) for k, v in m.items()})
        write_bytes(f, buf.getvalue())  # atomic: a kill mid-write never leaves a cut file to be read back
    with np.load(f) as z:
        return {k: (torch.from_numpy(z[k]) if z[k].ndim else float(z[k])) for k in z.files}


def clipped_by_mismatch(seq_abs_log_ratio: torch.Tensor, eps_low: float, eps_high: float) -> float:
    """Share of sequences with |log s_i| beyond the clip range on its nearer side: s_i < 1 - eps_low or
    s_i > 1 + eps_high is at least that likely; counts |log s_i| > log(1 + min(eps_low, eps_high))."""
    return float((seq_abs_log_ratio > math.log1p(min(eps_low, eps_high))).double().mean())


# ---------------------------------------------------------------- P4, P5: the training runs

def collapsed(metrics: list) -> bool:
    """DESIGN's collapse (P4): the run's training reward below the base's for >= 5 consecutive steps, the base's
    being the run's step-0 reward (its first rollout samples the base policy, before any update)."""
    return collapse.collapsed([r["reward/mean"] for r in metrics])


def run_table(metrics_by_run: dict, summaries: dict, frac: float = 0.2) -> pd.DataFrame:
    """One row per run: held-out accuracy at start and end (T = 1, greedy), final training reward, mean clip
    share, token log-ratio spread (mean and largest step) and whether it collapsed (`collapsed`, DESIGN's rule)."""
    rows = {}
    for run, m in metrics_by_run.items():
        s = summaries[run]
        rows[run] = {"acc start": s["eval_start"]["acc/sample"], "acc end": s["eval_end"]["acc/sample"],
                     "greedy end": s["eval_end"]["acc/greedy"], "reward (last 20%)": final_mean(m, "reward/mean", frac),
                     "clip/frac": clip_share(m), "log-ratio std": mean_over(m, "ratio/log_std"),
                     "log-ratio std max": max_over(m, "ratio/log_std"), "collapsed": collapsed(m)}
    return pd.DataFrame.from_dict(rows, orient="index")


def arm_means(table: pd.DataFrame) -> pd.DataFrame:
    """`run_table` averaged over the seeds of each arm (runs named "<arm>/seed<s>"); 'collapsed' becomes a count."""
    arms = table.index.str.replace(r"/seed\d+$", "", regex=True)
    out = table.drop(columns="collapsed").astype(float).groupby(arms, sort=False).mean()
    out["collapsed runs"] = table["collapsed"].astype(int).groupby(arms, sort=False).sum()
    return out


def _per_seed(arms: dict, seeds, fn) -> dict:
    """key -> [fn(run "<arm>/seed<s>") for s in seeds] for key, arm in arms.items()."""
    return {key: [fn(run_key(arm, s)) for s in seeds] for key, arm in arms.items()}


def p4_evidence(metrics_by_run: dict, summaries: dict, seeds, expert_change: float | None = None,
                routing: dict | None = None, arms: dict | None = None, where: str = "") -> dict:
    """P4 per seed: held-out accuracy at the end (judged), final training reward, clip share, largest token
    log-ratio spread and collapses (reported), for GRPO, GRPO + replay and GSPO (and SAPO where `arms` has it);
    `arms`: evidence key -> arm (default `DEFAULT_P4_KEYS`); `expert_change`, P3's measure (share of activated
    experts that change per update), is P4's condition (absent: the comparison is judged and the condition said
    unmeasured); `where` names the operating point in the verdict."""
    arms = arms or DEFAULT_P4_KEYS
    out = {}
    for key, fn in (("acc", lambda r: summaries[r]["eval_end"]["acc/sample"]),
                    ("reward", lambda r: final_mean(metrics_by_run[r])),
                    ("clip", lambda r: clip_share(metrics_by_run[r])),
                    ("spread_max", lambda r: max_over(metrics_by_run[r], "ratio/log_std")),
                    ("collapsed", lambda r: collapsed(metrics_by_run[r]))):
        out.update({f"{key}_{k}": v for k, v in _per_seed(arms, seeds, fn).items()})
    return {**out, "routing": routing, "arms": sorted(arms), "where": where,
            **({} if expert_change is None else {"expert_change": expert_change})}


def p5_evidence(metrics_by_run: dict, summaries: dict, seeds, mismatch: dict) -> dict:
    """P5 per seed: held-out accuracy at the end of GSPO with engine and with recomputed pi_old (judged), final
    reward (reported); the mean token- and sequence-level mismatch of one rollout batch (judged)."""
    arms = {"engine": "gspo_engine", "recompute": "gspo"}
    out = {f"acc_{k}": end_accuracy(summaries, arm, seeds) for k, arm in arms.items()}
    out.update({f"reward_{k}": v for k, v in _per_seed(arms, seeds, lambda r: final_mean(metrics_by_run[r])).items()})
    return {**out, "token_mismatch": mismatch["token_mismatch"], "seq_mismatch": mismatch["seq_mismatch"],
            "seq_clipped": mismatch["seq_clipped"]}


# ---------------------------------------------------------------- verdicts

P3_GRID = ("the dose-response grid fixed in full.yaml before its runs (lr x {1, 2, 3, 5, 10}, LoRA + router vs all "
           "parameters, mu in {1, 4, 8}; one seed per cell, validation prompts, no warm-up)")
P3_LEVEL = 0.05
"""P3's empirical parts: some non-collapsing cell reaches a run-mean over layers (i), or a deepest layer (ii), >= 5%"""


def _pcts(xs) -> str:
    return ", ".join(f"{100 * x:.2f}%" for x in xs)


def _p3_text(e: dict) -> str:
    layers, runs = e["expert_change_per_layer"], e.get("expert_change_runs") or []
    return (f"default cell (LoRA + router, lr 3e-4, mu 4): activated experts changed per update {100 * _mean(layers):.2f}% "
            f"(run mean over {len(layers)} layers" + (f", seeds {_pcts(runs)}" if runs else "")
            + f"; paper ~10%); per layer {_pcts(layers)}"
            + (f"; router frozen {_pcts(e['expert_change_frozen'])}" if e.get("expert_change_frozen") else "")
            + (f"; 8-expert MoE {_pcts(e['expert_change_coarse'])}" if e.get("expert_change_coarse") else ""))


def judge_grid(cells: list) -> tuple[str, str]:
    """P3's parts over the grid's cells ({"cell", "run_mean", "deepest", "collapsed"}): reproduced when a
    non-collapsing cell's run-mean reaches 5% (i); partly when only a deepest layer does (ii); else not reproduced."""
    live = [c for c in cells if not c["collapsed"]]
    if not live:
        return stats.NOT, "every grid cell collapsed: no cell to judge"
    best, deep = max(live, key=lambda c: c["run_mean"]), max(live, key=lambda c: c["deepest"])
    text = (f"largest run-mean over layers {100 * best['run_mean']:.2f}% ({best['cell']}), largest deepest-layer "
            f"share {100 * deep['deepest']:.2f}% ({deep['cell']}), over {len(live)} of {len(cells)} cells that did "
            "not collapse")
    if best["run_mean"] >= P3_LEVEL - stats.TOL:
        return stats.REPRODUCED, text
    return (stats.PARTLY if deep["deepest"] >= P3_LEVEL - stats.TOL else stats.NOT), text


def verdict_p3(e: dict) -> stats.Verdict:
    """P3 (DESIGN's criterion of 2026-12-06): premise, the fine MoE is load-balanced (`load_balance`, else not
    tested); then the grid's parts (`judge_grid`; not yet run without the grid). The default cell, the frozen router
    and the 8-expert MoE are reported beside."""
    text = _p3_text(e)
    premise = load_balance(e.get("routing"))
    if e.get("moe_experts", 8) < 64 or premise.word != stats.REPRODUCED:
        why = (f"the judged MoE has {e.get('moe_experts', 8)} experts (< 64)" if e.get("moe_experts", 8) < 64
               else premise.text)
        return stats.Verdict(stats.NOT_TESTED, f"not tested: premise not met: {why} — {text}", "", parts=(premise,),
                             failed=(why,), roles=("condition",))
    if not e.get("grid"):
        return stats.Verdict(stats.NOT_RUN, f"premise held: {premise.text}; {P3_GRID}: not yet run — {text}", "",
                             parts=(premise,), roles=("condition",))
    word, grid = judge_grid(e["grid"])
    part = stats.Verdict(word, grid, "over the grid's cells that do not collapse: some run-mean over layers >= 5% "
                         "(reproduced), else some deepest layer >= 5% (partly)")
    return stats.Verdict(word, f"premise held: {premise.text}; {grid}; {text}", "", parts=(premise, part),
                         roles=("condition", "part"))


def verdict_p4(e: dict) -> stats.Verdict:
    """P4: `P4_RULE` on the paired held-out accuracy differences, if the MoE is load-balanced and routing changes
    (`expert_change`, P3's measure, >= 2%), else not tested with the measured conditions printed; rewards, clip
    shares and collapses reported."""
    parts = [P4_REPLAY.judge(e["acc_grpo_replay"], e["acc_grpo"]), P4_GSPO.judge(e["acc_gspo"], e["acc_grpo_replay"])]
    routing = P4_ROUTING.judge(e.get("expert_change"))  # None (not measured): no value, the condition is not met
    v = P4_RULE.judge(parts, conditions=[load_balance(e.get("routing")), routing]).with_note(
        "the routing condition is logged at every update of the P4 runs without replay (GRPO, GSPO)")
    keys = [k for k in P4_LABELS if f"reward_{k}" in e]
    collapses = ", ".join(f"{P4_LABELS[k]} {sum(bool(x) for x in e[f'collapsed_{k}'])}" for k in keys)
    v = v.with_note("final training reward "
                    + ", ".join(f"{P4_LABELS[k]} {stats.seed_mean(e[f'reward_{k}'])}" for k in keys)
                    + f" (seed means); collapsed runs (DESIGN: training reward below the step-0 reward for >= 5 "
                    f"consecutive steps) {collapses}")
    if e.get("acc_sapo"):  # SAPO's arm at the operating point
        v = v.with_note("SAPO beside (C5), held-out accuracy {} (seed mean)".format(stats.seed_mean(e["acc_sapo"])))
    return v.with_note(f"at {e['where']}") if e.get("where") else v


def verdict_p5(e: dict) -> stats.Verdict:
    """P5: `P5_RULE` on the paired accuracy difference and the two mismatch means."""
    ratio = e["token_mismatch"] / e["seq_mismatch"] if e["seq_mismatch"] > 0 else math.inf
    v = P5_RULE.judge([P5_ACC.judge(e["acc_engine"], e["acc_recompute"])], checks=[P5_MISMATCH.judge(ratio)])
    return v.with_note(f"mismatch token {e['token_mismatch']:.3g}, sequence {e['seq_mismatch']:.3g}; "
                       f"{100 * e['seq_clipped']:.0f}% of sequences outside GSPO's clip range before any update; "
                       f"final training reward engine {stats.seed_mean(e['reward_engine'])}, recompute "
                       f"{stats.seed_mean(e['reward_recompute'])} (seed means)")


VERDICTS = {"P3": verdict_p3, "P4": verdict_p4, "P5": verdict_p5}
