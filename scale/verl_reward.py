"""verl custom reward for the embedded task: `reward.custom_reward_function.path=scale/verl_reward.py`.

verl calls compute_score(data_source, solution_str, ground_truth, extra_info) once per response; this is
gpolib's strict parser (`gpolib.rewards.correctness_reward`). DAPO's soft overlong punishment is added
by verl's "dapo" reward manager on top (exported by `gpolib.export.to_verl`).
"""
from gpolib.rewards import correctness_reward


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_) -> float:
    """1.0 when the response's final `A=<int>` line equals the ground truth, else 0.0."""
    return correctness_reward(solution_str, int(ground_truth))
