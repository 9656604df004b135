"""Claims scoreboard: one verdict per claim of DESIGN.md, from measured numbers.

A notebook's last cell calls `record(claim_id, evidence, runs, PROFILE)`; the verdict
logic (the criterion column of DESIGN.md) lives here, in one function per claim that
maps an evidence dict to `(verdict, ours_text)`. `build(profile)` gathers the records
into `claims.json` and `claims.md`.

Accuracies, shares and fractions are in [0, 1]; "points" are 0.01.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from . import paths

REPRODUCED, PARTLY, NOT, NOT_RUN = "reproduced", "partly", "not reproduced", "not yet run"
EXACT_TOL = 1e-6
"""tolerance for claims that are identities (D3, P1, R1)"""
S1_SEQ_REL_TOL = 0.1
"""S1: 'the spread of log s_i does not grow' = its slope per token is at most 10% of the slope of Var[log prod rho]"""
NOISE_Z = 2.0
"""'within seed noise' = |difference of means| <= 2 standard errors of that difference"""

Verdict = tuple[str, str]


# ---------------------------------------------------------------- helpers

def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def _var(xs) -> float:
    xs, m = list(xs), _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0


def seed_noise(a, b) -> float:
    """Standard error of mean(a) - mean(b) over seeds (0 with one seed each)."""
    return math.sqrt(_var(a) / len(a) + _var(b) / len(b))


def _ge(x: float, threshold: float) -> bool:
    """x >= threshold, forgiving float rounding (0.35 - 0.30 counts as a 5-point rise)."""
    return x >= threshold - 1e-9


def _wins(a, b) -> int:
    """Seeds where a > b (paired by position)."""
    return sum(x > y for x, y in zip(a, b))


def _majority(wins: int, n: int) -> str:
    """'>= 2 of 3 seeds': reproduced needs >= 3 seeds and wins in >= 2/3 of them."""
    if n >= 3 and 3 * wins >= 2 * n:
        return REPRODUCED
    return PARTLY if wins > 0 else NOT


def _grade(conditions: list[bool]) -> str:
    """All met -> reproduced, some -> partly, none -> not reproduced."""
    return REPRODUCED if all(conditions) else PARTLY if any(conditions) else NOT


def _seeds(xs) -> str:
    return f"{_mean(xs):.3f}±{math.sqrt(_var(xs)):.3f} (n={len(xs)})"


# ---------------------------------------------------------------- verdicts, one per claim

def verdict_g1(e: dict) -> Verdict:
    gain = e["acc_after"] - e["acc_before"]
    v = REPRODUCED if _ge(gain, 0.05) else PARTLY if gain > 0 else NOT
    return v, f"held-out acc {e['acc_before']:.3f} -> {e['acc_after']:.3f} ({100 * gain:+.1f} pts)"


def verdict_g2(e: dict) -> Verdict:
    v = _grade([e["k3_min"] >= 0, _ge(0.02, e["k3_rel_err"])])
    return v, (f"min k3 {e['k3_min']:.2e}, rel. err {100 * e['k3_rel_err']:.2f}%, "
               f"Var k3/Var k1 = {e['k3_var'] / e['k1_var']:.3f}")


def verdict_s1(e: dict) -> Verdict:
    grows = e["slope"] > 0 and e["r2"] >= 0.5
    flat = _ge(S1_SEQ_REL_TOL * abs(e["slope"]), e["seq_spread_slope"])
    v = REPRODUCED if grows and flat else PARTLY if e["slope"] > 0 else NOT
    return v, (f"Var[log prod rho] slope {e['slope']:.2e}/token (R^2 {e['r2']:.2f}); "
               f"log s_i spread slope {e['seq_spread_slope']:.2e}")


def verdict_d1(e: dict) -> Verdict:
    hi, base = e["entropy_high"], e["entropy_base"]
    wins = _wins(hi, base)
    return _majority(wins, len(hi)), (f"entropy eps_high .28 {_seeds(hi)} vs .2 {_seeds(base)}, "
                                      f"higher in {wins}/{len(hi)} seeds; "
                                      f"mean pi_old of up-clipped tokens {e['pi_old_upclipped']:.3f}")


def verdict_d2(e: dict) -> Verdict:
    rise = e["all_correct_last"] - e["all_correct_first"]
    v = _grade([_ge(rise, 0.10), e["zero_var_groups_ds"] == 0])
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
    means = [_mean(accs) for accs in e["ladder"].values()]
    steps_up = all(b >= a for a, b in zip(means, means[1:]))
    v = REPRODUCED if steps_up and means[-1] > means[0] else PARTLY if means[-1] > means[0] else NOT
    return v, "ladder " + " -> ".join(f"{100 * m:.1f}" for m in means)


def verdict_p1(e: dict) -> Verdict:
    keys = ("seq_ratio_err", "token_eq_err_value", "token_eq_err_grad", "one_token_err")
    worst = max(e[k] for k in keys)
    return (REPRODUCED if worst <= EXACT_TOL else NOT), f"largest identity error {worst:.1e}"


def verdict_p2(e: dict) -> Verdict:
    ratio = _mean(e["clip_gspo"]) / max(_mean(e["clip_grpo"]), 1e-12)
    diff = _mean(e["reward_gspo"]) - _mean(e["reward_grpo"])
    noise = seed_noise(e["reward_gspo"], e["reward_grpo"])
    v = _grade([_ge(ratio, 10), _ge(diff, -NOISE_Z * noise)])
    return v, f"clip share GSPO/GRPO = {ratio:.1f}x; final reward diff {diff:+.3f} (noise {noise:.3f})"


def verdict_p3(e: dict) -> Verdict:
    layers = e["route_change_per_layer"]
    spread = e["ratio_spread_moe"] > e["ratio_spread_dense"]
    v = REPRODUCED if min(layers) > 0.01 and spread else PARTLY if max(layers) > 0.01 or spread else NOT
    return v, ("routing change per layer " + ", ".join(f"{100 * x:.1f}%" for x in layers)
               + f"; token-ratio spread MoE {e['ratio_spread_moe']:.3g} vs dense {e['ratio_spread_dense']:.3g}")


def verdict_p4(e: dict) -> Verdict:
    gspo, plain = e["reward_gspo"], e["reward_grpo_no_replay"]
    diff = _mean(gspo) - _mean(plain)
    v = REPRODUCED if diff >= 0 else PARTLY if diff >= -NOISE_Z * seed_noise(gspo, plain) else NOT
    return v, (f"final reward GSPO {_seeds(gspo)}, GRPO no replay {_seeds(plain)}, "
               f"GRPO + replay {_seeds(e['reward_grpo_replay'])}")


def verdict_p5(e: dict) -> Verdict:
    eng, rec = e["reward_engine"], e["reward_recompute"]
    diff = _mean(eng) - _mean(rec)
    v = _grade([abs(diff) <= NOISE_Z * seed_noise(eng, rec), e["seq_mismatch"] < e["token_mismatch"]])
    return v, (f"reward engine - recompute {diff:+.3f} (noise {seed_noise(eng, rec):.3f}); "
               f"mismatch seq {e['seq_mismatch']:.3g} vs token {e['token_mismatch']:.3g}")


def verdict_f1(e: dict) -> Verdict:
    cut = 1 - e["len_gfpo"] / e["len_grpo"]
    acc_ok = _ge(e["acc_gfpo"] - e["acc_grpo"], -0.03)
    v = REPRODUCED if _ge(cut, 0.30) and acc_ok else PARTLY if cut > 0 else NOT
    return v, (f"length {e['len_grpo']:.0f} -> {e['len_gfpo']:.0f} ({100 * cut:.0f}% shorter); "
               f"acc {e['acc_grpo']:.3f} -> {e['acc_gfpo']:.3f}")


def verdict_f2(e: dict) -> Verdict:
    ok = e["reduction_k4_g16"] > e["reduction_k6_g8"]
    return (REPRODUCED if ok else NOT), (f"length reduction k/G=4/16 {100 * e['reduction_k4_g16']:.0f}% vs "
                                         f"6/8 {100 * e['reduction_k6_g8']:.0f}%")


def verdict_r1(e: dict) -> Verdict:
    worst = max(e["adv_err"], e["weight_err"])
    return (REPRODUCED if worst <= EXACT_TOL else NOT), f"largest error vs hand-computed advantages/weights {worst:.1e}"


def verdict_r2(e: dict) -> Verdict:
    wins = _wins(e["growth_grpo"], e["growth_dr"])
    return _majority(wins, len(e["growth_grpo"])), (f"incorrect-length growth GRPO {_seeds(e['growth_grpo'])} vs "
                                                    f"Dr. GRPO {_seeds(e['growth_dr'])}; larger in {wins} seeds")


def verdict_v1(e: dict) -> Verdict:
    mem, step = e["mem_grpo"] / e["mem_ppo"], e["time_grpo"] / e["time_ppo"]
    return _grade([mem < 1, step < 1]), f"GRPO/PPO peak memory {mem:.2f}, step time {step:.2f}"


def verdict_v2(e: dict) -> Verdict:
    vapo, dapo, grpo = e["acc_vapo"], e["acc_dapo"], e["acc_grpo"]
    v = REPRODUCED if _mean(vapo) >= _mean(dapo) else PARTLY if _mean(vapo) >= _mean(grpo) else NOT
    if v == REPRODUCED and len(vapo) < 3:
        v = PARTLY
    return v, f"held-out acc VAPO {_seeds(vapo)}, DAPO {_seeds(dapo)}, GRPO {_seeds(grpo)}"


# ---------------------------------------------------------------- registry

@dataclass(frozen=True)
class Claim:
    """One claim of DESIGN.md and how to judge it."""

    id: str
    """claim id used in notebooks, tests and the scoreboard"""
    paper: str
    """source paper"""
    section: str
    """section / equation / table in that paper"""
    claim: str
    """the claim in one line"""
    paper_number: str
    """the paper's own number or statement, short"""
    criterion: str
    """criterion at our scale, copied from DESIGN.md"""
    notebook: str
    """notebook that measures it"""
    evidence: tuple[str, ...]
    """keys that `record` requires in the evidence dict"""
    judge: Callable[[dict], Verdict]
    """evidence -> (verdict, ours_text)"""


