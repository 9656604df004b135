"""How far the rollout engine's sampling log-probs are from the trainer's recompute, the pi_old choice of
`old_logps='engine'` against 'trainer' (issue 31, item 1; GSPO Sec. 5.4; verl's bypass mode).

One rollout of 16 train prompts x 8 of the embedded dense policy (GRPO defaults; LoRA B drawn N(0, 0.02), a trained
adapter, so the engine's folded LoRA is exercised), sampled by the run's engine with no autocast (fp32) unless
`--autocast bfloat16` (the bf16 engine) or `--weights int8 | w8a8` (the 8-bit engines, weights only or weights and activations,
`TrainConfig.rollout_weights`; claim C3's condition: its mismatch exceeds the bf16 engine's); then the trainer's
no-grad recompute of the same tokens (`Trainer.policy_logps`). With
d_t = log pi_trainer - log pi_engine on real completion tokens, prints
- per token: max |d_t|, mean |d_t|, max |exp(d_t) - 1|, and the mean k3 estimate of KL(engine || trainer),
  exp(d_t) - d_t - 1 (`mismatch/kl` of `gpolib.objectives.mismatch`);
- per sequence: max and mean of |sum_t d_t| (the sequence log ratio) and of |mean_t d_t| (GSPO's length-normalised one).

    python benchmarks/old_logps_drift.py [--autocast bfloat16 | --weights int8 | --weights w8a8] [--seed S] [--json out.json]
"""
from __future__ import annotations

import argparse
import json

import torch

from gpolib import presets
from gpolib.train import Trainer


def drift(engine: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> dict:
    """engine / trainer log-probs (B, T), mask (B, T) -> token- and sequence-level drift statistics."""
    m = mask.bool()
    d = (trainer - engine) * mask  # (B, T)
    tok = d[m].abs()  # (N,)
    seq_sum = d.sum(1)  # (B,)
    seq_mean = seq_sum / mask.sum(1)  # (B,)
    return {"tokens": int(m.sum()), "sequences": int(mask.shape[0]),
            "token/max_abs": float(tok.max()), "token/mean_abs": float(tok.mean()),
            "token/max_abs_ratio_minus_1": float(d[m].exp().sub(1).abs().max()),
            "token/k3_kl": float((d[m].exp() - d[m] - 1).mean()),
            "seq_sum/max_abs": float(seq_sum.abs().max()), "seq_sum/mean_abs": float(seq_sum.abs().mean()),
            "seq_mean/max_abs": float(seq_mean.abs().max()), "seq_mean/mean_abs": float(seq_mean.abs().mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--autocast", default=None, help="rollout autocast dtype (default: none, fp32 engine)")
    ap.add_argument("--weights", default=None, help="rollout weights: int8 | w8a8 (default: none, the policy's fp32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    trainer = Trainer(presets.get("grpo", eval_prompts=8, rollout_autocast=args.autocast,
                                  rollout_weights=args.weights, seed=args.seed))
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    ro = trainer.rollout(trainer.sample_prompts(0, 0), trainer.cfg.group_size)
    recomputed = trainer.policy_logps(ro)  # (B, T)
    out = {"engine": trainer.cfg.backend, "autocast": args.autocast, "weights": args.weights, "temperature": trainer.cfg.temperature,
           "top_p": trainer.cfg.top_p, **drift(ro.sample_logps, recomputed, ro.completion_mask.float())}
    for k, v in out.items():
        print(f"{k:28s} {v:.3e}" if isinstance(v, float) else f"{k:28s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
