"""One RL step of gpolib vs TRL's GRPOTrainer: same model, prompts, LoRA, sampling and objective.

Run: `python -m gpolib bench [--steps 5] [--mu 1 4]` or `python -m gpolib.bench ...` (needs the `bench`
extra: `pip install -e ".[bench]"`; only this package imports TRL, and `import gpolib` does not import it).
Everything is printed; nothing is written. Modules: `common` (settings, machine, loss check), `ours`
(gpolib's step with a phase breakdown), `trl_side` (TRL's trainer, the A/B driver, side-alone runs),
`samplers` (the sampler-vs-sampler line printed first: gpolib's samplers on the same model and prompts).

What one "step" is, on both sides: one rollout batch of 16 prompts x G = 8 = 128 completions (up to
--max-new-tokens new tokens, default 192 = TrainConfig.max_new_tokens of the harder regime; T = 1,
top_p = 1, no top-k), scored by `gpolib.rewards.correctness_reward`, plus its mu policy updates (GRPO
loss, token ratio, eps = 0.2, sample-level aggregation, beta = 0).

mu mapping (checked against TRL 1.16's `GRPOConfig.__post_init__`, `_prepare_inputs` and
`_generate_and_score_completions`):
  gpolib mu = 1   TRL per_device_train_batch_size = 128, gradient_accumulation_steps = 1,
                  steps_per_generation = 1, num_iterations = 1: one optimizer step on all 128
                  completions; pi_old = pi_theta.detach() on both sides (no extra forward).
  gpolib mu = 4   TRL per_device_train_batch_size = 32, gradient_accumulation_steps = 1,
                  steps_per_generation = 4, num_iterations = 1: the generation batch (32 x 4 = 128)
                  is shuffled and split into 4 minibatches, one optimizer step each. Because
                  gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0, TRL
                  computes old_per_token_logps once after generation, as gpolib does.
  A TRL "step" below is therefore `steps_per_generation` optimizer steps (TRL's global_step).

Timing: both trainers live in this process. TRL runs inside `trainer.train(max_steps=...)`; a
`TrainerCallback` runs the gpolib step at the start of every TRL generation cycle (A then B),
and a TRL step is timed from `on_step_begin` of its first optimizer step to `on_step_end` of its
last, plus the loop's own time between cycles (dataloader fetch, logging hooks). The first step
of each side is a warm-up and is not reported. Peak RSS of one process is shared by both sides,
so each side is also run alone in a subprocess (`--side gpolib|trl`) for its own peak.

The gpolib breakdown wraps the phases of the real `train_step` with timers (rollout, reward,
old-logps forward, new-logps forward, loss, backward, clip + optimizer, other = the rest).
Achieved GFLOP/s of the training passes uses FLOPs = 6 * N * positions for forward + backward
(2 * N forward, 4 * N backward, the dense-training convention), N = all model parameters (the
activations flow through the frozen base; the backward skips base weight gradients, so the
true count is nearer 4 * N; both are printed), positions = padded prompt + completion positions
the forward processes; attention score FLOPs are left out.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """`python -m gpolib bench ...` (see `--help`); returns the exit code. Process settings come first."""
    from ..runtime import setup_threads

    setup_threads()  # before torch loads (the modules of this package import it)
    from ..errors import boundary

    return boundary(_run, list(sys.argv[1:] if argv is None else argv))  # expected failures: one line, exit 2


def _run(argv: list) -> int:
    """The benchmark, after checking that TRL (the `bench` extra) is installed."""
    import importlib.util

    from ..errors import MissingDependencyError

    if "-h" not in argv and "--help" not in argv and importlib.util.find_spec("trl") is None:
        raise MissingDependencyError('bench compares with TRL, which is not installed: pip install -e ".[bench]"')
    from .cli import run

    return run(argv)
