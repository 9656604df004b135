"""Notebook 07 (PPO / VAPO, claims V1 and V2): the arms, the budget knob they need, the verdict rules."""
import pytest

from gpolib import presets
from gpolib.config import TrainConfig


def test_value_pretrain_share_of_steps():
    """A float is a share of the RL steps (at least 1 rollout); an int is a count; both refused out of range."""
    assert presets.get("vapo", steps=100, value_pretrain_steps=0.5).value_pretrain_len == 50
    assert presets.get("vapo", steps=3, value_pretrain_steps=0.5).value_pretrain_len == 2  # round(1.5) = 2
    assert presets.get("vapo", steps=1, value_pretrain_steps=0.1).value_pretrain_len == 1  # at least one
    assert presets.get("vapo", steps=3).value_pretrain_len == 50  # the preset's count, whatever the steps
    cfg = presets.get("vapo", steps=100, value_pretrain_steps=0.5)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    for bad in (1.5, 0.0, -2):
        with pytest.raises(ValueError, match="value_pretrain_steps"):
            presets.get("vapo", value_pretrain_steps=bad)
    with pytest.raises(ValueError, match="value_pretrain_steps"):
        presets.get("grpo", value_pretrain_steps=0.5)  # a value-model field without the value model


# ---------------------------------------------------------------- arms and budget

import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpolib.lab import ppo_vapo as lb  # noqa: E402
from gpolib.lab import report, runs, stats  # noqa: E402
from gpolib.gae import gae  # noqa: E402

FULL = runs.budget(steps=100, prompts_per_step=16, group_size=8, eval_prompts=512, eval_samples=4,
                   model="data/models/tiny-qwen3", device="cpu", dtype="float32")


def test_arms_generate_equal_samples_and_vapo_pretrains_50():
    cfgs = runs.configs(lb.ARMS, FULL, seeds=range(3))
    assert set(lb.ARMS) == {"grpo", "dapo", "vapo"} and lb.HOME == {"grpo": "01_grpo"}
    for name, c in cfgs.items():
        assert (c.prompts_per_step, c.group_size, c.steps) == (16, 8, 100), name
        assert not c.dynamic_sampling and c.gfpo_k is None, name  # nothing re-samples or filters
    assert cfgs["vapo/seed0"].value_pretrain_len == 50  # VAPO Sec. 6.1's 50 at the full profile's 100 steps
    assert cfgs["vapo/seed0"].advantage_estimator == "gae" and cfgs["dapo/seed0"].advantage_estimator == "group"
    assert cfgs["dapo/seed0"].loss.surrogate.eps_high == 0.28 and cfgs["dapo/seed0"].overlong == "shaping"


def test_grpo_arm_is_notebook_01s_runs():
    """Under full.yaml, notebook 07's GRPO folders are notebook 01's (trained once, reused)."""
    from gpolib import paths
    from gpolib.workbook import prefetch, workbook
    jobs = {j.prefix: prefetch.notebook_runs(j) for j in workbook.plan("full", ["01", "07"], paths.repo_root() / "notebooks")}
    for s in range(3):
        assert jobs["07"][f"grpo/seed{s}"][1] == jobs["01"][f"grpo/seed{s}"][1]
    assert {n.split("/")[0] for n in jobs["07"]} == {"grpo", "dapo", "vapo"}


# ---------------------------------------------------------------- GAE by hand

VALUES = [0.2, 0.5, 0.4, 0.7, 0.9]


