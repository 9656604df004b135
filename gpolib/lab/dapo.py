"""Notebook 03, DAPO (Yu et al., 2025): claims D1-D5 (their measurements come with the notebook).

- D1 Clip-Higher keeps entropy up, D2 all-correct groups and dynamic sampling, D3 token-level loss,
  D4 soft overlong punishment, D5 the ablation ladder: `verdict_d1` ... `verdict_d5`.
"""
from __future__ import annotations

from .verdicts import EXACT_TOL, NOT, PARTLY, REPRODUCED, Verdict, at_least, grade, majority, mean, seeds_text, wins


def verdict_d1(e: dict) -> Verdict:
    hi, base = e["entropy_high"], e["entropy_base"]
    n_wins = wins(hi, base)
    return majority(n_wins, len(hi)), (f"entropy eps_high .28 {seeds_text(hi)} vs .2 {seeds_text(base)}, "
                                        f"higher in {n_wins}/{len(hi)} seeds; "
                                        f"mean pi_old of up-clipped tokens {e['pi_old_upclipped']:.3f}")


def verdict_d2(e: dict) -> Verdict:
    rise = e["all_correct_last"] - e["all_correct_first"]
    v = grade([at_least(rise, 0.10), e["zero_var_groups_ds"] == 0])
    return v, (f"all-correct share {e['all_correct_first']:.2f} -> {e['all_correct_last']:.2f}; "
               f"zero-variance groups with DS {e['zero_var_groups_ds']}; "
               f"gen batches/step {e['gen_batches_per_step']:.2f}")


def verdict_d3(e: dict) -> Verdict:
    ok = [abs(e["weight_ratio_seq_mean"] - 10) <= EXACT_TOL, abs(e["weight_ratio_token_mean"] - 1) <= EXACT_TOL]
    return (REPRODUCED if all(ok) else NOT), (f"weight ratio len 10/100: seq-mean {e['weight_ratio_seq_mean']:.6g}, "
                                              f"token-mean {e['weight_ratio_token_mean']:.6g}")


def verdict_d4(e: dict) -> Verdict:
    ok = bool(e["eq13_exact"]) and e["trunc_with_shaping"] < e["trunc_without_shaping"]
    return (REPRODUCED if ok else NOT), (f"truncation share {e['trunc_with_shaping']:.3f} with shaping vs "
                                         f"{e['trunc_without_shaping']:.3f} without; Eq. 13 exact: {bool(e['eq13_exact'])}")


def verdict_d5(e: dict) -> Verdict:
    means = [mean(accs) for accs in e["ladder"].values()]
    steps_up = all(b >= a for a, b in zip(means, means[1:]))
    v = REPRODUCED if steps_up and means[-1] > means[0] else PARTLY if means[-1] > means[0] else NOT
    return v, "ladder " + " -> ".join(f"{100 * m:.1f}" for m in means)


VERDICTS = {"D1": verdict_d1, "D2": verdict_d2, "D3": verdict_d3, "D4": verdict_d4, "D5": verdict_d5}
