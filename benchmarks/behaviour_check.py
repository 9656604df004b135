"""Behaviour check for redesigns: 15 three-step `train()` runs whose every metric must stay identical.

Record on the code before a change, then compare on the code after it (same machine):

    python benchmarks/behaviour_check.py --out before.json
    python benchmarks/behaviour_check.py --compare before.json

Timing metrics (`time/*`, `tokens_per_s`) are left out; everything else is compared exactly (repr of
the float). The runs cover every estimator and objective of the presets, micro-batches, dynamic sampling,
GFPO, the engine's log-probs, heavy clipping and the MoE with and without Routing Replay.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpolib import presets  # noqa: E402
from gpolib.train import load_summary, train  # noqa: E402

MOE = "data/models/tiny-qwen3-moe"
SMALL = dict(steps=3, prompts_per_step=4, group_size=4, max_new_tokens=160, eval_prompts=8, eval_samples=2,
             checkpoint_every=2, micro_batch_rows=8)
"""shared by every run: small enough for ~15 runs in a few minutes on 2 cores"""

CASES = {
    "grpo": ("grpo", {}),
    "grpo_mu2_micro4": ("grpo", dict(mu=2, micro_batch_rows=4)),
    "grpo_beta": ("grpo", dict(loss_beta=0.04)),
    "dapo_dynamic": ("dapo", dict(mu=2)),
    "dapo_overlong_filter": ("dapo", dict(overlong="filter", dynamic_sampling=False)),
    "gspo": ("gspo", dict(mu=2)),
    "gspo_engine_logps": ("gspo", dict(mu=2, old_logps="engine")),
    "gfpo": ("gfpo", dict(group_size=8, gfpo_k=4)),
    "gfpo_adaptive": ("gfpo", dict(group_size=8, gfpo_k=4, gfpo_adaptive=True)),
    "dr_grpo": ("dr_grpo", {}),
    "heavy_clip": ("grpo", dict(mu=4, lr=3e-3, loss_eps_low=0.01, loss_eps_high=0.01)),
    "ppo": ("ppo", dict(mu=2)),
    "vapo": ("vapo", dict(value_pretrain_steps=2)),
    "moe_grpo": ("grpo", dict(model=MOE, mu=2, train_router=True)),
    "moe_replay": ("grpo", dict(model=MOE, mu=2, train_router=True, routing_replay=True)),
}


def _clean(row: dict) -> dict:
    return {k: repr(v) for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}


def record(only: list | None = None) -> dict:
    out = {}
    for name, (preset, overrides) in CASES.items():
        if only and name not in only:
            continue
        cfg = presets.get(preset, **{**SMALL, **overrides}, seed=1)
        with tempfile.TemporaryDirectory() as d:
            rows = train(cfg, Path(d) / "run", progress=False)
            evals = load_summary(Path(d) / "run")["eval"]
        out[name] = {"metrics": [_clean(r) for r in rows], "eval": [_clean(e) for e in evals]}
        print(f"{name}: {len(rows)} steps, acc {rows[-1]['acc/mean']:.3f}", flush=True)
    return out


def compare(before: dict, after: dict) -> list:
    diffs = []
    for name, rec in before.items():
        got = after.get(name)
        if got is None:
            diffs.append(f"{name}: missing")
            continue
        for part in ("metrics", "eval"):
            for i, (a, b) in enumerate(zip(rec[part], got[part])):
                for k in sorted(set(a) | set(b)):
                    if a.get(k) != b.get(k):
                        diffs.append(f"{name} {part}[{i}] {k}: {a.get(k)} -> {b.get(k)}")
            if len(rec[part]) != len(got[part]):
                diffs.append(f"{name} {part}: {len(rec[part])} rows -> {len(got[part])}")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the recorded metrics here")
    ap.add_argument("--compare", help="a file written by --out: compare against it, exit 1 on any difference")
    ap.add_argument("--only", nargs="*", help="run only these cases")
    a = ap.parse_args()
    rec = record(a.only)
    if a.out:
        Path(a.out).write_text(json.dumps(rec, indent=1))
    if a.compare:
        before = json.loads(Path(a.compare).read_text())
        if a.only:
            before = {k: v for k, v in before.items() if k in a.only}
        diffs = compare(before, rec)
        print("\n".join(diffs[:50]) if diffs else f"identical: {len(rec)} runs, every metric to the last digit")
        sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
