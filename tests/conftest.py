import os

from gpolib.runtime import setup_threads

setup_threads(2)  # before torch loads: passive OpenMP waiting, 2 threads
import pytest  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def tiny_cfg():
    """A train config small enough for a few seconds per step on 2 cores."""
    from gpolib import presets

    def make(name="grpo", **kw):
        base = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=128, eval_prompts=8, eval_samples=2,
                    checkpoint_every=1, warmup_steps=0)
        if name == "gfpo":
            base.update(group_size=8, gfpo_k=4)
        if name == "gspo":
            base.update(mu=2)
        if name == "vapo":
            base.update(value_pretrain_steps=2)  # the preset's 50 (VAPO Sec. 6.1) is a full-profile cost
        base.update(kw)
        return presets.get(name, **base)
    return make


RESUME_FIELDS = dict(steps=4, prompts_per_step=4, group_size=4, max_new_tokens=48, eval_prompts=8, eval_samples=2,
                     checkpoint_every=1, warmup_steps=0, rollout_threads=1)
"""the GRPO run of RESUME_SCRIPT (and of the tests that reuse it). rollout_threads=1: one sampling plan in every
process. On 2 threads the engine's plan (row shards or intra-op threads) is chosen by timing in each process, and its
sampling log-probs agree across plans to 1e-6, not bit for bit (tests/test_sampler.py): `entropy/sampled` of a
resumed run could then differ in its sixth digit"""

RESUME_SCRIPT = f"""
RESUME_FIELDS = {RESUME_FIELDS!r}
import sys
from gpolib.runtime import setup_threads
setup_threads(2)
from gpolib import presets
from gpolib.train import train
if len(sys.argv) > 2:  # fault injection: die half-way through writing checkpoint number argv[2]
    import os, gpolib.rundir as R
    real = R._atomic_write
    def dying(path, data):
        if path.name == f"ckpt-{{int(sys.argv[2]):06d}}.pt":
            with open(path.with_name(path.name + ".tmp-dying"), "wb") as f:
                f.write(data[: len(data) // 2])
            os._exit(9)
        real(path, data)
    R._atomic_write = dying
cfg = presets.get('grpo', **RESUME_FIELDS)
train(cfg, sys.argv[1], progress=False)
"""


def read_metrics(run_dir):
    import json
    return [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]


def stable(rows):
    """Metrics without wall-clock fields."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]


@pytest.fixture(scope="session")
def committed_runs():
    """(repository path, recorded config.json) of every run committed under reports/ (git's list; model folders
    of notebook 00's rebuild check, which hold no run config, left out)."""
    import json
    import subprocess

    from gpolib.paths import repo_root

    root = repo_root()
    tracked = subprocess.run(["git", "ls-files", "reports"], cwd=root, capture_output=True, text=True).stdout.split()
    blobs = [(p, json.loads((root / p).read_text())) for p in tracked if p.endswith("/config.json") and "/runs/" in p]
    return [(p, b) for p, b in blobs if "config" in b and "fingerprint" in b]


def _session_cache(tmp_path_factory) -> str:
    """The test session's one temporary gpolib cache folder (`paths.CACHE_ENV`)."""
    return str(tmp_path_factory.getbasetemp() / "gpolib-cache")


@pytest.fixture(scope="session")
def clean_resume_run(tmp_path_factory):
    """An uninterrupted 4-step run of RESUME_SCRIPT, shared by the fault-injection tests. Its cache is the session's
    temporary one, as `_step0_eval_cache` gives each test (set up after this session fixture, so named here)."""
    import subprocess
    import sys

    from gpolib import paths
    out = tmp_path_factory.mktemp("clean") / "run"
    env = dict(os.environ, PYTHONPATH=os.getcwd(), **{paths.CACHE_ENV: _session_cache(tmp_path_factory)})
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(out)], env=env, check=True)
    return out


@pytest.fixture(autouse=True)
def _step0_eval_cache(tmp_path_factory, monkeypatch):
    """Every test's step-0 evaluations (gpolib.eval_cache) and C++ kernel builds (gpolib.engine.native) go to one
    session-wide temporary cache, not ~/.cache."""
    from gpolib import paths

    monkeypatch.setenv(paths.CACHE_ENV, _session_cache(tmp_path_factory))