def _c(id, paper, section, claim, paper_number, criterion, notebook, evidence, judge) -> Claim:
    return Claim(id, paper, section, claim, paper_number, criterion, notebook, tuple(evidence.split()), judge)


CLAIMS: dict[str, Claim] = {c.id: c for c in [
    _c("G1", "DeepSeekMath", "4.1, 5.2", "GRPO (no critic) improves the policy",
       "GSM8K 82.9 -> 88.2, MATH 46.8 -> 51.7",
       "held-out accuracy of the embedded base rises >= 5 points",
       "01_grpo", "acc_before acc_after", verdict_g1),
    _c("G2", "DeepSeekMath", "Eq. 4", "k3 KL estimator is unbiased and >= 0", "unbiased, always >= 0",
       "on a small vocab: all k3 >= 0; mean within 2% of exact KL at 1e5 samples; variance vs k1 reported",
       "01_grpo", "k3_min k3_rel_err k3_var k1_var", verdict_g2),
    _c("S1", "GSPO / seed", "2", "token-ratio products decay: 0.99^200 = 0.134", "0.99^200 = 0.134",
       "analytic value; after mu>=2 updates, Var[log prod rho] grows with length (slope > 0, R^2 >= 0.5 "
       "over length buckets) while the spread of log s_i does not grow",
       "02_ratio_decay", "slope r2 seq_spread_slope", verdict_s1),
    _c("D1", "DAPO", "3.1", "Clip-Higher keeps entropy up", "up-clipped tokens have pi < 0.2; entropy no longer collapses",
       "eps_high 0.28 vs 0.2 (mu>=4): higher mean entropy over the last 25% of steps in >= 2 of 3 seeds; "
       "mean pi_old of up-clipped tokens reported (paper: < 0.2)",
       "03_dapo", "entropy_high entropy_base pi_old_upclipped", verdict_d1),
    _c("D2", "DAPO", "3.2", "share of all-correct groups rises; dynamic sampling removes them",
       "all-correct share rises steadily (Fig. 3b)",
       "all-correct share rises >= 0.10 from first to last 20% of steps; with dynamic sampling every batch has "
       "0 zero-variance groups; gen batches per step logged",
       "03_dapo", "all_correct_first all_correct_last zero_var_groups_ds gen_batches_per_step", verdict_d2),
    _c("D3", "DAPO", "3.3", "sample-level loss down-weights tokens of long answers", "qualitative (Fig. 4)",
       "exact: per-token gradient weight ratio (len 10 vs 100) = 10 under seq-mean, 1 under token-mean; "
       "length/entropy curves of both reported",
       "03_dapo", "weight_ratio_seq_mean weight_ratio_token_mean", verdict_d3),
    _c("D4", "DAPO", "3.4", "soft overlong punishment cuts truncation", "more stable training, higher AIME (Fig. 5)",
       "Eq. 13 exact in tests; truncation share over the last 20% of steps lower with shaping than without",
       "03_dapo", "eq13_exact trunc_with_shaping trunc_without_shaping", verdict_d4),
    _c("D5", "DAPO", "Tab. 1", "each component adds accuracy", "AIME24 30 -> 36 -> 38 -> 41 -> 42 -> 50",
       "the same ladder at our scale, seeds averaged, shown beside the paper's",
       "03_dapo", "ladder", verdict_d5),
    _c("P1", "GSPO", "Eq. 7, 13-14", "sequence ratio; GSPO-token = GSPO", "identity",
       "identities exact to 1e-6 (value and gradient); GSPO = GRPO when every response has one token",
       "04_gspo", "seq_ratio_err token_eq_err_value token_eq_err_grad one_token_err", verdict_p1),
    _c("P2", "GSPO", "5.2", "GSPO clips ~100x more tokens yet learns as well", "~2 orders of magnitude more clipping (Fig. 4)",
       "clip share GSPO (3e-4/4e-4) >= 10x GRPO (0.2/0.28) with mu>=2; final reward not worse beyond seed noise",
       "04_gspo", "clip_gspo clip_grpo reward_gspo reward_grpo", verdict_p2),
    _c("P3", "GSPO", "5.3", "MoE routing is volatile (~10% of experts change per update)",
       "~10% of activated experts change per update (Qwen3-30B-A3B)",
       "on the embedded Qwen3-MoE after one update: share of (token, layer) top-k sets that change > 1%, per layer; "
       "token-ratio spread MoE > dense",
       "04_gspo", "route_change_per_layer ratio_spread_moe ratio_spread_dense", verdict_p3),
    _c("P4", "GSPO", "5.3", "GRPO on MoE needs Routing Replay; GSPO does not",
       "GRPO without Routing Replay fails to converge",
       "GRPO without replay vs with replay vs GSPO: GSPO final reward >= GRPO without replay; instability signs reported",
       "04_gspo", "reward_gspo reward_grpo_no_replay reward_grpo_replay", verdict_p4),
    _c("P5", "GSPO", "5.4", "rollout-engine likelihoods suffice for GSPO", "no recompute needed",
       "GSPO with engine logprobs as pi_old matches GSPO with recompute within seed noise; "
       "sequence-level mismatch < token-level mismatch",
       "04_gspo", "reward_engine reward_recompute seq_mismatch token_mismatch", verdict_p5),
    _c("F1", "GFPO", "4-5", "filtering to short/efficient answers cuts length, keeps accuracy",
       "length inflation cut 46-71% at matched accuracy",
       "length reduction >= 30% vs GRPO (G=8) with accuracy within 3 points; ELR (GFPO Eq. 4) per variant",
       "05_gfpo", "len_grpo len_gfpo acc_grpo acc_gfpo", verdict_f1),
    _c("F2", "GFPO", "5", "thinking less requires sampling more", "larger G at fixed k cuts more length",
       "reduction with k/G = 4/16 > with 6/8",
       "05_gfpo", "reduction_k4_g16 reduction_k6_g8", verdict_f2),
    _c("R1", "Dr. GRPO", "3.1", "std and 1/|o| normalisation bias", "qualitative (Eq. 3 vs 4)",
       "exact advantages/weights printed (e.g. 1 correct of 8) and tested",
       "06_dr_grpo", "adv_err weight_err", verdict_r1),
    _c("R2", "Dr. GRPO", "3.2", "GRPO grows incorrect answers longer; Dr. GRPO does not",
       "incorrect-answer length keeps growing under GRPO (Fig. 5)",
       "growth of incorrect-answer length larger under GRPO than Dr. GRPO in >= 2 of 3 seeds",
       "06_dr_grpo", "growth_grpo growth_dr", verdict_r2),
    _c("V1", "DeepSeekMath / seed", "4.1", "GRPO drops PPO's critic and its cost",
       "value model ~ policy size: memory and compute saved",
       "PPO (policy + value model, GAE) vs GRPO at equal samples: GRPO's peak memory and step time lower; ratios reported",
       "07_ppo_vapo", "mem_ppo mem_grpo time_ppo time_grpo", verdict_v1),
    _c("V2", "VAPO", "4-5", "value-based token-level advantages (decoupled, length-adaptive GAE) train better than "
       "group baselines", "AIME24 60.4 (VAPO) vs 50 (DAPO), Qwen2.5-32B",
       "VAPO vs DAPO vs GRPO, 3 seeds, equal samples: held-out accuracy and stability reported; "
       "reproduced if VAPO >= DAPO",
       "07_ppo_vapo", "acc_vapo acc_dapo acc_grpo", verdict_v2),
]}


