"""Run identity: a run is keyed by its config and by the bytes of its model and task files, so a run
computed on other weights or tasks is never reused, and an old run without that record is refused."""
import json
import shutil

import pytest

from gpolib import identity, presets
from gpolib.rundir import RunDir, RunMismatchError


def _copy_data(tmp_path):
    model = tmp_path / "model"
    shutil.copytree("data/models/tiny-qwen3", model)
    task = tmp_path / "train.jsonl"
    shutil.copy("data/tasks/train.jsonl", task)
    return presets.get("grpo", model=str(model), task_train=str(task), steps=2)


def test_fingerprints_follow_the_bytes_not_the_docs(tmp_path):
    cfg = _copy_data(tmp_path)
    same_as_shipped = presets.get("grpo", steps=2)
    assert identity.data_fingerprint(cfg) == identity.data_fingerprint(same_as_shipped)  # same bytes, other path
    key = identity.run_key(cfg)
    (tmp_path / "model" / "README.md").write_text("edited card\n")
    assert identity.run_key(cfg) == key  # documentation is not part of the model
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    assert identity.run_key(cfg) != key
    assert identity.data_diff(identity.data_fingerprint(same_as_shipped), identity.data_fingerprint(cfg)) == ["model"]


def test_hub_names_and_missing_paths():
    assert identity.model_fingerprint("Qwen/Qwen2.5-0.5B-Instruct") == "hub:Qwen/Qwen2.5-0.5B-Instruct"
    assert identity.model_fingerprint("data/models/nope") == "missing:data/models/nope"
    assert identity.task_fingerprint("data/tasks/nope.jsonl") == "missing:data/tasks/nope.jsonl"
    assert identity.data_diff(None, {"model": "x"}) == ["unknown"]


def test_folder_name_changes_with_any_field():
    cfg = presets.get("grpo", steps=4)
    names = {identity.folder_name("grpo/seed0", c) for c in
             (cfg, cfg.replace(steps=5), cfg.replace(loss_eps_high=0.28), cfg.replace(seed=1))}
    assert len(names) == 4 and all(n.startswith("grpo-seed0-") for n in names)


def test_stale_run_is_refused_naming_what_changed(tmp_path):
    cfg = _copy_data(tmp_path)
    run = RunDir(tmp_path / "run", cfg)
    run.check_config()
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["data"] == identity.data_fingerprint(cfg)
    RunDir(tmp_path / "run", cfg).check_config()  # same config, same data: fine
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 0}\n')  # it computed something (else it is replaced)
    (tmp_path / "train.jsonl").write_text((tmp_path / "train.jsonl").read_text() + "\n\n")
    with pytest.raises(RunMismatchError, match=r"stale run.*task_train changed"):
        RunDir(tmp_path / "run", cfg).check_config()


def test_run_without_data_record_is_treated_as_stale(tmp_path):
    cfg = presets.get("grpo", steps=2)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({"fingerprint": cfg.fingerprint(), "config": cfg.to_dict()}))
    (tmp_path / "old" / "metrics.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(RunMismatchError, match="cannot be known; it is treated as stale"):
        RunDir(tmp_path / "old", cfg).check_config()


def test_every_committed_run_is_named_by_its_config_under_todays_defaults(committed_runs):
    """A changed default leaves a committed run's folder name (key of the non-default fields) pointing at a
    config the run no longer matches (e.g. backend 'hf' recorded when 'hf' was the default): the notebook would
    then refuse the folder. Every committed run's recorded config, read back, must give its folder's key."""
    from gpolib import identity
    from gpolib.config import TrainConfig

    for path, blob in committed_runs:
        folder = path.rsplit("/", 2)[-2]
        cfg = TrainConfig.from_dict(blob["config"])
        assert folder.endswith("-" + identity.run_key(cfg, blob["data"])[:8]), path
    assert len(committed_runs) >= 40  # the full profile's committed runs
