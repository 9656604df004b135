"""Train the runs a notebook will ask for ahead of it, several processes at once.

    python -m gpolib.workbook.prefetch --profile full --only 01,06 --jobs 2

A notebook trains its runs one after another in its kernel; on a machine with n cores, n one-thread
processes finish the same runs about n times sooner than one n-thread process (decoding small models
does not scale across threads). This builds each notebook's configurations exactly as its cells do
(`runs.budget` from the parameters cell and the profile, `runs.configs` over the lab module's `ARMS`,
`runs.run_dirs` with its `HOME`), trains the unfinished ones, and leaves them for the notebook to reuse:
its folder table then says `finished` for every run. A run shared by two notebooks (a `HOME` baseline)
is trained once. The queue starts the costliest runs first (`run_cost` x `model_layers`, `pending`), so that no
long run is left alone at its end.

A notebook takes part when its lab module (`gpolib.lab.<name without the NN_ prefix>`) defines `ARMS`; a module's
`one_seed_arms(params)` adds arms trained with seed 0 only, from the notebook's parameters (notebook 08's P3 grid:
one seed per cell); runs that are not `train` runs (notebook 02's ratio grid) take part through the hooks
`prefetch_runs(params)` (run name -> (config, folder)) and `prefetch_train(params, config, folder)`, which trains one
of them as the notebook would.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

from .. import paths, runtime
from ..errors import UserError, boundary
from . import workbook  # torch-free: main() sets the OpenMP policy before anything imports torch

BUDGET_PARAMS = {"STEPS": "steps", "PROMPTS_PER_STEP": "prompts_per_step", "EVAL_PROMPTS": "eval_prompts",
                 "EVAL_SAMPLES": "eval_samples", "MODEL": "model", "DEVICE": "device", "DTYPE": "dtype",
                 "GROUP": "group_size"}
"""parameters-cell name -> `runs.budget` keyword (GROUP only where the notebook has one)"""


def notebook_params(job: workbook.Job) -> dict:
    """The notebook's parameters as papermill will set them: the cell's defaults, then the profile's."""
    return {**workbook.notebook_defaults(job.source), **job.params}


def topic_module(notebook: str):
    """The module `gpolib.lab.<topic>` of notebook "NN_<topic>", or None where there is none (00, 90: such a
    notebook trains its runs, if any, in its own cells)."""
    topic = f"gpolib.lab.{notebook.split('_', 1)[1]}"
    return importlib.import_module(topic) if importlib.util.find_spec(topic) else None


def notebook_runs(job: workbook.Job) -> dict:
    """Run name -> (TrainConfig, folder) for every run the notebook trains; {} if it has no topic module
    (`topic_module`) or the module has no ARMS. Beside ARMS (the notebook's SEEDS each): the module's
    `one_seed_arms(params)` (seed 0 only) and `seeded_arms(params)` (every seed), where it has them."""
    from ..lab import runs

    module = topic_module(job.name)
    if hasattr(module, "prefetch_runs"):
        return module.prefetch_runs(notebook_params(job))
    arms = getattr(module, "ARMS", None)
    if arms is None:
        return {}
    p = notebook_params(job)
    shared = runs.budget(**{kw: p[name] for name, kw in BUDGET_PARAMS.items() if name in p})
    cfgs = runs.configs(arms, shared, seeds=range(p.get("SEEDS", 1)))
    one_seed = getattr(module, "one_seed_arms", None)
    if one_seed is not None:
        cfgs.update(runs.configs(one_seed(p), shared, seeds=[0]))
    seeded = getattr(module, "seeded_arms", None)  # arms built from the parameters, trained with every seed
    if seeded is not None:
        cfgs.update(runs.configs(seeded(p), shared, seeds=range(p.get("SEEDS", 1))))
    dirs = runs.run_dirs(p["PROFILE"], job.name, cfgs, getattr(module, "HOME", None))
    return {name: (cfg, dirs[name]) for name, cfg in cfgs.items()}


def run_cost(cfg) -> float:
    """A run's relative cost, for ordering the queue (a count of token positions, not seconds).

    Per RL step: the positions generated, prompts_per_step x G x max_new_tokens (x the mean of 1 and
    max_gen_batches with dynamic sampling, which re-samples up to that many batches), plus those trained, the
    kept responses (GFPO's k of G) x max_new_tokens x mu, twice with a value model (its forward and backward
    beside the policy's). Each value pre-training step generates a batch and trains the value model on it.
    """
    gen = cfg.prompts_per_step * cfg.group_size * cfg.max_new_tokens
    if cfg.dynamic_sampling:
        gen *= (1 + cfg.max_gen_batches) / 2
    kept = cfg.prompts_per_step * (cfg.gfpo_k or cfg.group_size) * cfg.max_new_tokens
    value = cfg.advantage_estimator == "gae"
    step = gen + kept * cfg.mu * (2 if value else 1)
    return cfg.steps * step + (cfg.value_pretrain_len * (gen + kept) if value else 0)


