"""Notebook 07, PPO and VAPO (the value-model baselines): claims V1 and V2.

- V1, what the critic costs: PPO (policy + value model, GAE) vs GRPO at equal generated samples, measured by
  benchmarks/value_cost.py (`load_cost`, `cost_table`, `arithmetic_table`) and judged by `V1_RULE`;
- V2, value-based token-level advantages vs group baselines: the arms `ARMS` (GRPO = notebook 01's runs,
  `HOME`), held-out evidence per seed (`v2_evidence`) judged by `V2_RULE`; the value model's fit over training
  and during pre-training (`value_curves`, `pretrain_curves`);
- credit assignment you can see: per-token advantages of one correct and one incorrect response of a trained
  VAPO policy beside GRPO's one-number-per-response advantages (`final_trainer`, `advantage_demo`, kept in
  the run's folder by `run_advantage_demo`, `advantage_heatmap`);
- GAE by hand on a short response (`gae_by_hand`, `gae_demo`).
Derivations live in notebook 07; docstrings name the formula they compute.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..gae import decoupled_gae, gae, length_adaptive_lambda, terminal_rewards
from ..objectives import group_advantages
from . import grpo, stats
from .prose import say
from .runs import arm_table, run_key  # noqa: F401  (arm_table: notebook 07 calls it here)

ARMS = {
    "grpo": grpo.ARMS["grpo"],
    # DAPO at equal generated samples: dynamic sampling off (it re-samples up to 3 batches per step);
    # Clip-Higher, token-level loss and soft overlong punishment stay
    "dapo": {"preset": "dapo", "dynamic_sampling": False},
    # VAPO as its preset; the 50 value pre-training rollouts of the paper written as half the RL steps
    # (= 50 at the full profile's 100 steps, 2 in a 3-step smoke run)
    "vapo": {"preset": "vapo", "value_pretrain_steps": 0.5},
}
"""run name -> preset and fields; every arm generates prompts_per_step x G samples per RL step"""
HOME = {"grpo": "01_grpo"}
"""the GRPO arm is notebook 01's runs (same budget, same configuration): trained once, reused here"""

V1_TIME = stats.AtLeast("step time PPO / GRPO (median CPU seconds per step, equal samples)", at_least=1.05,
                        fmt=".2f")
V1_MEM = stats.AtLeast("peak memory PPO / GRPO (above the process's start, equal samples)", at_least=1.05,
                       fmt=".2f")
V1_RULE = stats.AllOf(parts=(V1_TIME, V1_MEM))
"""V1: GRPO's step time and peak memory lower than PPO's, each by more than 5% (timing jitter, allocator rounding)"""
V2_DAPO = stats.NotWorse("held-out accuracy (T = 1), VAPO - DAPO")
V2_GRPO = stats.Greater("held-out accuracy (T = 1), VAPO - GRPO", "accuracy")
V2_RULE = stats.AllOf(parts=(V2_DAPO, V2_GRPO))
"""V2: VAPO not worse than DAPO and better than GRPO, paired by seed"""
RULES = {"V1": V1_RULE, "V2": V2_RULE}
"""claim id -> the rule that judges it and writes its criterion"""
COST_FILE = "benchmarks/value_cost_cpu.json"
"""the committed V1 measurement (`python benchmarks/value_cost.py --json benchmarks/value_cost_cpu.json`)"""


# ---------------------------------------------------------------- GAE on a short response

def gae_by_hand(rewards, values, gamma: float, lam: float) -> list[float]:
    """One response, a plain loop: delta_t = r_t + gamma V_{t+1} - V_t (V after the last token = 0),
    A_t = delta_t + gamma lam A_{t+1} (Schulman et al. 2016 Eq. 16)."""
    adv, a = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        v_next = values[t + 1] if t + 1 < len(rewards) else 0.0
        a = rewards[t] + gamma * v_next - values[t] + gamma * lam * a
        adv[t] = a
    return adv


