"""gpolib.workbook.prefetch builds the same runs as the notebooks, trains a shared baseline once, seed-major."""
import re

import pytest

from gpolib import paths
from gpolib.workbook import prefetch, workbook

NOTEBOOKS = paths.repo_root() / "notebooks"


def _jobs(*prefixes):
    """The full profile's jobs (01 and 06 share a budget there); building configs trains nothing."""
    return {j.prefix: j for j in workbook.plan("full", list(prefixes), NOTEBOOKS)}


@pytest.fixture(autouse=True)
def empty_runs(monkeypatch, tmp_path):
    """Run folders under a temporary root: no run counts as finished."""
    monkeypatch.setattr(paths, "runs_dir", lambda profile="full", root=None: tmp_path / profile)


def test_the_grpo_baseline_of_06_is_01s_runs():
    jobs = _jobs("01", "06")
    r01, r06 = prefetch.notebook_runs(jobs["01"]), prefetch.notebook_runs(jobs["06"])
    # notebook 06 pairs its 3 seeds with 01's first 3 (01 runs 6: D2's precision rule)
    assert r01 and {n for n in r06 if n.startswith("grpo/")} == {f"grpo/seed{s}" for s in range(3)} < set(r01)
    for name, (cfg, folder) in r01.items():
        assert folder.parent.name == "01_grpo"
        if name in r06:
            assert r06[name][1] == folder and r06[name][0] == cfg
    assert all(folder.parent.name == "06_dr_grpo" for n, (_, folder) in r06.items() if n.startswith("dr_grpo/"))


def test_pending_lists_each_folder_once_seed_major():
    jobs = _jobs("01", "06")
    todo = prefetch.pending([jobs["01"], jobs["06"]])
    folders = [f for _, _, f in todo]
    assert len(folders) == len(set(folders)) == 9  # grpo seeds 0-5 (seeds 0-2 once, shared) + dr_grpo seeds 0-2
    assert [c.seed for _, c, _ in todo] == [0, 0, 1, 1, 2, 2, 3, 4, 5]
    (folders[0] / "summary.json").parent.mkdir(parents=True)
    (folders[0] / "summary.json").write_text("{}")  # a finished run is not trained again
    assert [f for _, _, f in prefetch.pending([jobs["01"], jobs["06"]])] == folders[1:]


def test_notebooks_with_arms_build_their_runs_from_them():
    """The notebook's own cells use its module's ARMS (and HOME), so prefetch and the notebook agree."""
    for prefix, path in workbook.list_notebooks(NOTEBOOKS).items():
        name = path.stem.split("_", 1)[1]
        module = prefetch.topic_module(path.stem)
        if not hasattr(module, "ARMS"):  # None (no topic module) has no ARMS either
            continue
        src = path.read_text()
        assert re.search(rf"runs\.configs\({name}\.ARMS, BUDGET", src), path.name
        home = rf", {name}\.HOME\)" if hasattr(module, "HOME") else r"\)"
        assert re.search(rf'runs\.run_dirs\(PROFILE, \\"{path.stem}\\", CONFIGS{home}', src), path.name


def test_the_whole_workbook_plans_without_error():
    """`make reproduce JOBS=n` prefetches every notebook: those without a topic module (00, 90) train nothing
    ahead (00 trains its GRPO run in its own cells) and do not stop the others."""
    jobs = workbook.plan("full", None, NOTEBOOKS)
    by_prefix = {j.prefix: prefetch.notebook_runs(j) for j in jobs}
    assert by_prefix["00"] == {} and by_prefix["90"] == {}
    assert len(by_prefix["01"]) == 6 and len(by_prefix["03"]) == 18
    # 01 (6 seeds), 02 (S1's grid through its prefetch hooks: 5 mu x 2 lr x 3 seeds), 03, 04 (8 seeds), 05,
    # 06 (dr_grpo), 07 (7 seeds: dapo, vapo and GRPO's seed 6 beyond 01's), 08 (its 6 arms x 3 seeds, P3's grid,
    # 30 cells of one seed, and the replay probe, 2 arms at 2 cells; no P4 operating point: no P4 arms), 09, 10 (its
    # GRPO arm is 09's)
    assert len(by_prefix["02"]) == 30
    expected = 6 + 30 + 18 + 16 + 18 + 3 + 15 + 18 + 30 + 4 + 18 + 12
    assert len(prefetch.pending(jobs)) == expected


def test_run_cost_counts_generated_and_trained_positions():
    """By hand: 2 prompts x G = 4 x 20 tokens = 160 positions generated and 160 trained per pass, 3 steps."""
    from gpolib.config import TrainConfig

    base = dict(prompts_per_step=2, group_size=4, max_new_tokens=20, steps=3)
    assert prefetch.run_cost(TrainConfig(**base, mu=1)) == 3 * (160 + 160)
    assert prefetch.run_cost(TrainConfig(**base, mu=2)) == 3 * (160 + 320)
    assert prefetch.run_cost(TrainConfig(**base, gfpo_k=2)) == 3 * (160 + 80)  # 2 of 4 responses trained
    assert prefetch.run_cost(TrainConfig(**base, dynamic_sampling=True, max_gen_batches=3)) == 3 * (320 + 160)
    # a value model: its pass beside the policy's, and one pre-training step (generate, train the critic)
    gae = TrainConfig(**base, advantage_estimator="gae", value_pretrain_steps=1)
    assert prefetch.run_cost(gae) == 3 * (160 + 2 * 160) + (160 + 160)


def test_long_runs_queue_first_and_equal_ones_seed_major():
    """07: the VAPO runs (a value model, 50 pre-training steps) first, then GRPO (01's runs) and DAPO, equal in
    cost, seed-major."""
    jobs = _jobs("07")
    todo = prefetch.pending([jobs["07"]])
    seeds = range(jobs["07"].params["SEEDS"])  # 7 (V2's precision rule)
    assert [label.split()[1] for label, _, _ in todo] == (
        [f"vapo/seed{s}" for s in seeds] + [f"{a}/seed{s}" for s in seeds for a in ("grpo", "dapo")])
    costs = [prefetch.run_cost(c) for _, c, _ in todo]
    assert costs == sorted(costs, reverse=True) and costs[0] > 1.5 * costs[-1]


def test_runs_of_a_deeper_model_queue_before_equal_runs_of_a_shallower_one():
    """08: every run on the fine-grained MoE (8 layers) before the 8-expert MoE's (4 layers), whose token counts are
    the same: the short runs fill in at the end instead of leaving one long run alone there."""
    from gpolib.models import EMBEDDED

    assert prefetch.model_layers(EMBEDDED["moe-fine"]) == 8 and prefetch.model_layers(EMBEDDED["moe"]) == 4
    assert prefetch.model_layers("Qwen/Qwen3-0.6B") == 1  # a hub name: no local config to read
    todo = prefetch.pending([_jobs("08")["08"]])
    arms = [label.split()[1].split("/")[0] for label, _, _ in todo]
    arms = [a for a in arms if not a.startswith(("grid-", "probe_"))]  # 6-step cells: by their own cost
    assert len(arms) == 18 and arms[-3:] == ["grpo_coarse"] * 3 and "grpo_coarse" not in arms[:-3]