def model_layers(model: str) -> int:
    """The decoder layers of a local model folder (its config.json's num_hidden_layers), 1 for a hub name: the
    per-position factor of a run's cost between models (notebook 08's fine-grained MoE has 8, its 8-expert MoE 4)."""
    config = paths.resolve(model) / "config.json"
    return json.loads(config.read_text()).get("num_hidden_layers", 1) if config.is_file() else 1


def pending(jobs: list) -> list:
    """(label, config, folder) of every unfinished run, each folder once, longest first (`run_cost` x
    `model_layers`), runs of equal cost seed-major (every arm's seed 0 first, then seed 1, ...).

    With n processes the queue ends when its last run does: started last, a long run (a VAPO run is three
    times a DAPO run) would run alone at the end while the other processes idle; started first, it leaves the
    short runs to fill in beside it (longest-processing-time-first order)."""
    out, seen = [], set()
    for job in jobs:
        for name, (cfg, folder) in notebook_runs(job).items():
            if folder in seen or (Path(folder) / "summary.json").exists():
                continue
            seen.add(folder)
            out.append((f"{job.prefix} {name}", cfg, folder))
    return sorted(out, key=lambda item: (-run_cost(item[1]) * model_layers(item[1].model), item[1].seed))


def _die_with_parent(poll_s: float = 0.5) -> None:
    """Pool initializer: the worker exits when the prefetch process dies, so a killed prefetch leaves no worker
    training on (and holding its run's lock); its run resumes next time from its last checkpoint.

    A daemon thread polls the parent's pid every `poll_s` seconds and ends the process when the worker has been
    handed to another parent. Linux's `prctl(PR_SET_PDEATHSIG)` fires when the *thread* that forked the worker
    ends, and the pool forks replacement workers (`maxtasksperchild=1`) from its handler thread, which ends at
    `close`: a worker then died while the pool still waited on it, and `join` hung after the last run."""
    import os
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _train_one(item: tuple) -> tuple:
    """Worker: one run on one thread; returns (label, seconds, None), or (label, None, why) for an expected failure
    (a run another process is writing, bad data: one line, the other runs go on). item: (label, config, folder[,
    the notebook's parameters when its folder's notebook trains through `prefetch_train`, else None])."""
    runtime.setup_threads(1)  # OMP_WAIT_POLICY comes from the parent's environment, set before torch loaded
    from ..errors import message
    from ..train import train

    label, cfg, folder, params = (*item, None)[:4]
    t0 = time.perf_counter()
    try:
        if params is None:
            train(cfg, folder, progress=False)
        else:
            topic_module(Path(folder).parent.name).prefetch_train(params, cfg, folder)
    except Exception as err:
        why = message(err)
        if why is None:
            raise
        return label, None, why
    return label, time.perf_counter() - t0, None


class PrefetchIncomplete(UserError):
    """Some runs were not trained for an expected reason (each named on its own line)."""


def prefetch(profile: str, only: list | None, n_jobs: int) -> int:
    """Train the pending runs of the selected notebooks with n_jobs one-thread processes; returns how many."""
    jobs = workbook.plan(profile, only, paths.repo_root() / "notebooks")
    todo = pending(jobs)
    hooked = {job.name: notebook_params(job) for job in jobs if hasattr(topic_module(job.name), "prefetch_train")}
    print(f"{len(todo)} run(s) to train with {n_jobs} process(es)", flush=True)
    for label, _, folder in todo:
        print(f"  {label:40s} {paths.relative(folder)}", flush=True)
    t0, failed = time.perf_counter(), 0
    with mp.get_context("spawn").Pool(n_jobs, initializer=_die_with_parent, maxtasksperchild=1) as pool:
        items = [(label, cfg, folder, hooked.get(Path(folder).parent.name)) for label, cfg, folder in todo]
        for i, (label, secs, why) in enumerate(pool.imap_unordered(_train_one, items), 1):
            failed += why is not None
            done = f"not trained: {why}" if why else f"done in {secs:.0f} s"
            print(f"[{i}/{len(todo)}] {label} {done} ({time.perf_counter() - t0:.0f} s so far)", flush=True)
        pool.close()  # let the workers exit on their own: the context manager's terminate() kills them, and
        pool.join()   # a killed worker leaves its semaphores to the resource tracker's 'leaked' warning
    if failed:
        raise PrefetchIncomplete(f"{failed} of {len(todo)} run(s) not trained (the reasons above); the notebooks "
                                 "train them when they run, or run prefetch again")
    return len(todo)


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpolib.workbook.prefetch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="full", help="params profile: notebooks/params/<profile>.yaml")
    ap.add_argument("--only", help="comma-separated notebook prefixes, e.g. 01,06 (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="one-thread training processes at once")
    args = ap.parse_args(argv)
    runtime.setup_threads()  # passive OpenMP waiting, inherited by the workers (spinning ones slow each other)
    try:  # expected failures (a bad params file, a run locked, bad data): one line, exit 2
        return boundary(lambda: (prefetch(args.profile, args.only.split(",") if args.only else None, args.jobs), 0)[1])
    except workbook.WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the workers die with this process (`_die_with_parent`); their runs resume next time
        print("error: interrupted; unfinished runs resume from their last checkpoint on the next prefetch or "
              "notebook", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
