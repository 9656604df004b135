"""A normal run prints no third-party deprecation warning, and its adapter names the base model as configured."""
import json
import os
import subprocess
import sys


def test_cli_run_prints_no_warning_and_no_machine_path(tmp_path):
    """A real `python -m gpolib train`: no warning, a summary for a person, then the JSON line scripts read last;
    booleans typed as a shell user would (`routing_replay=false`, `log_expert_change=1`) are accepted."""
    out = tmp_path / "run"
    sets = ["steps=1", "prompts_per_step=2", "group_size=2", "max_new_tokens=24", "eval_prompts=2", "eval_samples=1",
            "warmup_steps=0", "mu=1", "routing_replay=false", "log_expert_change=1"]
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
    _check_printed_summary(proc.stdout, out)


def _check_printed_summary(stdout: str, out):
    """The human lines before the last one give the run's own numbers and paths; the last line is the JSON."""
    *human, last = stdout.strip().splitlines()
    row = json.loads(last)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert row["out"] == str(out) and row["steps"] == 1 and row["last"]["reward/mean"] == metrics[-1]["reward/mean"]
    text = "\n".join(human)
    assert human[-4].startswith("grpo seed 0: 1 step")
    assert f"training reward at step 0: {metrics[-1]['reward/mean']:.3f}" in text
    end, first = summary["eval_end"], summary["eval_start"]
    assert f"{first['acc/sample']:.3f} at step 0 -> {end['acc/sample']:.3f} at step 1" in text
    assert f"greedy: {first['acc/greedy']:.3f} -> {end['acc/greedy']:.3f}" in text
    assert human[-1] == f"  run folder: {out} (config.json, metrics.jsonl); summary: {out / 'summary.json'}"


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