def test_gae_demo_hand_numbers():
    """Reward 1 on the last of 5 tokens, gamma = 1: deltas 0.3, -0.1, 0.3, 0.2, 0.1 (V after the end = 0)."""
    d = lb.gae_demo(VALUES, 1.0)
    np.testing.assert_allclose(d.loc["A, lambda=0"], [0.3, -0.1, 0.3, 0.2, 0.1], atol=1e-6)
    np.testing.assert_allclose(d.loc["A, lambda=1"], [0.8, 0.5, 0.6, 0.3, 0.1], atol=1e-6)  # r - V_t
    # lambda = 0.5: A4 = 0.1, A3 = 0.2 + 0.05, A2 = 0.3 + 0.125, A1 = -0.1 + 0.2125, A0 = 0.3 + 0.05625
    np.testing.assert_allclose(d.loc["A, lambda=0.5"], [0.35625, 0.1125, 0.425, 0.25, 0.1], atol=1e-6)
    np.testing.assert_allclose(d.loc["V target (lambda_critic=1)"], [1.0] * 5, atol=1e-12)
    for lam in ("0", "0.5", "0.95", "1"):
        np.testing.assert_allclose(d.loc[f"A, lambda={lam}"], d.loc[f"A by hand, lambda={lam}"], atol=1e-6)


def test_gae_by_hand_discounted_matches_library():
    """gamma = 0.9, lam = 0.8 on 3 tokens, reward 2: d2 = 2 - 0.7, d1 = 0.9*0.7 - 0.5, d0 = 0.9*0.5 - 0.2."""
    v, r = [0.2, 0.5, 0.7], [0.0, 0.0, 2.0]
    d2, d1, d0 = 1.3, 0.13, 0.25
    hand = [d0 + 0.72 * (d1 + 0.72 * d2), d1 + 0.72 * d2, d2]
    assert lb.gae_by_hand(r, v, 0.9, 0.8) == pytest.approx(hand, abs=1e-12)
    adv, _ = gae(torch.tensor([r], dtype=torch.float64), torch.tensor([v], dtype=torch.float64),
                 torch.ones(1, 3), 0.9, 0.8)
    assert adv[0].tolist() == pytest.approx(hand, abs=1e-6)


def test_lambda_table():
    t = lb.lambda_table([10, 40, 100], alpha=0.05)
    assert t["lambda_policy"].tolist() == pytest.approx([0.0, 0.5, 0.8])  # 10 < 1/alpha: clamped to 0
    assert t["1 / (1 - lambda)"].tolist() == pytest.approx([1.0, 2.0, 5.0])  # alpha |y| above 20 tokens


# ---------------------------------------------------------------- V1

def _cost(cpu_ppo=3.0, cpu_grpo=2.0, peak_ppo=300 * 2**20, peak_grpo=200 * 2**20):
    arm = lambda cpu, peak, static, value: {"samples_per_step": 128, "step_s": cpu * 1.1, "cpu_s": cpu, "rollout_s": 1.0,
                                            "train_s": cpu - 1.0, "value_s": value, "peak_bytes_above_start": peak,
                                            "static_bytes": static, "zero_var_groups": 0.25}
    return {"results": {"grpo": arm(cpu_grpo, peak_grpo, 4 * 2**20, None), "ppo": arm(cpu_ppo, peak_ppo, 5 * 2**20, 1.0)},
            "arithmetic_05b": {"P": 494_032_768, "L": 8_798_208, "head": 897, "grpo_bytes": 1000, "ppo_shared_bytes": 1120,
                               "ppo_copy_bytes": 2000, "ratio_shared": 1.12, "ratio_copy": 2.0},
            "matmul_peak_gflops": 50.0}


def test_cost_tables():
    t = lb.cost_table(_cost())
    assert t.loc["PPO / GRPO", "step s (CPU)"] == pytest.approx(1.5)
    assert t.loc["PPO / GRPO", "peak MiB"] == pytest.approx(1.5)
    assert t.loc["PPO / GRPO", "static MiB"] == pytest.approx(1.25)
    assert t.loc["ppo", "peak MiB"] == pytest.approx(300)
    a = lb.arithmetic_table(_cost()["arithmetic_05b"])
    assert a["x GRPO"].tolist() == pytest.approx([1.0, 1.12, 2.0])


