"""The lr scale of P3's all-parameter grid cells: at which lr does one all-parameter update move the policy as far
(KL) as one LoRA + router update at the workbook's lr? (DESIGN, P3: "the all-parameter lrs scaled so that the first
update's KL matches the LoRA cell's, the scale stated".)

One RL step at mu = 1 (one optimiser step) of the grid's lr x 1 cell in each mode, on the same first rollout batch
(same seed, same validation prompts, the base policy): KL(pi_old || pi) after the update by k3 on the rollout's
tokens (`moe.update_ratios`, logged as `moe/update_kl`), with the P3 measure beside. Adam's first step moves each
parameter by about lr, so the KL grows about as lr^2: scale = sqrt(KL_lora / KL_full at the same lr); a third step of
the all-parameter cell at lr x scale checks it. Writes benchmarks/moe_grid_pilot.json.

    python benchmarks/moe_grid_pilot.py
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

OUT = Path(__file__).with_name("moe_grid_pilot.json")


def first_update(spec: dict, prompts: int, group: int) -> dict:
    """The first step's update metrics of a grid cell's config (`moe_grid.BASE_FIELDS` + its mode and lr)."""
    from gpolib import presets
    from gpolib.train import Trainer, train_step

    cfg = presets.get(spec["preset"], **{k: v for k, v in spec.items() if k != "preset"},
                      prompts_per_step=prompts, group_size=group)
    t0 = time.perf_counter()
    row = train_step(Trainer(cfg), 0)
    keys = ("moe/update_kl", "moe/update_log_ratio_std", "moe/update_seq_log_ratio_std", "moe/update_max_ratio",
            "moe/expert_change", "reward/mean", "grad/norm")
    return {"lr": cfg.lr, "lora_r": cfg.lora_r, **{k: row.get(k) for k in keys},
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> None:
    from gpolib.lab.moe_grid import grid_arms

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cells = grid_arms(lr_mults=[1], mus=[1], modes=["lora", "full"], full_lr_scale=1.0, steps=1, eval_prompts=1)
    lora, full = (first_update(spec, args.prompts, args.group) for spec in cells.values())
    scale = math.sqrt(lora["moe/update_kl"] / full["moe/update_kl"])
    scale = float(f"{scale:.2g}")
    check_cells = grid_arms(lr_mults=[1], mus=[1], modes=["full"], full_lr_scale=scale, steps=1, eval_prompts=1)
    check = first_update(next(iter(check_cells.values())), args.prompts, args.group)
    out = {"lora": lora, "full_same_lr": full, "scale": scale, "full_scaled": check,
           "kl_ratio_scaled_over_lora": check["moe/update_kl"] / lora["moe/update_kl"],
           "prompts": args.prompts, "group": args.group, "threads": torch.get_num_threads()}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
