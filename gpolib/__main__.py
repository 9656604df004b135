"""Command line: `python -m gpolib <command> ...`.

Commands:
  reproduce  execute the workbook notebooks in order (`--profile smoke|full|gpu`, `--only 01,02`)
  train      one RL run of a preset (`--preset dapo --out DIR --set steps=50 --set loss_eps_high=0.28`)
  pretrain   build an embedded base policy (`--arch dense|moe|moe-fine`)
  bench      the RL step against TRL's GRPOTrainer (needs `pip install -e ".[bench]"`)
Each command is one subparser plus one `cmd_<name>(args)` function registered in `COMMANDS`.
The process settings (passive OpenMP waiting, torch threads) are made here, before torch loads.
"""
from __future__ import annotations

import argparse
import sys

from gpolib import jsonio
from gpolib.overrides import parse_overrides
from gpolib.runtime import setup_threads


def add_pretrain(sub) -> None:
    p = sub.add_parser("pretrain", help="supervised pretraining of an embedded base policy")
    p.add_argument("--arch", choices=["dense", "moe", "moe-fine", "moe-balanced", "moe-floor"], default="dense")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--micro-batches", type=int, default=None,
                   help="rows sorted by length into this many micro-batches, gradients accumulated (default: 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the recipe's, 3e-3)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: the recipe's, 100)")
    p.add_argument("--init", default="", help="a model folder whose weights training starts from (default: scratch)")
    p.add_argument("--aux-coef", type=float, default=None, help="MoE load-balancing coefficient (default: 0.01)")
    p.add_argument("--aux-per-layer", action="store_true", help="MoE: the load-balancing loss per layer")
    p.add_argument("--floor-coef", type=float, default=0.0,
                   help="MoE: coefficient of the underload hinge (experts below --floor x uniform pushed up; default 0)")
    p.add_argument("--floor", type=float, default=0.5, help="MoE: the underload hinge's floor, x uniform (default 0.5)")
    p.add_argument("--out", default="", help="output directory (default: data/models/tiny-qwen3[-moe])")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")


def cmd_pretrain(args) -> int:
    setup_threads(args.threads)
    from gpolib.pretrain import PretrainConfig, pretrain

    overrides = {k: v for k, v in (
        ("steps", args.steps), ("batch_size", args.batch_size), ("micro_batches", args.micro_batches),
        ("lr", args.lr), ("warmup", args.warmup), ("aux_coef", args.aux_coef)) if v is not None}
    cfg = PretrainConfig(arch=args.arch, seed=args.seed, out=args.out, init=args.init,
                         aux_per_layer=args.aux_per_layer, floor_coef=args.floor_coef, floor=args.floor, **overrides)
    losses = pretrain(cfg)
    print(jsonio.dumps({"out": cfg.out, "steps": len(losses), "final_loss": losses[-1]}))
    return 0


def settable_fields() -> str:
    """The `--set` names with their defaults: every TrainConfig field, loss_<field> for LossConfig, and
    loss_<parameter> for each surrogate's parameters (`--set loss_surrogate=NAME` picks the surrogate)."""
    import dataclasses

    from gpolib.config import LossConfig, TrainConfig
    from gpolib.objectives import SURROGATES

    def rows(cls, prefix):
        return [f"  {prefix}{f.name} = {f.default!r}" for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING]
    surrogates = [line for name, cls in SURROGATES.items()
                  for line in [f" with loss_surrogate={name}:", *rows(cls, "loss_")]]
    return "\n".join(["settable with --set FIELD=VALUE (default shown; the preset may change it):",
                      *rows(TrainConfig, ""), *rows(LossConfig, "loss_"), "  loss_surrogate = 'clip'", *surrogates])


def add_train(sub) -> None:
    p = sub.add_parser("train", help="one RL run of a preset", epilog=settable_fields(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    from gpolib.presets import PRESETS

    p.add_argument("--preset", required=True, help=" | ".join(PRESETS))
    p.add_argument("--out", required=True, help="run directory (resumes / reuses a run of the same config)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a TrainConfig field (loss_<field> for LossConfig); repeatable")


def input_error(err: Exception) -> int:
    """A bad value the user typed: its one-paragraph message on stderr, exit code 2, no traceback."""
    print(f"error: {err}", file=sys.stderr)
    return 2


def cmd_train(args) -> int:
    setup_threads(2)
    from gpolib import presets
    from gpolib.train import train

    try:
        cfg = presets.get(args.preset, **parse_overrides(args.set))
    except (ValueError, TypeError) as err:  # validation names the field and what is allowed
        return input_error(err)
    metrics = train(cfg, args.out)  # a locked / other / corrupt --out, bad data: `errors.boundary` in `main`
    print(train_summary(cfg, args.out, metrics))  # for a person; scripts read the JSON line, always the last
    print(jsonio.dumps({"out": args.out, "steps": len(metrics), "last": metrics[-1] if metrics else None}))
    return 0


def train_summary(cfg, out: str, metrics: list) -> str:
    """What `train` tells a person before its JSON line: the steps, the last step's training reward, held-out
    accuracy at the first and the last evaluation (from the run's summary.json, when it has one) and where the run
    folder and its summary are."""
    from pathlib import Path

    from gpolib.train import load_summary

    lines = [f"{cfg.name} seed {cfg.seed}: {len(metrics)} step{'s' * (len(metrics) != 1)}"]
    if metrics:
        last = metrics[-1]
        lines.append(f"  training reward at step {last['step']}: {last['reward/mean']:.3f} "
                     f"(accuracy {last['acc/mean']:.3f})")
    summary = Path(out) / "summary.json"
    if summary.exists():
        evals = load_summary(out)
        first, end = evals["eval_start"], evals["eval_end"]
        lines.append(f"  held-out accuracy, sampled at T = 1: {first['acc/sample']:.3f} at step {first['step']} -> "
                     f"{end['acc/sample']:.3f} at step {end['step']}; greedy: {first['acc/greedy']:.3f} -> "
                     f"{end['acc/greedy']:.3f}")
    lines.append(f"  run folder: {out} (config.json, metrics.jsonl); summary: {summary}")
    return "\n".join(lines)


def add_reproduce(sub) -> None:
    from gpolib.workbook import workbook

    workbook.add_cli(sub)


def cmd_reproduce(args) -> int:
    return args.func(args)


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="RL step time against TRL's GRPOTrainer (bench extra)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments of the benchmark (python -m gpolib.bench --help)")


def cmd_bench(args) -> int:
    from gpolib import bench

    return bench.main(args.rest)


COMMANDS = {"reproduce": (add_reproduce, cmd_reproduce), "train": (add_train, cmd_train),
            "pretrain": (add_pretrain, cmd_pretrain), "bench": (add_bench, cmd_bench)}
"""command name -> (add its subparser, run it); further commands register here"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpolib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    setup_threads()  # OpenMP policy before any command imports torch
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # every further argument belongs to the benchmark script
        from gpolib import bench

        return bench.main(argv[1:])
    args = build_parser().parse_args(argv)
    from gpolib.errors import boundary

    return boundary(COMMANDS[args.command][1], args)  # expected failures: one paragraph, exit 2


if __name__ == "__main__":
    sys.exit(main())
