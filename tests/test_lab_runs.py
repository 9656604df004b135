"""lab.runs: arms x seeds -> configs (one definition per notebook), run folders, windows of steps."""
import math


from gpolib import presets
from gpolib.lab import dr_grpo, gfpo, gspo, runs

BUDGET = runs.budget(steps=3, prompts_per_step=4, group_size=8, eval_prompts=8, eval_samples=1,
                     model="data/models/tiny-qwen3", device="cpu", dtype="float32")


def test_configs_cross_arms_with_seeds_and_keep_the_arms_fields():
    cfgs = runs.configs(gspo.ARMS, BUDGET, seeds=range(2))
    assert list(cfgs) == ["gspo/seed0", "gspo/seed1", "grpo/seed0", "grpo/seed1"]
    assert cfgs["grpo/seed1"] == presets.get("grpo", **BUDGET, seed=1, mu=4, loss_eps_high=0.28)
    assert cfgs["gspo/seed0"] == presets.get("gspo", **BUDGET, seed=0)
    diff = runs.config_diff(cfgs["gspo/seed0"], cfgs["grpo/seed0"])
    assert set(diff) == {"name", "loss"} and diff["name"] == ("gspo", "grpo")  # both mu = 4


def test_arm_fields_win_over_the_budget():
    shared = {k: v for k, v in BUDGET.items() if k != "group_size"}
    cfgs = runs.configs(gfpo.ARMS, {**shared, "seed": 0})
    assert list(cfgs) == list(gfpo.ARMS)
    assert cfgs["grpo"].gfpo_k is None and cfgs["grpo"].group_size == 8 and cfgs["grpo"].name == "grpo"
    assert (cfgs["gfpo-k4-g16-short"].group_size, cfgs["gfpo-k4-g16-short"].gfpo_k) == (16, 4)
    assert runs.configs(dr_grpo.ARMS, BUDGET, seeds=[2])["dr_grpo/seed2"].loss.max_len == BUDGET.get(
        "max_new_tokens", presets.get("dr_grpo").max_new_tokens)


def test_run_dirs_are_keyed_by_configuration():
    cfgs = runs.configs(gspo.ARMS, BUDGET, seeds=range(2))
    dirs = runs.run_dirs("smoke", "04_gspo", cfgs)
    assert dirs["gspo/seed0"].parts[-3:-1] == ("runs", "04_gspo") and "smoke" in dirs["grpo/seed1"].parts
    assert dirs["gspo/seed0"].name.startswith("gspo-seed0-") and len(dirs["gspo/seed0"].name) == len("gspo-seed0-") + 8
    assert len(set(dirs.values())) == 4
    changed = runs.run_dirs("smoke", "04_gspo", {k: c.replace(steps=4) for k, c in cfgs.items()})
    assert all(changed[k] != dirs[k] and changed[k].parent == dirs[k].parent for k in cfgs)
    table = runs.folder_table(dirs)
    assert list(table.index) == list(cfgs) and table.loc["grpo/seed1", "folder"].startswith("reports/smoke/runs/04_gspo/")


def test_folder_table_says_which_runs_are_finished(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text('{"finished": true}')
    table = runs.folder_table({"a/seed0": tmp_path / "a", "b/seed0": tmp_path / "b"})
    assert table["finished"].tolist() == [True, False] and table.loc["b/seed0", "folder"] == str(tmp_path / "b")


def test_windows_and_means_skip_none_and_nan():
    rows = [{"x": 1.0}, {"x": None}, {"x": float("nan")}, {"x": 3.0}, {"y": 1.0}]
    assert runs.mean_over(rows, "x") == 2.0 and math.isnan(runs.mean_over(rows, "z"))
    assert runs.window(rows, 0.4) == rows[-2:] and runs.window(rows, 0.4, "first") == rows[:2]
    assert runs.window(rows[:2], 0.01) == rows[1:2]  # at least one step


def test_arm_of_and_by_arm_read_the_names_configs_makes():
    named = {"grpo/seed0": 1, "dr_grpo/seed0": 2, "grpo/seed1": 3, "gspo": 4}
    assert [runs.arm_of(n) for n in named] == ["grpo", "dr_grpo", "grpo", "gspo"]
    assert runs.by_arm(named, "grpo") == {"grpo/seed0": 1, "grpo/seed1": 3}  # not dr_grpo: the arm, not a suffix
    assert runs.by_arm(named, "gspo", "dr_grpo") == {"dr_grpo/seed0": 2, "gspo": 4}  # in `named`'s order
    assert runs.by_arm(named, "dapo") == {}


def test_run_key_is_the_name_configs_gives_and_arm_of_inverts():
    from gpolib.lab.runs import arm_of, run_key

    assert run_key("gfpo-k4-g16-short", 2) == "gfpo-k4-g16-short/seed2" and run_key("grpo") == "grpo"
    assert arm_of(run_key("clip_higher", 0)) == "clip_higher"