def gae_demo(values, reward: float, lams=(0.0, 0.5, 0.95, 1.0), gamma: float = 1.0) -> pd.DataFrame:
    """One response with terminal `reward`: per-token A by `objectives.gae` and by hand for each lambda,
    and the decoupled value target (lambda_critic = 1: the return, `reward` at every token)."""
    v = torch.tensor([values], dtype=torch.float64)  # (1, T)
    mask = torch.ones_like(v)
    r = terminal_rewards(torch.tensor([reward], dtype=torch.float64), mask)  # (1, T)
    rows = {}
    for lam in lams:
        adv, _ = gae(r, v, mask, gamma, lam)
        rows[f"A, lambda={lam:g}"] = adv[0].tolist()
        rows[f"A by hand, lambda={lam:g}"] = gae_by_hand(r[0].tolist(), list(values), gamma, lam)
    _, target = decoupled_gae(r, v, mask, gamma, lams[0], lam_critic=1.0)
    rows["V target (lambda_critic=1)"] = target[0].tolist()
    return pd.DataFrame(rows, index=pd.RangeIndex(len(values), name="t")).T


def lambda_table(lengths, alpha: float = 0.05) -> pd.DataFrame:
    """VAPO's length-adaptive lambda_policy = 1 - 1/(alpha |y|) and the effective horizon 1/(1 - lambda) = alpha |y|."""
    lam = length_adaptive_lambda(torch.tensor(lengths), alpha)
    return pd.DataFrame({"|y|": lengths, "lambda_policy": lam.tolist(),
                         "1 / (1 - lambda)": [1 / (1 - x) if x < 1 else float("inf") for x in lam.tolist()]})


# ---------------------------------------------------------------- V1: cost

def load_cost(root: Path | str | None = None) -> dict | None:
    """The committed value_cost measurement (`COST_FILE`), or None when it has not been made."""
    from .. import paths

    f = Path(root or paths.repo_root()) / COST_FILE
    return json.loads(f.read_text()) if f.exists() else None


def cost_table(cost: dict) -> pd.DataFrame:
    """Per arm: samples per step, step time (wall, CPU) and its phases, peak and static memory (MiB); a last
    row PPO / GRPO. All from one invocation of the benchmark."""
    mib = 2 ** 20
    rows = {}
    for arm in ("grpo", "ppo"):
        r = cost["results"][arm]
        rows[arm] = {"samples/step": r["samples_per_step"], "step s (wall)": r["step_s"], "step s (CPU)": r["cpu_s"],
                     "rollout s": r["rollout_s"], "train s": r["train_s"], "value s": r["value_s"] or 0.0,
                     "peak MiB": r["peak_bytes_above_start"] / mib, "static MiB": r["static_bytes"] / mib}
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.loc["PPO / GRPO"] = df.loc["ppo"] / df.loc["grpo"]
    df.loc["PPO / GRPO", "value s"] = float("nan")
    return df


def arithmetic_table(a: dict) -> pd.DataFrame:
    """Static bytes at 0.5B from parameter counts (`gpolib.value.cost_arithmetic`): the formula, GB, x GRPO."""
    rows = [("GRPO", "2 P + 16 L", a["grpo_bytes"]),
            ("PPO, value adapter on the shared base", "2 P + 16 (2 L + head)", a["ppo_shared_bytes"]),
            ("PPO, separate value model", "4 P + 16 (2 L + head)", a["ppo_copy_bytes"])]
    return pd.DataFrame([{"setup": s, "bytes": f, "GB": b / 1e9, "x GRPO": b / a["grpo_bytes"]} for s, f, b in rows]
                        ).set_index("setup")


def v1_evidence(cost: dict) -> dict:
    """V1 evidence: median CPU seconds per step and peak bytes of each arm, the static bytes, the 0.5B ratios."""
    g, p = cost["results"]["grpo"], cost["results"]["ppo"]
    a = cost["arithmetic_05b"]
    return {"time_ppo": p["cpu_s"], "time_grpo": g["cpu_s"], "wall_ppo": p["step_s"], "wall_grpo": g["step_s"],
            "mem_ppo": p["peak_bytes_above_start"], "mem_grpo": g["peak_bytes_above_start"],
            "static_ppo": p["static_bytes"], "static_grpo": g["static_bytes"],
            "ratio_05b_shared": a["ratio_shared"], "ratio_05b_copy": a["ratio_copy"],
            "matmul_peak_gflops": cost.get("matmul_peak_gflops")}