# ---------------------------------------------------------------- record and build

def _plain(x: Any) -> Any:
    """JSON fallback for numpy scalars/arrays and 0-d tensors."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"evidence value of type {type(x).__name__} is not JSON serialisable")


def _relative(run: str | Path, root: Path | str | None) -> str:
    """Run paths are stored relative to the repository root when they lie inside it."""
    if not Path(run).is_absolute():
        return str(run)
    base = Path(root) if root is not None else paths.repo_root()
    try:
        return str(Path(run).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(run)


def judge(claim_id: str, evidence: dict) -> Verdict:
    """Validate the id and evidence keys, then apply the claim's criterion."""
    if claim_id not in CLAIMS:
        raise ValueError(f"unknown claim id {claim_id!r}; known: {', '.join(CLAIMS)}")
    claim = CLAIMS[claim_id]
    missing = [k for k in claim.evidence if k not in evidence]
    if missing:
        raise ValueError(f"claim {claim_id}: evidence is missing {', '.join(missing)} (needs {', '.join(claim.evidence)})")
    plain = json.loads(json.dumps(evidence, default=_plain))
    return claim.judge(plain)


def record(claim_id: str, evidence: dict, runs: list[str], profile: str,
           root: Path | str | None = None) -> dict:
    """Judge a claim, write `claims_dir(profile)/<id>.json`, print one line, return the record."""
    verdict, ours = judge(claim_id, evidence)
    claim = CLAIMS[claim_id]
    rec = {"id": claim_id, "verdict": verdict, "ours": ours, "paper": claim.paper_number,
           "paper_name": f"{claim.paper} {claim.section}", "claim": claim.claim,
           "criterion": claim.criterion, "notebook": claim.notebook, "runs": [_relative(r, root) for r in runs],
           "evidence": evidence, "profile": profile,
           "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out = paths.claims_dir(profile, root) / f"{claim_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=2, default=_plain) + "\n")
    print(f"{claim_id} [{profile}]: {verdict.upper()} — {ours}")
    return json.loads(out.read_text())


