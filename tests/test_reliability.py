"""Interrupted work is never lost, a second writer is refused, bad input is rejected before compute,
memory is guarded, and the reward parser survives hostile text."""
import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

from gpolib import LossConfig, TrainConfig, presets
from gpolib.memory import check_fits, estimate_update_bytes
from gpolib.rewards import correctness_reward, parse_answer
from gpolib.rundir import RunDir, RunLockedError
from gpolib.train import train

from conftest import RESUME_FIELDS, RESUME_SCRIPT, read_metrics, stable


# --- 1. checkpoints ---------------------------------------------------------------
def _rundir(tmp_path):
    return RunDir(tmp_path / "run", TrainConfig())


def test_corrupted_checkpoint_falls_back_with_warning(tmp_path):
    rd = _rundir(tmp_path)
    rd.check_config()
    rd.save_checkpoint(1, {"step": 1, "w": torch.ones(3)})
    newest = rd.save_checkpoint(2, {"step": 2, "w": torch.full((3,), 2.0)})
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])  # truncated, e.g. a disk-full write
    with pytest.warns(UserWarning, match="ckpt-000002.pt is corrupted"):
        state = rd.load_latest_checkpoint()
    assert state["step"] == 1


def test_checkpoint_without_checksum_is_incomplete(tmp_path):
    rd = _rundir(tmp_path)
    rd.check_config()
    rd.save_checkpoint(1, {"step": 1})
    rd.save_checkpoint(2, {"step": 2}).with_suffix(".sha256").unlink()  # killed before the sidecar
    with pytest.warns(UserWarning):
        assert rd.load_latest_checkpoint()["step"] == 1


def test_only_last_checkpoints_kept(tmp_path):
    rd = _rundir(tmp_path)
    rd.check_config()
    for step in range(1, 5):
        rd.save_checkpoint(step, {"step": step})
    assert [p.name for p in rd.checkpoints()] == ["ckpt-000003.pt", "ckpt-000004.pt"]


def test_kill_mid_checkpoint_write_resumes_identically(tmp_path, clean_resume_run):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    run = tmp_path / "dying"
    proc = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(run), "3"], env=env)
    assert proc.returncode == 9  # died while writing checkpoint 3
    assert [p.name for p in sorted(run.glob("ckpt-*.pt"))] == ["ckpt-000001.pt", "ckpt-000002.pt"]
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(run)], env=env, check=True)
    assert stable(read_metrics(run)) == stable(read_metrics(clean_resume_run))


def test_finished_run_is_reused_not_recomputed(clean_resume_run, monkeypatch):
    import gpolib.train as T
    monkeypatch.setattr(T, "Trainer", lambda cfg: pytest.fail("a finished run must not be recomputed"))
    cfg = presets.get('grpo', **RESUME_FIELDS)
    assert stable(train(cfg, clean_resume_run, progress=False)) == stable(read_metrics(clean_resume_run))


# --- 2. one writer per run directory ------------------------------------------------
HOLD_LOCK = """
import sys, time
from gpolib import presets
from gpolib.rundir import RunDir
rd = RunDir(sys.argv[1], presets.get('grpo', steps=1))
rd.check_config(); rd.acquire(); print('locked', flush=True); time.sleep(60)
"""