def verdict_v1(e: dict) -> stats.Verdict:
    """V1: `V1_RULE` on the measured ratios PPO / GRPO; static bytes and the 0.5B arithmetic reported beside."""
    v = V1_RULE.judge([V1_TIME.judge(e["time_ppo"] / e["time_grpo"]), V1_MEM.judge(e["mem_ppo"] / e["mem_grpo"])])
    note = f"wall step time PPO / GRPO {e['wall_ppo'] / e['wall_grpo']:.2f}" if "wall_ppo" in e else ""
    if "static_ppo" in e:
        note += f"; static bytes PPO / GRPO {e['static_ppo'] / e['static_grpo']:.3f}"
    if "ratio_05b_shared" in e:
        note += (f"; at 0.5B by arithmetic x{e['ratio_05b_shared']:.2f} (value adapter on the shared base), "
                 f"x{e['ratio_05b_copy']:.2f} (separate value model)")
    return v.with_note(note.lstrip("; ")) if note else v


# ---------------------------------------------------------------- V2: training

def _end(summaries: dict, arm: str, seeds, key: str) -> list:
    return [summaries[run_key(arm, s)]["eval_end"][key] for s in seeds]


def last_mean(metrics: list, key: str, frac: float = 0.25) -> float:
    """Mean of `key` over the last `frac` of steps (None values skipped; nan if none)."""
    from .runs import mean_over, window
    return mean_over(window(metrics, frac, "last"), key)


def v2_evidence(summaries: dict, metrics: dict, seeds) -> dict:
    """V2 evidence per seed: held-out accuracy (T = 1) and greedy accuracy at the end of each run, held-out
    length, training entropy over the last 25% of steps, and VAPO's explained variance over the last 25%."""
    seeds = list(seeds)
    out = {}
    for arm in ARMS:
        out[f"acc_{arm}"] = _end(summaries, arm, seeds, "acc/sample")
        out[f"greedy_{arm}"] = _end(summaries, arm, seeds, "acc/greedy")
        out[f"len_{arm}"] = _end(summaries, arm, seeds, "len/mean")
        out[f"entropy_{arm}"] = [last_mean(metrics[run_key(arm, s)], "entropy/mean") for s in seeds]
    out["acc_base"] = _end({k: {"eval_end": v["eval_start"]} for k, v in summaries.items()}, "grpo", seeds, "acc/sample")
    out["ev_vapo"] = [last_mean(metrics[run_key("vapo", s)], "value/explained_var") for s in seeds]
    return out


def verdict_v2(e: dict) -> stats.Verdict:
    """V2: `V2_RULE`, VAPO - DAPO non-inferior and VAPO - GRPO > 0, paired by seed; lengths, entropy and the
    value model's explained variance reported beside."""
    v = V2_RULE.judge([V2_DAPO.judge(e["acc_vapo"], e["acc_dapo"]), V2_GRPO.judge(e["acc_vapo"], e["acc_grpo"])])
    m = stats.seed_mean
    notes = [f"accuracy (seed means) VAPO {m(e['acc_vapo'])}, DAPO {m(e['acc_dapo'])}, GRPO {m(e['acc_grpo'])}"]
    if "len_vapo" in e:
        notes.append(f"held-out length VAPO {m(e['len_vapo'], '.1f')}, DAPO {m(e['len_dapo'], '.1f')}, "
                     f"GRPO {m(e['len_grpo'], '.1f')} tokens")
    if "ev_vapo" in e:
        notes.append(f"VAPO value model's explained variance (last 25% of steps) {m(e['ev_vapo'], '.2f')}")
    return v.with_note("; ".join(notes))


VERDICTS = {"V1": verdict_v1, "V2": verdict_v2}


def seed_table(e: dict, seeds) -> pd.DataFrame:
    """Rows arm/seed: held-out accuracy (T = 1, greedy), length, training entropy (last 25%) from `v2_evidence`."""
    rows = {}
    for arm in ARMS:
        for i, s in enumerate(seeds):
            rows[run_key(arm, s)] = {"acc (T=1)": e[f"acc_{arm}"][i], "acc (greedy)": e[f"greedy_{arm}"][i],
                                     "len": e[f"len_{arm}"][i], "entropy (last 25%)": e[f"entropy_{arm}"][i]}
    return pd.DataFrame.from_dict(rows, orient="index").astype(float)


