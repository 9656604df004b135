"""Notebook 08, GSPO on the mixture-of-experts policy (Zheng et al., 2025, Sec. 5.3-5.4): claims P3, P4, P5.

- P3, routing volatility after one optimiser step: `step_probe` (per-layer share of changed top-k expert sets,
  KL(pi_old || pi_new) and the token log-ratio spread of the step), `matched_spread` (the dense model's step
  rescaled to the same KL, `gspo.update_at_kl`), `any_layer_change` (the share of tokens whose routing changes
  in at least one of n layers, if layers changed independently: why depth matters);
- P4 and P5, the training arms on the MoE in one dict, `ARMS`; per-run instability signs, `run_table`;
  per-seed evidence, `p4_evidence`, `p5_evidence`;
- P5, engine vs trainer likelihoods of one rollout batch, `engine_mismatch` (the distributions of
  `gspo.token_mismatch` and `gspo.sequence_mismatch`) and the share of sequences GSPO's clip range would clip
  before any update, `clipped_by_mismatch`;
- the verdicts: `verdict_p3` (exact measurements, criterion in claims.yaml), `verdict_p4`, `verdict_p5` (rules of
  evidence, `stats`).
The measurement helpers shared with notebook 04 (`expert_ids`, `expert_set_change`, `update_at_kl`,
`mismatch_stats`, ...) live in `gspo.py`; derivations live in notebook 08.
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from .. import presets
from ..moe import expert_change, is_moe
from ..train import Trainer
from . import stats
from .gspo import (clip_share, expert_ids, expert_set_change, final_mean, log_ratio_std, mismatch_stats,
                   next_token_logprobs, old_new_kl, rollout_sequences, sequence_mismatch, token_mismatch,
                   update_at_kl)
from .runs import mean_over, run_key

ENGINE = {"rollout_autocast": "bfloat16"}
"""the rollout engine of every arm: sampling under bf16 autocast (the decoder's matmuls and KV cache in bf16) while
the trainer computes in float32, so the engine's and the trainer's log-probs genuinely differ, as between vLLM and
the training framework (Sec. 5.4)"""
MOE_TRAINING = {"mu": 4, "train_router": True, **ENGINE}
"""shared by every arm: the paper's several minibatch updates per rollout batch (mu = 4, Sec. 5.1), the router
trained (its weight in full, beside LoRA), so that the update can move the routing directly"""
ARMS = {
    "grpo": {"preset": "grpo", "loss_eps_high": 0.28, **MOE_TRAINING},
    "grpo_replay": {"preset": "grpo", "loss_eps_high": 0.28, "routing_replay": True, **MOE_TRAINING},
    "gspo": {"preset": "gspo", **MOE_TRAINING},
    "gspo_engine": {"preset": "gspo", "old_logps": "engine", **MOE_TRAINING},
}
"""P4: GRPO (Clip-Higher 0.2 / 0.28, as in notebook 04) without and with Routing Replay, GSPO (3e-4 / 4e-4)
without it; P5: GSPO with the engine's sampling log-probs as pi_old against `gspo` (pi_old recomputed by the
trainer), the two differing in that field only. All on the embedded Qwen3-MoE (the notebook's MODEL)."""
P4_REPLAY = stats.Greater("held-out accuracy (T = 1), GRPO + replay - GRPO")
P4_GSPO = stats.NotWorse("held-out accuracy (T = 1), GSPO - GRPO + replay")
P4_ROUTING = stats.AtLeast("share of activated experts that change per update (P3's measure, mean over layers)",
                           at_least=0.02, fmt=".2%")
"""P4's condition: without routing that changes there is nothing for Routing Replay to fix"""
P4_RULE = stats.AllOf(parts=(P4_REPLAY, P4_GSPO), conditions=(P4_ROUTING,))
"""P4: GRPO with Routing Replay beats GRPO without it, and GSPO without replay is not worse than GRPO with it"""
P5_ACC = stats.NotWorse("held-out accuracy (T = 1), GSPO engine pi_old - GSPO recomputed pi_old")
P5_MISMATCH = stats.AtLeast("mean token-level / mean sequence-level |log ratio| engine vs trainer", at_least=1.0,
                            fmt=".2f")
P5_RULE = stats.AllOf(parts=(P5_ACC, P5_MISMATCH))
"""P5: engine log-probs as pi_old are not worse than recomputed ones, and the sequence-level mismatch is below
the token-level mismatch"""
RULES = {"P4": P4_RULE, "P5": P5_RULE}
"""claim id -> the rule that judges it and writes its criterion"""
COLLAPSE = 0.05
"""a run 'collapses' when its held-out accuracy ends more than 5 points below where it started"""


# ---------------------------------------------------------------- P3: one optimiser step

def activated_expert_change(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The paper's per-layer measure (Sec. 5.3), `moe.expert_change`'s second part: (L, B, T, k) x2, (B, T) -> (L,)."""
    return expert_change(before, after, mask)[1]


def step_probe(model, ro, step_fn) -> dict:
    """One optimiser step `step_fn()` on the rollout `ro`: per layer, the share of completion tokens whose top-k
    expert set changes and the share of activated experts that change (MoE only); the exact KL(pi_old || pi_new)
    over the completion positions, and the spread (std) of the token log-ratios log pi_new(y_t) / pi_old(y_t)."""
    ids, attn, comp, pred = rollout_sequences(ro)  # (B, P+T) x3, (B, P+T-1)
    routes = expert_ids(model, ids, attn) if is_moe(model) else None  # (L, B, P+T, k)
    old = next_token_logprobs(model, ids, attn)  # (B, P+T-1, V)
    step_fn()
    new = next_token_logprobs(model, ids, attn)
    out = {"kl": old_new_kl(old, new, pred), "log_ratio_std": log_ratio_std(old, new, ids, pred)}
    if routes is not None:
        after = expert_ids(model, ids, attn)
        out["route_change"] = expert_set_change(routes, after, comp).tolist()
        out["expert_change"] = activated_expert_change(routes, after, comp).tolist()
    return out


def matched_spread(model, ro, step_fn, target_kl: float) -> dict:
    """The step of `step_fn()` rescaled to KL(pi_old || pi_new) = target_kl on the rollout `ro` (`update_at_kl`):
    alpha, the KL reached and the token log-ratio spread there. A target of 0 (a step that changed nothing, e.g.
    every group of the batch had one reward) is matched by no step: alpha 0, spread 0."""
    if target_kl <= 0:
        return {"alpha": 0.0, "kl": 0.0, "log_ratio_std": 0.0}
    ids, attn, _, pred = rollout_sequences(ro)
    out = update_at_kl(model, ids, attn, pred, step_fn, target_kl)
    return {k: out[k] for k in ("alpha", "kl", "log_ratio_std")}


def any_layer_change(per_layer, n_layers: int | None = None) -> float:
    """1 - prod_l (1 - c_l): the share of tokens whose routing changes in at least one layer if the layers
    changed independently; with n_layers, every layer at the mean of `per_layer` (a deeper model, same c)."""
    c = [float(x) for x in per_layer]
    if n_layers is not None:
        c = [sum(c) / len(c)] * n_layers
    return 1.0 - math.prod(1.0 - x for x in c)


def probe_config(model: str, train_router: bool, seed: int, **budget):
    """GRPO with one update per rollout batch (mu = 1) at the full learning rate from the first step (no warm-up):
    the optimiser step P3 measures. AdamW's first step moves every trainable parameter that has a gradient by about
    lr (LoRA's A, multiplied by B = 0 at the start, has none yet)."""
    return presets.get("grpo", model=model, train_router=train_router, mu=1, warmup_steps=0, seed=seed, **budget)


def p3_probe(moe: str, dense: str, seed: int, **budget) -> dict:
    """P3 on one rollout batch of the MoE (seeded): one optimiser step with the router trainable and, on the same
    batch, with it frozen (`step_probe`); the dense model's own step rescaled to the trainable MoE step's KL
    (`matched_spread`). budget: TrainConfig fields (prompts_per_step, group_size, device, dtype, ...)."""
    tr = Trainer(probe_config(moe, True, seed, **budget))
    batch = tr.collect(0)
    out = {"trainable": step_probe(tr.model, batch.rollout, lambda: tr.update(batch, 0))}
    frozen = Trainer(probe_config(moe, False, seed, **budget))  # the same policy: LoRA starts at zero
    out["frozen"] = step_probe(frozen.model, batch.rollout, lambda: frozen.update(batch, 0))
    dense_tr = Trainer(probe_config(dense, False, seed, **budget))
    d_batch = dense_tr.collect(0)
    out["dense"] = matched_spread(dense_tr.model, d_batch.rollout, lambda: dense_tr.update(d_batch, 0),
                                  out["trainable"]["kl"])
    return out


def layer_table(probes: dict) -> pd.DataFrame:
    """Probe name -> per layer the share (%) of completion tokens whose expert set changed, the share of tokens
    changed in any layer, the share (%) of activated experts that changed (mean over layers), KL and spread."""
    rows = {name: {**{f"layer {i}": 100 * x for i, x in enumerate(p["route_change"])},
                   "any layer": 100 * any_layer_change(p["route_change"]),
                   "experts changed": 100 * sum(p["expert_change"]) / len(p["expert_change"]),
                   "KL": p["kl"], "log-ratio std": p["log_ratio_std"]}
            for name, p in probes.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


ARM_FIELDS = ("loss.ratio_level", "loss.eps_low", "loss.eps_high", "mu", "lr", "train_router", "routing_replay",
              "old_logps", "rollout_autocast")
"""the fields that define an arm of notebook 08 (or that every arm shares and the reader should see)"""


def arm_table(configs: dict, fields=ARM_FIELDS) -> pd.DataFrame:
    """Run name -> the values of `fields` (nested ones as 'loss.eps_high') of its TrainConfig."""
    def get(cfg, field):
        for part in field.split("."):
            cfg = getattr(cfg, part)
        return cfg
    return pd.DataFrame.from_dict({name: {f: get(cfg, f) for f in fields} for name, cfg in configs.items()},
                                  orient="index")


def arm_means(table: pd.DataFrame) -> pd.DataFrame:
    """`run_table` averaged over the seeds of each arm (runs named "<arm>/seed<s>"); 'collapsed' becomes a count."""
    arms = table.index.str.replace(r"/seed\d+$", "", regex=True)
    out = table.drop(columns="collapsed").astype(float).groupby(arms, sort=False).mean()
    out["collapsed runs"] = table["collapsed"].astype(int).groupby(arms, sort=False).sum()
    return out


def p3_evidence(probes: list) -> dict:
    """P3 over rollout batches (`p3_probe` results): per-layer route change with the router trainable (judged) and
    frozen (reported), each the mean over batches; the mean token log-ratio spread of the MoE step and of the
    dense step at the same KL (judged), and the mean KL of the step."""
    layer_mean = lambda key: [sum(col) / len(col) for col in zip(*(p[key]["route_change"] for p in probes))]
    mean = lambda key, field: sum(p[key][field] for p in probes) / len(probes)
    return {"route_change_per_layer": layer_mean("trainable"), "route_change_frozen": layer_mean("frozen"),
            "expert_change_per_layer": [sum(col) / len(col) for col in zip(*(p["trainable"]["expert_change"]
                                                                            for p in probes))],
            "ratio_spread_moe": mean("trainable", "log_ratio_std"), "ratio_spread_dense": mean("dense", "log_ratio_std"),
            "kl": mean("trainable", "kl")}


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
    out["sequence"] = sequence_mismatch(eng, lp, mask)  # (B,)
    out["seq_clipped"] = clipped_by_mismatch(out["sequence"], trainer.cfg.loss.eps_low, trainer.cfg.loss.eps_high)
    return out


def clipped_by_mismatch(seq_abs_log_ratio: torch.Tensor, eps_low: float, eps_high: float) -> float:
    """Share of sequences with |log s_i| beyond the clip range on its nearer side: s_i < 1 - eps_low or
    s_i > 1 + eps_high is at least that likely; counts |log s_i| > log(1 + min(eps_low, eps_high))."""
    return float((seq_abs_log_ratio > math.log1p(min(eps_low, eps_high))).double().mean())


# ---------------------------------------------------------------- P4, P5: the training runs

def collapsed(summary: dict, drop: float = COLLAPSE) -> bool:
    """Held-out accuracy at the end below the start by more than `drop`."""
    return summary["eval_end"]["acc/sample"] < summary["eval_start"]["acc/sample"] - drop


def run_table(metrics_by_run: dict, summaries: dict, frac: float = 0.2) -> pd.DataFrame:
    """One row per run: held-out accuracy at start and end (T = 1, greedy), final training reward, mean clip
    share, token log-ratio spread (mean and largest step) and whether it collapsed."""
    rows = {}
    for run, m in metrics_by_run.items():
        s = summaries[run]
        spread = [r.get("ratio/log_std") for r in m if r.get("ratio/log_std") is not None]
        rows[run] = {"acc start": s["eval_start"]["acc/sample"], "acc end": s["eval_end"]["acc/sample"],
                     "greedy end": s["eval_end"]["acc/greedy"], "reward (last 20%)": final_mean(m, "reward/mean", frac),
                     "clip/frac": clip_share(m), "log-ratio std": mean_over(m, "ratio/log_std"),
                     "log-ratio std max": max(spread) if spread else math.nan, "collapsed": collapsed(s)}
    return pd.DataFrame.from_dict(rows, orient="index")


def _per_seed(arms: dict, seeds, fn) -> dict:
    """key -> [fn(run "<arm>/seed<s>") for s in seeds] for key, arm in arms.items()."""
    return {key: [fn(run_key(arm, s)) for s in seeds] for key, arm in arms.items()}


def p4_evidence(metrics_by_run: dict, summaries: dict, seeds, expert_change: float | None = None) -> dict:
    """P4 per seed: held-out accuracy at the end (judged), final training reward, clip share and collapses
    (reported), for GRPO, GRPO + replay and GSPO; `expert_change`, P3's measure (share of activated experts that
    change per update), is P4's condition (absent: the comparison is judged and the condition said unmeasured)."""
    arms = {"grpo": "grpo", "grpo_replay": "grpo_replay", "gspo": "gspo"}
    out = {}
    for key, fn in (("acc", lambda r: summaries[r]["eval_end"]["acc/sample"]),
                    ("reward", lambda r: final_mean(metrics_by_run[r])),
                    ("clip", lambda r: clip_share(metrics_by_run[r])),
                    ("collapsed", lambda r: collapsed(summaries[r]))):
        out.update({f"{key}_{k}": v for k, v in _per_seed(arms, seeds, fn).items()})
    return out if expert_change is None else {**out, "expert_change": expert_change}


def p5_evidence(metrics_by_run: dict, summaries: dict, seeds, mismatch: dict) -> dict:
    """P5 per seed: held-out accuracy at the end of GSPO with engine and with recomputed pi_old (judged), final
    reward (reported); the mean token- and sequence-level mismatch of one rollout batch (judged)."""
    arms = {"engine": "gspo_engine", "recompute": "gspo"}
    out = {f"acc_{k}": v for k, v in _per_seed(arms, seeds, lambda r: summaries[r]["eval_end"]["acc/sample"]).items()}
    out.update({f"reward_{k}": v for k, v in _per_seed(arms, seeds, lambda r: final_mean(metrics_by_run[r])).items()})
    return {**out, "token_mismatch": mismatch["token_mismatch"], "seq_mismatch": mismatch["seq_mismatch"],
            "seq_clipped": mismatch["seq_clipped"]}


# ---------------------------------------------------------------- verdicts

FINE_MOE = ("the criterion asks the paper's measure logged at every update of the MoE runs on a fine-grained "
            "embedded MoE (>= 64 experts, top-8, >= 8 layers), not yet run")
"""what P3/P4's criterion (changed after the 8-expert runs were seen) still needs"""


def verdict_p3(e: dict) -> stats.Verdict:
    """P3 on the fine-grained MoE (`moe_experts` >= 64 in the evidence): the share of activated experts that change
    per update, reproduced at >= 5%, partly at >= 2%; on the 8-expert MoE only the measure beside: not yet run."""
    layers, frozen, experts = e["route_change_per_layer"], e.get("route_change_frozen"), e.get("expert_change_per_layer")
    share = sum(experts) / len(experts) if experts else None
    text = ((f"activated experts changed {100 * share:.2f}% (mean over layers, paper ~10%); " if share is not None else "")
            + "top-k sets changed per layer (router trainable) " + ", ".join(f"{100 * x:.2f}%" for x in layers)
            + ("; router frozen " + ", ".join(f"{100 * x:.2f}%" for x in frozen) if frozen else "")
            + f"; token log-ratio spread at matched KL: MoE {e['ratio_spread_moe']:.3g} vs dense "
            f"{e['ratio_spread_dense']:.3g}")
    if e.get("moe_experts", 8) < 64 or share is None:
        v = stats.Verdict(stats.NOT_RUN, f"on the {e.get('moe_experts', 8)}-expert MoE: {text}", "")
        return stats.criterion_changed(v, FINE_MOE)
    word = stats.REPRODUCED if share >= 0.05 else stats.PARTLY if share >= 0.02 else stats.NOT
    return stats.Verdict(word, text, "")


def verdict_p4(e: dict) -> stats.Verdict:
    """P4: `P4_RULE` on the paired held-out accuracy differences, if routing changes (`expert_change`, P3's measure,
    >= 2%: else not tested, the share printed); rewards, clip shares and collapses reported."""
    parts = [P4_REPLAY.judge(e["acc_grpo_replay"], e["acc_grpo"]), P4_GSPO.judge(e["acc_gspo"], e["acc_grpo_replay"])]
    if e.get("expert_change") is None:
        v = stats.AllOf(parts=P4_RULE.parts).judge(parts).with_note("P4's condition (P3's measure) not measured")
    else:
        v = stats.criterion_changed(P4_RULE.judge(parts, conditions=[P4_ROUTING.judge(e["expert_change"])]), FINE_MOE)
        v = v.with_note("the condition is read from P3's probe (one update from the base, router trainable), "
                        "not logged inside the P4 runs")
    collapses = {k: sum(bool(x) for x in e[f"collapsed_{k}"]) for k in ("grpo", "grpo_replay", "gspo")}
    return v.with_note("final training reward GRPO {}, GRPO + replay {}, GSPO {} (seed means); collapsed runs {}"
                       .format(*(stats.seed_mean(e[f"reward_{k}"]) for k in ("grpo", "grpo_replay", "gspo")),
                               ", ".join(f"{k} {n}" for k, n in collapses.items())))


def verdict_p5(e: dict) -> stats.Verdict:
    """P5: `P5_RULE` on the paired accuracy difference and the two mismatch means."""
    ratio = e["token_mismatch"] / e["seq_mismatch"] if e["seq_mismatch"] > 0 else math.inf
    v = P5_RULE.judge([P5_ACC.judge(e["acc_engine"], e["acc_recompute"]), P5_MISMATCH.judge(ratio)])
    return v.with_note(f"mismatch token {e['token_mismatch']:.3g}, sequence {e['seq_mismatch']:.3g}; "
                       f"{100 * e['seq_clipped']:.0f}% of sequences outside GSPO's clip range before any update; "
                       f"final training reward engine {stats.seed_mean(e['reward_engine'])}, recompute "
                       f"{stats.seed_mean(e['reward_recompute'])} (seed means)")


VERDICTS = {"P3": verdict_p3, "P4": verdict_p4, "P5": verdict_p5}
