"""Command line: `python -m gpolib <command> ...`.

Commands: `pretrain` (build an embedded base policy). Each command is one
subparser plus one `cmd_<name>(args)` function registered in `COMMANDS`.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def add_pretrain(sub) -> None:
    p = sub.add_parser("pretrain", help="supervised pretraining of an embedded base policy")
    p.add_argument("--arch", choices=["dense", "moe"], default="dense")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="output directory (default: data/models/tiny-qwen3[-moe])")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")


def cmd_pretrain(args) -> int:
    from gpolib.pretrain import PretrainConfig, pretrain

    torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size)) if v is not None}
    cfg = PretrainConfig(arch=args.arch, seed=args.seed, out=args.out, **overrides)
    losses = pretrain(cfg)
    print(json.dumps({"out": cfg.out, "steps": len(losses), "final_loss": losses[-1]}))
    return 0


COMMANDS = {"pretrain": (add_pretrain, cmd_pretrain)}
"""command name -> (add its subparser, run it); further commands register here"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpolib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command][1](args)


if __name__ == "__main__":
    sys.exit(main())