def test_second_writer_fails_at_once(tmp_path):
    run = tmp_path / "shared"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.perf_counter()
        with pytest.raises(RunLockedError, match=f"being written by process {holder.pid}"):
            train(presets.get("grpo", steps=1), run, progress=False)
        assert time.perf_counter() - t0 < 2.0
        assert json.loads((run / "config.json").read_text())["fingerprint"]  # untouched, still valid
        assert not (run / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()


def test_stale_lock_of_dead_process_is_taken_over(tmp_path):
    rd = _rundir(tmp_path)
    rd.check_config()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rd.lock_path.write_text(str(dead.pid))
    rd.acquire()
    assert rd.lock_path.read_text() == str(os.getpid())
    rd.release()
    assert not rd.lock_path.exists()


# --- 3. bad input, rejected before any compute ----------------------------------------
BAD_CLI = [
    (["train", "--preset", "ppo2"], "preset='ppo2'"),
    (["train", "--preset", "grpo", "--set", "group_size=1"], "group_size=1"),
    (["train", "--preset", "grpo", "--set", "lr=-1"], "lr=-1"),
    (["train", "--preset", "grpo", "--set", "temperature=0"], "temperature=0"),
    (["train", "--preset", "grpo", "--set", "loss_eps_high=-0.1"], "eps_high=-0.1"),
    (["train", "--preset", "grpo", "--set", "loss_ratio_level=word"], "ratio_level='word'"),
    (["train", "--preset", "grpo", "--set", "loss_aggregation=sum"], "aggregation='sum'"),
    (["train", "--preset", "grpo", "--set", "gfpo_k=20"], "gfpo_k=20"),
    (["train", "--preset", "grpo", "--set", "overlong=maybe"], "overlong='maybe'"),
    (["train", "--preset", "grpo", "--set", "nonsense=1"], "unknown TrainConfig field"),
    (["train", "--preset", "grpo", "--set", "badformat"], "FIELD=VALUE"),
    (["train", "--preset", "grpo", "--set", "steps=1.5"], "steps=1.5"),
    (["train", "--preset", "grpo", "--set", "dynamic_sampling=2"], "dynamic_sampling=2"),  # 1 / 0 / true: booleans
    (["train", "--preset", "grpo", "--set", "backend=sglang"], "backend='sglang'"),
    (["train", "--preset", "grpo", "--set", "mu=0"], "mu=0"),
    (["train", "--preset", "grpo", "--set", "max_new_tokens=-5"], "max_new_tokens=-5"),
    (["train", "--preset", "grpo", "--set", "top_p=2"], "top_p=2"),
    (["train", "--preset", "grpo", "--set", "device=tpu"], "device='tpu'"),
    (["train", "--preset", "grpo", "--set", "dtype=int8"], "dtype='int8'"),
    (["train", "--preset", "grpo", "--set", "micro_batch_rows=0"], "micro_batch_rows=0"),
    (["train", "--preset", "grpo", "--set", "old_logps=cache"], "old_logps='cache'"),
    (["train", "--preset", "gfpo", "--set", "gfpo_metric=brevity"], "gfpo_metric='brevity'"),
    (["train", "--preset", "grpo", "--set", "seed=-1"], "seed=-1"),
    (["train", "--preset", "grpo", "--set", "loss_beta=-0.04"], "beta=-0.04"),
    (["train", "--preset", "grpo", "--set", "warmup_steps=-2"], "warmup_steps=-2"),
    (["reproduce", "--profile", "smoke", "--only", "99"], "99"),
    # LossConfig names are checked like TrainConfig names, with the closest field suggested
    (["train", "--preset", "grpo", "--set", "loss_eps_hgh=0.3"], "did you mean loss_eps_high"),
    (["train", "--preset", "grpo", "--set", "stpes=5"], "did you mean steps"),
    (["train", "--preset", "grpo", "--set", "loss_=1"], "unknown LossConfig field"),
    (["train", "--preset", "grpo", "--set", "=3"], "FIELD=VALUE"),
    (["train", "--preset", "grpo", "--set", "lr=abc"], "lr='abc'"),
    (["train", "--preset", "grpo", "--set", "steps=None"], "steps=None"),
    (["train", "--preset", "grpo", "--set", "group_size=[8]"], "group_size=[8]"),
    (["train", "--preset", "grpo", "--set", "loss_eps_low=1.5"], "eps_low=1.5"),
    (["train", "--preset", "grpo", "--set", "loss_max_len=0"], "max_len=0"),
    (["train", "--preset", "grpo", "--set", "model="], "'model=' is invalid: model has no value"),
    (["train", "--preset", "grpo", "--set", "gradient_checkpointing=yes"], "gradient_checkpointing='yes'"),
    (["train", "--preset", "grpo", "--set", "overlong_cache=1.5"], "overlong_cache=1.5"),
    (["train", "--preset", "grpo", "--set", "advantage_estimator=critic"], "advantage_estimator='critic'"),
    (["train", "--preset", "grpo", "--set", "gamma=0.9"], "unless advantage_estimator='gae'"),
    (["train", "--preset", "grpo", "--set", "task_train=data/tasks/none.jsonl"], "task_train='data/tasks/none.jsonl' is invalid"),
    (["train", "--preset", "grpo", "--set", "model=./no-model"], "model='./no-model' is invalid"),
]
FLOAT_FIELDS = [f.name for f in dataclasses.fields(TrainConfig) if "float" in str(f.type)] + \
    [f"loss_{f.name}" for f in dataclasses.fields(LossConfig) if "float" in str(f.type)]
"""every float field of TrainConfig and LossConfig: each rejects NaN and infinities, naming itself"""
BAD_CLI += [(["train", "--preset", "grpo", "--set", f"{name}={value}"], f"{name.removeprefix('loss_')}={value}")
            for name in FLOAT_FIELDS for value in ("nan", "inf")]
BAD_CLI += [(["train", "--preset", "grpo", "--set", "loss_eps_high=-inf"], "eps_high=-inf"),
            (["train", "--preset", "grpo", "--set", "lr=1e999"], "lr=inf")]
MORE_BAD_VALUES = [
    "prompts_per_step=0",
    "prompts_per_step=-3",
    "steps=0",
    "steps=-1",
    "mu=-2",
    "mu=2.5",
    "group_size=0",
    "group_size=2.5",
    "lr=0",
    "weight_decay=-1",
    "max_grad_norm=0",
    "max_grad_norm=-1",
    "lora_r=-1",
    "rollout_threads=-1",
    "top_p=0",
    "top_p=-0.5",
    "temperature=-1",
    "max_gen_batches=0",
    "gfpo_k=0",
    "gfpo_k=-1",
    "value_lr_scale=0",
    "value_lr_scale=-1",
    "positive_lm_weight=-0.1",
    "lambda_policy=1.5",
    "lambda_policy=-0.1",
    "eval_every=-1",
    "eval_prompts=0",
    "eval_samples=0",
    "checkpoint_every=0",
    "report_to=wandb",
    "prompt_style=poem",
    "adv_scale=median",
    "rollout_autocast=int4",
    "vllm_gpu_memory_utilization=0",
    "vllm_gpu_memory_utilization=1.5",
    "loss_beta=nan",
    "loss_ratio_level=",
    "loss_aggregation=None",
    "loss_max_len=-3",
    "loss_max_len=2.5",
    "steps=True",
    "lr=True",
    "group_size=True",
    "seed=1.5",
    "task_eval=data/tasks/none.jsonl",
    "task_train=data",
    "overlong_cache=-1",
    "warmup_steps=1.5",
    "micro_batch_rows=-4",
    "lora_r=2.5",
    "max_new_tokens=0",
    "max_new_tokens=1e9",
    "routing_replay=yes",
    "gfpo_adaptive=2",
    "value_pretrain_steps=-1",
    "value_clip=-0.5",
    "gamma=1.5",
    "lambda_critic=2",
    "lambda_alpha=-1",
    "dtype=float8",
    "device=cuda:x",
    "backend=",
    "old_logps=",
    "gfpo_metric=",
    "name=",
    "seed=None",
    "vllm_sleep=maybe",
    "eval_every=1.5",
    "eval_samples=-1",
    "adapter_steps=50",
    "adapter_steps=(0,)",
    "adapter_steps=(1.5,)",
    "adapter_steps=(100000,)",
    "adapter_steps=(True,)",
]
"""one more bad value per field and rule (range, type, choice, path); each message names FIELD=VALUE"""


def _named(item: str) -> str:
    key, _, raw = item.partition("=")
    key = key.removeprefix("loss_")
    return f"{key}=" if raw in ("", "None", "True") or not raw.lstrip("-").replace(".", "").isdigit() else f"{key}={raw}"


BAD_CLI += [(["train", "--preset", "grpo", "--set", item], _named(item)) for item in MORE_BAD_VALUES]


@pytest.mark.parametrize("argv,needle", BAD_CLI, ids=[" ".join(a[1:]) or a[0] for a, _ in BAD_CLI])
def test_bad_cli_input_is_rejected_with_the_field(argv, needle, tmp_path, capsys, monkeypatch):
    import gpolib.train as T
    from gpolib.__main__ import main
    monkeypatch.setattr(T, "Trainer", lambda cfg: pytest.fail("no compute may start"))
    if argv[0] == "train":
        argv = argv + ["--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert err.startswith("error: ") and err.strip().count("\n") == 0  # one paragraph


def test_bad_value_from_a_shell_exits_2_without_traceback():
    """The real process: `python -m gpolib train --set loss_eps_hgh=0.3` (was a TypeError traceback)."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-m", "gpolib", "train", "--preset", "grpo", "--out", "unused",
                           "--set", "loss_eps_hgh=0.3"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown LossConfig field(s) ['loss_eps_hgh'] (did you mean loss_eps_high?)" in proc.stderr
    assert not os.path.exists("unused")


def test_help_is_fast_and_lists_the_settable_fields():
    """`--help` imports neither torch nor the notebook stack; `train --help` lists --set names with defaults."""
    code = ("import sys\nfrom gpolib.__main__ import main\n"
            "try:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('torch', 'nbformat', 'papermill', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=os.getcwd()),
                          capture_output=True, text=True, check=True)
    assert "HEAVY []" in proc.stdout
    assert "  steps = 100" in proc.stdout and "  loss_eps_high = 0.2" in proc.stdout


def test_bad_cli_choice_exits_2(capsys):
    from gpolib.__main__ import main
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "--profile", "huge"])
    assert exc.value.code == 2 and "huge" in capsys.readouterr().err


def test_malformed_task_file_fails_before_the_model_loads(tmp_path, monkeypatch):
    import gpolib.models as M
    from gpolib.train import Trainer
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"prompt": "1+1=?\\n", "answer": 2}\n{"prompt": oops}\n')
    monkeypatch.setattr(M, "load_policy", lambda *a, **k: pytest.fail("model loaded before data was checked"))
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: malformed JSON"):
        Trainer(presets.get("grpo", task_train=str(bad)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        Trainer(presets.get("grpo", task_train=str(empty)))
    few = tmp_path / "few.jsonl"
    few.write_text('{"prompt": "1+1=?\\n", "answer": 2}\n')
    with pytest.raises(ValueError, match="prompts_per_step"):
        Trainer(presets.get("grpo", task_train=str(few)))


def test_model_path_missing_or_not_causal(tmp_path):
    from gpolib.train import Trainer
    with pytest.raises(FileNotFoundError, match="model path not found"):
        Trainer(presets.get("grpo", model="data/models/does-not-exist"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(ValueError, match="not a causal LM"):
        Trainer(presets.get("grpo", model=str(tmp_path)))


# --- 4. memory -----------------------------------------------------------------------
def test_memory_guard_refuses_with_an_estimate():
    from gpolib.models import load_policy
    model, _ = load_policy("data/models/tiny-qwen3", lora_r=4)
    cfg = presets.get("grpo")
    est = check_fits(cfg, model)  # fits on this machine
    assert est["total"] > est["weights"] > 0
    with pytest.raises(MemoryError, match=r"needs about .* GiB.*lower micro_batch_rows \(now 16\)"):
        check_fits(cfg, model, available=10 * 2**20)
    small = estimate_update_bytes(cfg.replace(micro_batch_rows=8), model.config, 1, 1)
    big = estimate_update_bytes(cfg.replace(micro_batch_rows=64), model.config, 1, 1)
    assert big["activations"] == 8 * small["activations"]


def test_micro_batches_give_the_same_gradient(tiny_cfg):
    """Micro-batching is exact: gradients accumulated over 3-row micro-batches equal one pass."""
    from gpolib.train import Trainer, train_step
    grads = []
    for micro in (64, 3):
        tr = Trainer(tiny_cfg("dapo", steps=1, micro_batch_rows=micro))
        seen = []
        tr.opt.step = lambda seen=seen, tr=tr: seen.append([p.grad.clone() for p in tr.params])
        with warnings.catch_warnings():  # the scheduler notices the replaced optimizer.step, which is the point here
            warnings.filterwarnings("ignore", message="Seems like `optimizer.step", category=UserWarning)
            train_step(tr, 0)
        grads.append(seen[0])
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(*grads))
    assert any(float(g.abs().sum()) > 0 for g in grads[0])


# --- 5. the reward parser under fuzzing ------------------------------------------------
CODE_LIKE = st.sampled_from(["__import__('os').system('echo hi')", "A=1+1", "A=eval('2')", "A=0x10", "A=1e3",
                             "A=${x}", "A=`id`", "A=2;rm -rf /", "A=(lambda: 3)()", "A=int('4')", "A=4\x00",
                             "A=\u0664\u0662", "A=\uff14\uff12", "A=\u00b2", "A=-", "A=--4", "A=+4", "A=4.0"])
HOSTILE = st.one_of(
    st.text(max_size=300),
    CODE_LIKE,
    st.builds(lambda n: f"A={n}", st.integers(min_value=-10**40, max_value=10**40)),
    st.builds(lambda s, c: s + "\nA=" + c, st.text(max_size=50), st.text(alphabet=st.characters(), max_size=20)),
    st.text(alphabet=st.characters(whitelist_categories=("Cc", "Nd", "No", "Zs")), max_size=200),
)


@settings(max_examples=5000, deadline=None, database=None)
@given(text=HOSTILE, answer=st.integers(min_value=-10**12, max_value=10**12))
def test_reward_parser_fuzz(text, answer):
    t0 = time.perf_counter()
    r = correctness_reward(text, answer)
    assert time.perf_counter() - t0 < 0.05
    assert r in (0.0, 1.0)
    if r == 1.0:
        assert parse_answer(text) == answer and text.rstrip("\n").rsplit("\n", 1)[-1] == f"A={answer}"


@pytest.mark.parametrize("filler", ["9", "A=", "\n", "A=1\n", "\u0664", "x" * 7])
def test_reward_parser_one_megabyte(filler):
    text = (filler * (2**20 // len(filler)))[: 2**20]
    for s in (text, text + "\nA=5", "A=5\n" + text):
        t0 = time.perf_counter()
        r = correctness_reward(s, 5)
        assert time.perf_counter() - t0 < 0.05 and r in (0.0, 1.0)
