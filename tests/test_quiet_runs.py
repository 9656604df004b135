"""A normal run prints no third-party deprecation warning, and its adapter names the base model as configured."""
import json
import os
import subprocess
import sys


def test_cli_run_prints_no_warning_and_no_machine_path(tmp_path):
    out = tmp_path / "run"
    sets = ["steps=1", "prompts_per_step=2", "group_size=2", "max_new_tokens=24", "eval_prompts=2", "eval_samples=1",
            "warmup_steps=0", "mu=1"]
    argv = [sys.executable, "-m", "gpolib", "train", "--preset", "grpo", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS",)}
    proc = subprocess.run(argv, env=dict(env, PYTHONPATH=os.getcwd()), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Warning" not in proc.stderr, proc.stderr[-2000:]
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "data/models/tiny-qwen3"
    assert "/" + "work" not in (out / "adapter" / "README.md").read_text()
    assert json.loads((out / "config.json").read_text())["data"]["model"].startswith("sha256:")
