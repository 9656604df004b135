"""A gpolib preset on verl: writes the task as verl parquet files and prints the trainer command.

    python scale/verl_grpo.py --preset dapo --model Qwen/Qwen2.5-7B-Instruct --data-dir data/verl \
        --gpus 8 --set steps=200 --set prompts_per_step=512 > run_verl.sh && bash run_verl.sh

The objective, batch and optimiser overrides come from `gpolib.export.to_verl` (verl 0.9.1); the
prompts are the task's, as one user message with the chat instruction (exactly gpolib's chat
rendering); the reward is gpolib's parser (scale/verl_reward.py) plus verl's DAPO overlong buffer when
the preset shapes. Features verl lacks (GFPO filtering, ...) stop the export unless --no-strict.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def verl_rows(path: str) -> list:
    """verl's RL dataset rows: chat `prompt`, `data_source`, `reward_model.ground_truth`."""
    from gpolib.tasks import INSTRUCTION, load_tasks

    return [{"data_source": "gpolib-arith", "ability": "arithmetic",
             "prompt": [{"role": "user", "content": INSTRUCTION + r["prompt"].rstrip("\n")}],
             "reward_model": {"style": "rule", "ground_truth": str(r["answer"])},
             "extra_info": {"id": r.get("id", str(i))}} for i, r in enumerate(load_tasks(path))]


def write_parquet(cfg, data_dir) -> tuple:
    """train.parquet and val.parquet (the held-out split) under data_dir; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(data_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "train.parquet", out / "val.parquet")
    for split, path in zip((cfg.task_train, cfg.task_eval), paths):
        pq.write_table(pa.Table.from_pylist(verl_rows(split)), path)
    return tuple(str(p) for p in paths)


def command(cfg, train: str, val: str, gpus: int = 1, strict: bool = True, rollout: str = "vllm") -> list:
    """`python -m verl.trainer.main_ppo` with the exported overrides and the run plumbing."""
    from gpolib.export import to_verl, verl_overrides

    plumbing = {"data.train_files": train, "data.val_files": val, "actor_rollout_ref.model.path": cfg.model,
                "actor_rollout_ref.rollout.name": rollout, "actor_rollout_ref.rollout.gpu_memory_utilization": 0.5,
                "reward.custom_reward_function.path": str(ROOT / "scale" / "verl_reward.py"),
                "reward.custom_reward_function.name": "compute_score",
                "trainer.n_gpus_per_node": gpus, "trainer.nnodes": 1, "trainer.logger": "[console]",
                "trainer.val_before_train": True, "trainer.test_freq": 10}
    keys = {**to_verl(cfg, strict=strict, n_gpus=gpus), **plumbing}
    return ["python3", "-m", "verl.trainer.main_ppo", *verl_overrides(keys)]


def main(argv: list | None = None) -> int:
    from gpolib import presets
    from gpolib.overrides import parse_overrides  # the CLI's --set rules

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True, help=" | ".join(presets.RECIPES))
    p.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    p.add_argument("--data-dir", default="data/verl")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="TrainConfig override")
    p.add_argument("--no-strict", action="store_true", help="export without the features verl lacks (warns)")
    a = p.parse_args(argv)
    cfg = presets.get(a.preset, **{**parse_overrides(a.set), "model": a.model})
    train, val = write_parquet(cfg, a.data_dir)
    print(" \\\n    ".join(shlex.quote(x) for x in command(cfg, train, val, a.gpus, strict=not a.no_strict)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