def paired_table(e: dict) -> pd.DataFrame:
    """VAPO - DAPO and VAPO - GRPO held-out accuracy: mean of the per-seed differences and its 95% t-interval."""
    rows = {}
    for other in ("dapo", "grpo"):
        iv = stats.paired(e["acc_vapo"], e[f"acc_{other}"])
        rows[f"VAPO - {other.upper()}"] = {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n}
    return pd.DataFrame.from_dict(rows, orient="index")


def cost_by_arm(metrics: dict, summaries: dict) -> pd.DataFrame:
    """Per arm (means over its seeds): generated samples per RL step, value pre-training samples, and the
    training runs' own time per step (rollout + update) and its value-model part. The times come from runs
    trained side by side on a shared machine: reported, not judged (V1 is judged on benchmarks/value_cost.py)."""
    from .runs import by_arm

    rows = {}
    for arm in ARMS:
        names = list(by_arm(metrics, arm))
        per = lambda f: float(np.mean([f(n) for n in names]))  # noqa: E731
        rows[arm] = {
            "samples / RL step": per(lambda n: np.mean([r["gen/samples"] for r in metrics[n]])),
            "pre-training samples": per(lambda n: sum(r.get("gen/samples", 0) for r in summaries[n].get("value_pretrain", []))),
            "s / step": per(lambda n: np.mean([r["time/rollout_s"] + r["time/train_s"] for r in metrics[n]])),
            "of which value s": per(lambda n: np.mean([r.get("time/value_s") or 0.0 for r in metrics[n]])),
        }
    df = pd.DataFrame.from_dict(rows, orient="index")
    df["s / step x GRPO"] = df["s / step"] / df.loc["grpo", "s / step"]
    return df


def value_curves(metrics: dict) -> dict:
    """Run name -> its rows restricted to the value model's metrics (runs with a value model only)."""
    return {name: m for name, m in metrics.items() if any(r.get("value/loss") is not None for r in m)}


def _legacy(row: dict, name: str):
    """A value metric of a pre-training row by its name; runs recorded before the metric names were unified
    wrote value_loss, value_explained_var for value/loss, value/explained_var."""
    return row.get(name, row.get(name.replace("/", "_")))


def pretrain_curves(summaries: dict) -> pd.DataFrame:
    """VAPO Value-Pretraining of each run with one: long frame (run, step, value/loss, value/explained_var)."""
    rows = [{"run": name, "step": r["step"], "value/loss": _legacy(r, "value/loss"),
             "value/explained_var": _legacy(r, "value/explained_var")}
            for name, s in summaries.items() for r in s.get("value_pretrain", [])]
    return pd.DataFrame(rows, columns=["run", "step", "value/loss", "value/explained_var"])


# ---------------------------------------------------------------- credit assignment, per token

def final_trainer(cfg, run_dir):
    """A Trainer of `cfg` holding the final policy (adapter/) and value model (adapter/value/, value_head.pt)
    of the finished run in `run_dir`."""
    from peft import load_peft_weights, set_peft_model_state_dict

    from ..train import Trainer

    tr = Trainer(cfg)
    folder = Path(run_dir) / "adapter"
    set_peft_model_state_dict(tr.model, load_peft_weights(str(folder)), adapter_name="default")
    if tr.value is not None:
        set_peft_model_state_dict(tr.model, load_peft_weights(str(folder / "value")), adapter_name="value")
        tr.value.head.load_state_dict(torch.load(folder / "value_head.pt"))
    tr.model.set_adapter("default")
    return tr


DEMO_FILE = "advantage_demo.json"
"""the advantage demo of a finished VAPO run, kept in its folder (`run_advantage_demo`)"""


def run_advantage_demo(cfg, run_dir, n_prompts: int = 8, seed: int = 0) -> dict | None:
    """`advantage_demo` of the finished run in `run_dir` (its final policy and value model, `final_trainer`),
    written to `run_dir/advantage_demo.json` and read back from there by later calls with the same `n_prompts`
    and `seed`: the figures drawn from it are then the same on every machine (sampling on another CPU can pick
    other tokens, and the decoder's kernels are chosen per machine)."""
    from .. import jsonio

    f = Path(run_dir) / DEMO_FILE
    asked = {"n_prompts": n_prompts, "seed": seed}
    if f.is_file():
        saved = jsonio.read(f)
        if saved.get("asked") == asked:
            return saved["demo"]
    demo = advantage_demo(final_trainer(cfg, run_dir), n_prompts=n_prompts, seed=seed)
    jsonio.write(f, {"asked": asked, "demo": demo}, indent=None)
    return demo


