"""gpolib's side of the benchmark: the real `train_step`, with timers around its phases."""
from __future__ import annotations

import functools
import time

import torch

from .. import update as U
from .common import G, LR, MAX_NEW, PROMPTS, _sync

PHASES = ("rollout", "reward", "old_logps_fwd", "new_logps_fwd", "loss", "backward", "optimizer", "other")


def build_gpolib(model: str, mu: int, device: str, max_new: int = MAX_NEW):
    from .. import presets
    from ..train import Trainer

    cfg = presets.get("grpo", prompts_per_step=PROMPTS, group_size=G, max_new_tokens=max_new, mu=mu, lr=LR,
                      eval_prompts=8, model=model, device=device)
    return Trainer(cfg)


class PhaseTimers:
    """Timers around the phases of gpolib's real `train_step`: seconds go to out[phase], positions to out['pos_*'].

    Wrapped while the block runs: the trainer's rollout / score, its policy's logps, the optimizer step (instance
    attributes),
    `update.pi_old` and `update.policy_loss` (module attributes) and torch's `clip_grad_norm_`. Backward time
    is the time from the end of a loss to the next forward or the clip.
    """

    def __init__(self, trainer, out: dict):
        self.trainer, self.out, self.dev = trainer, out, trainer.device
        self.in_old, self.loss_end, self.count = False, None, None
        self.orig: dict = {}

    def _add(self, name: str, seconds: float) -> None:
        self.out[name] = self.out.get(name, 0.0) + seconds

    def timed(self, name: str, fn):
        @functools.wraps(fn)  # keeps the LR scheduler's marker on optimizer.step
        def wrapper(*a, **k):
            _sync(self.dev)
            t0 = time.perf_counter()
            r = fn(*a, **k)
            _sync(self.dev)
            self._add(name, time.perf_counter() - t0)
            return r
        return wrapper

    def _close_backward(self) -> None:
        if self.loss_end is not None:
            self._add("backward", time.perf_counter() - self.loss_end)
            self.loss_end = None

    def _count_positions(self, _module, args, kwargs) -> None:  # what the model processes, after any trim
        if self.count:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.out[f"pos_{self.count}"] = self.out.get(f"pos_{self.count}", 0) + ids.numel()

    def _pi_old(self, *a, **k):
        self.in_old = True
        try:
            return self.timed("old_logps_fwd", self.orig["pi_old"])(*a, **k)
        finally:
            self.in_old = False

    def _logps(self, *a, **k):
        _sync(self.dev)
        self._close_backward()
        self.count = "old" if self.in_old else "new"
        try:
            fn = self.orig["logps"]
            return fn(*a, **k) if self.in_old else self.timed("new_logps_fwd", fn)(*a, **k)
        finally:
            self.count = None

    def _policy_loss(self, *a, **k):
        r = self.timed("loss", self.orig["policy_loss"])(*a, **k)
        self.loss_end = time.perf_counter()
        return r

    def _clip(self, *a, **k):
        _sync(self.dev)
        self._close_backward()
        return self.timed("optimizer", self.orig["clip"])(*a, **k)

    def __enter__(self) -> dict:
        tr = self.trainer
        self.orig = {"rollout": tr.rollout, "score": tr.score, "logps": tr.policy.logps, "opt_step": tr.opt.step,
                     "pi_old": U.pi_old, "policy_loss": U.policy_loss, "clip": torch.nn.utils.clip_grad_norm_}
        tr.rollout, tr.score = self.timed("rollout", self.orig["rollout"]), self.timed("reward", self.orig["score"])
        tr.policy.logps, tr.opt.step = self._logps, self.timed("optimizer", self.orig["opt_step"])
        U.pi_old, U.policy_loss, torch.nn.utils.clip_grad_norm_ = self._pi_old, self._policy_loss, self._clip
        self.hook = tr.model.register_forward_pre_hook(self._count_positions, with_kwargs=True)
        return self.out

    def __exit__(self, *exc) -> None:
        self.hook.remove()
        for name in ("rollout", "score"):
            delattr(self.trainer, name)  # back to the class methods
        delattr(self.trainer.policy, "logps")
        self.trainer.opt.step = self.orig["opt_step"]  # the LR scheduler's own instance-level wrapper
        U.pi_old, U.policy_loss = self.orig["pi_old"], self.orig["policy_loss"]
        torch.nn.utils.clip_grad_norm_ = self.orig["clip"]


def gpolib_step(trainer, step: int) -> dict:
    """One timed gpolib step: wall seconds, completion tokens and the phase breakdown (seconds)."""
    from ..train import train_step

    phases: dict = {}
    _sync(trainer.device)
    t0 = time.perf_counter()
    with PhaseTimers(trainer, phases):
        row = train_step(trainer, step)
    _sync(trainer.device)
    wall = time.perf_counter() - t0
    phases["other"] = wall - sum(phases.get(p, 0.0) for p in PHASES if p != "other")
    return {"s": wall, "tokens": int(row["gen/tokens"]), "phases": {p: phases.get(p, 0.0) for p in PHASES},
            "pos_new": phases.get("pos_new", 0), "pos_old": phases.get("pos_old", 0)}


def gpolib_breakdown(trainer, step: int = 0) -> dict:
    """Phase seconds of one gpolib step (keys: PHASES + 'total'); used by the tests on a tiny config."""
    r = gpolib_step(trainer, step)
    return {**r["phases"], "total": r["s"]}