def test_verdict_v1_words():
    assert lb.verdict_v1(lb.v1_evidence(_cost())).word == stats.REPRODUCED
    v = lb.verdict_v1(lb.v1_evidence(_cost(cpu_ppo=2.05)))  # x1.025: inside the 5% jitter allowance
    assert v.word == stats.PARTLY and "1.02" in v.text and v.text.startswith("holds: peak memory")
    assert lb.verdict_v1(lb.v1_evidence(_cost(peak_ppo=190 * 2**20))).word == stats.PARTLY
    assert lb.verdict_v1(lb.v1_evidence(_cost(cpu_ppo=2.05, peak_ppo=190 * 2**20))).word == stats.NOT
    v = lb.verdict_v1(lb.v1_evidence(_cost()))
    assert "x1.12" in v.text and "x2.00" in v.text and "static bytes PPO / GRPO 1.250" in v.text
    rec = report.judge("V1", lb.v1_evidence(_cost()))
    assert rec.criterion == lb.V1_RULE.criterion and "1.05" in rec.criterion


def test_committed_cost_measurement_has_what_the_notebook_reads():
    cost = lb.load_cost()
    assert cost is not None, f"{lb.COST_FILE} is the committed V1 measurement"
    lb.cost_table(cost)
    e = lb.v1_evidence(cost)
    assert e["matmul_peak_gflops"] > 0 and e["mem_grpo"] > 0 and e["time_grpo"] > 0
    assert cost["results"]["ppo"]["samples_per_step"] == cost["results"]["grpo"]["samples_per_step"]  # equal samples


# ---------------------------------------------------------------- V2

GOOD = {"acc_vapo": [0.60, 0.62, 0.61], "acc_dapo": [0.59, 0.60, 0.60], "acc_grpo": [0.50, 0.52, 0.51]}


def test_verdict_v2_words():
    assert lb.verdict_v2(GOOD).word == stats.REPRODUCED
    worse = {**GOOD, "acc_vapo": [0.50, 0.51, 0.52], "acc_grpo": [0.40, 0.41, 0.42]}  # 9 points below DAPO
    assert lb.verdict_v2(worse).word == stats.PARTLY  # worse than DAPO, better than GRPO
    assert lb.verdict_v2({**worse, "acc_grpo": [0.60, 0.62, 0.61]}).word == stats.NOT
    noisy = {**GOOD, "acc_grpo": [0.50, 0.70, 0.55]}  # VAPO - GRPO = +0.10, -0.08, +0.06: interval spans 0
    assert lb.verdict_v2(noisy).word == stats.PARTLY and "does not: held-out accuracy (T = 1), VAPO - GRPO" in \
        lb.verdict_v2(noisy).text
    two = {k: v[:2] for k, v in GOOD.items()}
    v = lb.verdict_v2(two)
    assert v.word == stats.INCONCLUSIVE and "only 2 seeds" in v.text
    assert report.judge("V2", GOOD).criterion == lb.V2_RULE.criterion


def _summary(acc, start=0.4, length=90.0, pre=()):
    return {"eval_start": {"acc/sample": start, "acc/greedy": start, "len/mean": 80.0},
            "eval_end": {"acc/sample": acc, "acc/greedy": acc + 0.1, "len/mean": length},
            **({"value_pretrain": list(pre)} if pre else {})}