def advantage_demo(trainer, n_prompts: int = 8, seed: int = 0) -> dict:
    """Sample G responses to each of the first `n_prompts` held-out prompts (torch seed `seed`, the run's T) from
    the trainer's policy; in the first group with both a correct and an incorrect response, per-token VAPO
    advantages (decoupled, length-adaptive GAE on the trained value model), V(s_t), and GRPO's advantage of the
    same responses (one number per response, from their group). Returns tokens, A, V, reward, GRPO A per response
    (the correct one first); None when no group is mixed."""
    from ..value import token_advantages

    c = trainer.cfg
    tasks = trainer.eval_tasks[:n_prompts]
    torch.manual_seed(seed)
    ro = trainer.rollout(tasks, c.group_size)
    correct, rewards = trainer.score(ro, tasks)
    adv, _, values, _ = token_advantages(trainer.value, ro, rewards, c.gamma, c.lambda_policy, c.lambda_critic,
                                         c.lambda_alpha)
    grpo = group_advantages(correct.float(), c.group_size, "group")  # (B,)
    for g in range(len(tasks)):
        rows = torch.arange(g * c.group_size, (g + 1) * c.group_size)
        ok, bad = rows[correct[rows] > 0], rows[correct[rows] == 0]
        if len(ok) and len(bad):
            out = []
            for i in (int(ok[0]), int(bad[0])):
                n = int(ro.lengths[i])
                ids = ro.completion_ids[i, :n].tolist()
                out.append({"tokens": [trainer.tok.decode([t]) for t in ids], "A": adv[i, :n].tolist(),
                            "V": values[i, :n].tolist(), "reward": float(rewards[i]), "correct": bool(correct[i] > 0),
                            "A_grpo": float(grpo[i]), "prompt": tasks[g]["prompt"], "answer": tasks[g]["answer"]})
            return {"responses": out, "group": g}
    return None


def advantage_heatmap(ax, response: dict, key: str = "A", per_row: int = 16, vmax: float | None = None):
    """One response as a grid of its tokens (row-major, `per_row` per row), each cell coloured by its
    per-token `key` (diverging: red negative, blue positive); returns the image for a colour bar."""
    vals = np.asarray(response[key], dtype=float)
    n = len(vals)
    rows = -(-n // per_row)
    grid = np.full((rows, per_row), np.nan)
    grid.flat[:n] = vals
    vmax = vmax or float(np.nanmax(np.abs(vals))) or 1.0
    im = ax.imshow(grid, cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto")
    for k, tok in enumerate(response["tokens"]):
        text = tok.replace("\n", "\\n").replace("$", r"\$")
        dark = abs(vals[k]) > 0.6 * vmax  # white text on the saturated cells
        ax.text(k % per_row, k // per_row, text, ha="center", va="center", fontsize=6, color="white" if dark else "black")
    ax.set_xticks([]), ax.set_yticks([])
    return im


def what_we_saw(v1: dict | None, e: dict, words: dict) -> list:
    """V1 and V2's numbers in sentences, from `v1_evidence` (None: no benchmark file) and `v2_evidence` (`e`);
    `words`: the verdict word per claim. Seed means."""
    m = lambda key, fmt=".3f": stats.seed_mean(e[key], fmt)  # noqa: E731
    lines = []
    if v1:
        lines.append(say("V1.cost", word=words["V1"], time_ratio=v1["time_ppo"] / v1["time_grpo"],
                         mem_ratio=v1["mem_ppo"] / v1["mem_grpo"], shared=v1["ratio_05b_shared"],
                         copy=v1["ratio_05b_copy"]))
    lines.append(say("V2.accuracy", word=words["V2"], **{f"acc_{a}": m(f"acc_{a}") for a in ("vapo", "dapo", "grpo", "base")},
                     **{f"len_{a}": m(f"len_{a}", ".1f") for a in ("vapo", "dapo", "grpo")}))
    lines.append(say("V2.entropy", indent=True, **{arm: m(f"entropy_{arm}", ".4f") for arm in ARMS}))
    lines.append(say("V2.value_fit", indent=True, ev_vapo=m("ev_vapo", ".2f")))
    return lines