def collect(profile: str = "full", root: Path | str | None = None) -> list[dict]:
    """One entry per registry claim, in order; claims without a record are 'not yet run'."""
    folder, rows = paths.claims_dir(profile, root), []
    for cid, claim in CLAIMS.items():
        f = folder / f"{cid}.json"
        rec = json.loads(f.read_text()) if f.exists() else {
            "id": cid, "verdict": NOT_RUN, "ours": "", "paper": claim.paper_number,
            "criterion": claim.criterion, "notebook": claim.notebook, "runs": []}
        rows.append({**rec, "paper_name": f"{claim.paper} {claim.section}", "claim": claim.claim})
    return rows


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def scoreboard_markdown(profile: str = "full", root: Path | str | None = None) -> str:
    """The scoreboard as a markdown table (for claims.md and the README)."""
    head = "| id | paper | claim | paper's number | ours | criterion | verdict | notebook |"
    lines = [head, "|" + "---|" * 8]
    for r in collect(profile, root):
        cells = [r["id"], r["paper_name"], r["claim"], r["paper"], r["ours"], r["criterion"],
                 f"**{r['verdict']}**", f"{r['notebook']}.ipynb"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def build(profile: str = "full", root: Path | str | None = None) -> Path:
    """Write `claims.json` and `claims.md` into `reports_dir(profile)`; returns claims.json."""
    out = paths.reports_dir(profile, root)
    out.mkdir(parents=True, exist_ok=True)
    rows = collect(profile, root)
    (out / "claims.json").write_text(json.dumps(rows, indent=2, default=_plain) + "\n")
    note = ("\n> Smoke profile: tiny budgets that check the code runs; these numbers are "
            "not a replication.\n" if profile == "smoke" else "")
    (out / "claims.md").write_text(f"# Claims scoreboard ({profile} profile)\n{note}\n"
                                   + scoreboard_markdown(profile, root))
    return out / "claims.json"


README_MARKERS = ("<!-- scoreboard:start -->", "<!-- scoreboard:end -->")
README_FIGURES = ("01_grpo_curves.png", "02_ratio_vs_length.png")


def readme_section(profile: str = "full", root: Path | str | None = None) -> str:
    """Short scoreboard for the README: claims that have run, a count of the rest, two figures."""
    rows = collect(profile, root)
    done = [r for r in rows if r["verdict"] != NOT_RUN]
    lines = ["| id | claim | paper | ours | verdict |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in (r["id"], r["claim"], r["paper"], r["ours"], f"**{r['verdict']}**"))
              + " |" for r in done]
    waiting = [r["id"] for r in rows if r["verdict"] == NOT_RUN]
    text = "\n".join(lines) + "\n"
    if waiting:
        text += f"\nNot yet run: {', '.join(waiting)} (their notebooks come next). Full table: `reports/claims.md`.\n"
    figs = paths.figures_dir(profile, root)
    for name in README_FIGURES:
        if (figs / name).exists():
            text += f"\n![{name}]({(figs / name).relative_to(paths.repo_root() if root is None else Path(root))})\n"
    return text


def update_readme(profile: str = "full", root: Path | str | None = None) -> bool:
    """Replace the README's scoreboard section (between the markers); False if it has none."""
    readme = (paths.repo_root() if root is None else Path(root)) / "README.md"
    if not readme.exists():
        return False
    text = readme.read_text()
    start, end = README_MARKERS
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{start}\n{readme_section(profile, root)}{end}{tail}")
    return True
