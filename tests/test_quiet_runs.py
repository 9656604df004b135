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


def test_every_saved_adapter_names_the_base_as_configured(tmp_path):
    """peft saves a second adapter (the value model's) in its own subfolder with its own config and README; run from
    another folder (a notebook kernel), both carry the resolved absolute path unless save_adapter rewrites each."""
    from gpolib.config import TrainConfig
    from gpolib.rundir import RunDir

    absolute = str(tmp_path / "checkout" / "data" / "models" / "tiny-qwen3")

    class Saved:  # writes what peft's save_pretrained writes for a policy and a "value" adapter
        def save_pretrained(self, out):
            for folder in (tmp_path / "run" / "adapter", tmp_path / "run" / "adapter" / "value"):
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": absolute, "r": 16}))
                (folder / "README.md").write_text(f"base_model: {absolute}\n")

    RunDir(tmp_path / "run", TrainConfig()).save_adapter(Saved())
    for folder in ("adapter", "adapter/value"):
        meta = json.loads((tmp_path / "run" / folder / "adapter_config.json").read_text())
        assert meta == {"base_model_name_or_path": "data/models/tiny-qwen3", "r": 16}, folder
        assert (tmp_path / "run" / folder / "README.md").read_text() == "base_model: data/models/tiny-qwen3\n"