def test_v2_evidence_and_tables():
    seeds = range(3)
    summaries, metrics = {}, {}
    for arm, accs in (("grpo", GOOD["acc_grpo"]), ("dapo", GOOD["acc_dapo"]), ("vapo", GOOD["acc_vapo"])):
        for s in seeds:
            summaries[f"{arm}/seed{s}"] = _summary(accs[s])
            ev = 0.5 if arm == "vapo" else None
            metrics[f"{arm}/seed{s}"] = [{"step": t, "entropy/mean": 0.1 * t, "value/explained_var": ev,
                                          "value/loss": ev} for t in range(8)]
    e = lb.v2_evidence(summaries, metrics, seeds)
    assert e["acc_vapo"] == GOOD["acc_vapo"] and e["acc_base"] == [0.4] * 3
    assert e["entropy_dapo"] == pytest.approx([0.65] * 3)  # mean of steps 6, 7 (last 25% of 8)
    assert e["ev_vapo"] == [0.5] * 3
    assert lb.verdict_v2(e).word == stats.REPRODUCED
    assert lb.seed_table(e, seeds).loc["vapo/seed1", "acc (T=1)"] == pytest.approx(0.62)
    p = lb.paired_table(e)
    assert p.loc["VAPO - GRPO", "mean"] == pytest.approx(0.10) and p.loc["VAPO - DAPO", "n"] == 3
    assert set(lb.value_curves(metrics)) == {f"vapo/seed{s}" for s in seeds}
    text = "\n".join(lb.what_we_saw(lb.v1_evidence(_cost()), e, {"V1": "w1", "V2": "w2"}))
    assert "V1 (w1): at equal samples a PPO step costs 1.50x GRPO's CPU time and 1.50x its peak memory" in text
    assert "x1.12 (value adapter on the shared base) to x2.00 (a separate value model)" in text
    assert "V2 (w2): held-out accuracy VAPO 0.610, DAPO 0.597, GRPO 0.510 (base 0.400); held-out length 90.0" in text
    assert "VAPO 0.6500, DAPO 0.6500, GRPO 0.6500" in text and "explains 0.50 of the variance" in text
    assert lb.what_we_saw(None, e, {"V2": "w2"})[0].startswith("V2 (w2)")  # no benchmark file: V2 only


def test_pretrain_curves():
    pre = [{"step": i, "value_loss": 1.0 / (i + 1), "value_explained_var": 0.1 * i} for i in range(3)]  # legacy
    df = lb.pretrain_curves({"vapo/seed0": _summary(0.5, pre=pre), "grpo/seed0": _summary(0.5)})
    assert df["run"].unique().tolist() == ["vapo/seed0"]
    assert df["value/loss"].tolist() == pytest.approx([1.0, 0.5, 1 / 3])
    assert lb.pretrain_curves({"grpo/seed0": _summary(0.5)}).empty
    new = [{"step": i, "value/loss": 2.0 / (i + 1), "value/explained_var": 0.2 * i} for i in range(2)]
    df = lb.pretrain_curves({"vapo/seed1": _summary(0.5, pre=new)})  # the names since the unification
    assert df["value/loss"].tolist() == [2.0, 1.0] and df["value/explained_var"].tolist() == [0.0, 0.2]


# ---------------------------------------------------------------- credit assignment

def test_advantage_heatmap_grid():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    resp = {"tokens": list("abcde"), "A": [1.0, -2.0, 0.5, 0.0, 0.25]}
    im = lb.advantage_heatmap(ax, resp, per_row=3)
    grid = im.get_array()
    assert grid.shape == (2, 3) and grid[1, 1] == 0.25 and bool(np.ma.getmaskarray(grid)[1, 2] or np.isnan(grid[1, 2]))
    assert im.get_clim() == (-2.0, 2.0)  # symmetric around 0
    plt.close(fig)


def test_advantage_demo_is_decoupled_gae_of_the_value_model(tiny_cfg):
    """On the embedded policy (value head made non-zero): the demo's A of each response is GAE with VAPO's
    lambda = 1 - 1/(0.05 |y|) on its V, and GRPO's number is the group formula for its correct/incorrect."""
    from gpolib.gae import length_adaptive_lambda, terminal_rewards
    from gpolib.train import Trainer
    tr = Trainer(tiny_cfg("vapo", group_size=4))
    torch.manual_seed(0)
    torch.nn.init.normal_(tr.value.head.weight, std=0.1)
    torch.nn.init.constant_(tr.value.head.bias, 0.3)
    demo = lb.advantage_demo(tr, n_prompts=8, seed=0)
    assert demo is not None, "no mixed group among 8 prompts x 4 samples of the base policy"
    ok, bad = demo["responses"]
    assert ok["correct"] and not bad["correct"] and ok["A_grpo"] > 0 > bad["A_grpo"]
    for r in (ok, bad):
        n = len(r["tokens"])
        assert len(r["A"]) == len(r["V"]) == n
        mask = torch.ones(1, n)
        lam = length_adaptive_lambda(torch.tensor([n]), 0.05)
        adv, _ = gae(terminal_rewards(torch.tensor([r["reward"]]), mask), torch.tensor([r["V"]]), mask, 1.0, lam)
        assert adv[0].tolist() == pytest.approx(r["A"], abs=1e-5)
        assert len(set(r["A"])) > 1  # per token, not one number per response
    assert math.isfinite(ok["A_grpo"])


def test_arm_table_and_cost_by_arm():
    cfgs = runs.configs(lb.ARMS, FULL, seeds=range(2))
    t = lb.arm_table(cfgs)
    assert list(t.columns) == ["grpo", "dapo", "vapo"]
    assert t.loc["advantage_estimator"].tolist() == ["group", "group", "gae"]
    assert t.loc["loss.eps_high"].tolist() == ["0.2", "0.28", "0.28"]
    assert "steps" not in t.index and "group_size" not in t.index and "seed" not in t.index  # shared
    row = lambda rollout, train, value: {"gen/samples": 128, "time/rollout_s": rollout, "time/train_s": train,
                                         "time/value_s": value}
    metrics = {"grpo/seed0": [row(1.0, 2.0, None)] * 2, "dapo/seed0": [row(1.0, 2.0, None)],
               "vapo/seed0": [row(1.0, 5.0, 3.0), row(1.0, 7.0, 4.0)]}
    summ = {"grpo/seed0": {}, "dapo/seed0": {}, "vapo/seed0": {"value_pretrain": [{"gen/samples": 128}] * 3}}
    c = lb.cost_by_arm(metrics, summ)
    assert c.loc["vapo", "s / step x GRPO"] == pytest.approx(7.0 / 3.0)
    assert c.loc["vapo", "pre-training samples"] == 384 and c.loc["grpo", "pre-training samples"] == 0
    assert c.loc["vapo", "of which value s"] == pytest.approx(3.5)
    assert c["samples / RL step"].tolist() == [128, 128, 128]


def test_final_trainer_loads_both_adapters_and_the_head(tiny_cfg, tmp_path):
    """A finished one-step VAPO run: the policy's and the value model's LoRA (B starts at 0, so trained B != 0) and
    the head come back from adapter/, each into its own adapter, with the policy's adapter active."""
    from safetensors.torch import load_file
    from gpolib.train import train
    cfg = tiny_cfg("vapo", steps=1, value_pretrain_steps=1.0)  # 128 tokens: 6-operator answers need ~100
    train(cfg, tmp_path / "run", progress=False)
    tr = lb.final_trainer(cfg, tmp_path / "run")
    assert tr.model.active_adapter == "default"
    params = dict(tr.model.named_parameters())
    for folder, name in (("adapter", "default"), ("adapter/value", "value")):
        saved = load_file(str(tmp_path / "run" / folder / "adapter_model.safetensors"))
        b_keys = [k for k in saved if "lora_B" in k]
        assert b_keys and any(saved[k].abs().sum() > 0 for k in b_keys), folder
        for k in b_keys:
            live = params[k.replace("lora_B.weight", f"lora_B.{name}.weight")]
            assert torch.equal(live.detach(), saved[k]), k
    head = torch.load(tmp_path / "run" / "adapter" / "value_head.pt")
    assert torch.equal(tr.value.head.weight.detach(), head["weight"]) and head["weight"].abs().sum() > 0
