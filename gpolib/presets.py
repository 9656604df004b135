"""Paper -> TrainConfig. Each value that differs from the shared defaults cites its source.

Shared across presets (kept fixed so variants differ only in the objective): model, task,
prompts_per_step = 16, group_size = 8, lr, warm-up, gradient clipping, LoRA rank, budget.
KL: DeepSeekMath uses beta = 0.04 (Sec. 4.2); DAPO (Sec. 2.3) and Dr. GRPO drop it. We use
beta = 0 everywhere so that the comparison isolates ratio, clipping and aggregation.
The rollout/trainer mismatch correction is a modifier of any preset rather than a preset of its own:
`--set loss_mismatch_correction=token_truncate` is TIS with C = `loss_mismatch_cap` = 2 (Yao et al. 2025,
FlashRL); 'token_mask', 'sequence_truncate', 'sequence_mask' are TRL 1.16's other modes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .config import LossConfig, TrainConfig
from .objectives import Cispo, Clip, Gmpo, Luspo, Sapo, Vespo
from .validation import fail


@dataclass(frozen=True)
class Recipe:
    """A paper's recipe: the function that builds its TrainConfig from the shared defaults, and where it is shown."""

    build: Callable[[TrainConfig], TrainConfig]
    notebook: Optional[str] = None
    """the notebook that replicates it ('01', ...), None where none does yet"""


RECIPES: dict = {}
"""preset name -> Recipe, in the order presets are listed everywhere (`recipe` adds them)"""


def recipe(name: str, notebook: Optional[str] = None) -> Callable:
    """Decorator: the builder as preset `name` (RECIPES), replicated in `notebook`."""
    def add(build: Callable) -> Callable:
        RECIPES[name] = Recipe(build, notebook)
        return build
    return add


@recipe("grpo", notebook="01")
def _grpo(base: TrainConfig) -> TrainConfig:
    # DeepSeekMath Eq. 3: token ratio, symmetric clip eps = 0.2, sample-level mean, group-std advantages
    return base.replace(name="grpo", adv_scale="group",
                        loss=LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2),
                                        aggregation="seq_mean_token_mean"))


@recipe("dapo", notebook="03")
def _dapo(base: TrainConfig) -> TrainConfig:
    # DAPO Sec. 3.1 Clip-Higher eps_low 0.2 / eps_high 0.28; Sec. 3.3 token-level loss;
    # Sec. 3.2 dynamic sampling; Sec. 3.4 soft overlong punishment, L_cache = 4096 of 20480: a share 0.2 of the budget
    return base.replace(name="dapo", adv_scale="group", dynamic_sampling=True, overlong="shaping", overlong_cache=0.2,
                        loss=LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28),
                                        aggregation="token_mean"))


@recipe("gspo", notebook="04")
def _gspo(base: TrainConfig) -> TrainConfig:
    # GSPO Eq. 5-7 sequence ratio; Sec. 5.1: clip 3e-4 / 4e-4, rollout batch split into 4 minibatches
    return base.replace(name="gspo", adv_scale="group", mu=4,
                        loss=LossConfig(ratio_level="sequence", surrogate=Clip(eps_low=3e-4, eps_high=4e-4),
                                        aggregation="seq_mean_token_mean"))


@recipe("gfpo", notebook="05")
def _gfpo(base: TrainConfig) -> TrainConfig:
    # GFPO Sec. 3-4: sample more (G = 16), keep the k = 8 shortest, token-level loss as in its DAPO-style base
    return base.replace(name="gfpo", adv_scale="group", group_size=16, gfpo_k=8, gfpo_metric="length",
                        loss=LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28),
                                        aggregation="token_mean"))


@recipe("dr_grpo", notebook="06")
def _dr_grpo(base: TrainConfig) -> TrainConfig:
    # Dr. GRPO Sec. 3.2 (Eq. 3 corrected): no std scaling, constant normaliser max_len instead of 1/|o_i|
    return base.replace(name="dr_grpo", adv_scale="none",
                        loss=LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2),
                                        aggregation="seq_mean_token_sum_norm", max_len=base.max_new_tokens))


@recipe("ppo", notebook="07")
def _ppo(base: TrainConfig) -> TrainConfig:
    # PPO with a learned critic, the baseline GRPO drops (DeepSeekMath Sec. 4.1, Eq. 1-2): per-token advantages by
    # GAE (Schulman et al. 2016 Eq. 16), gamma = 1 (one terminal reward per response, no discount), lambda = 0.95
    # for the advantages and, as in PPO, for the value target too (PPO Table 3); clip eps = 0.2 (PPO Sec. 6.1);
    # plain squared-error value loss (PPO Eq. 9). Sample-level mean as GRPO (DeepSeekMath Eq. 1 and 3), so the two
    # differ only in the baseline. The value model shares the policy's base (gpolib.value).
    return base.replace(name="ppo", advantage_estimator="gae", gamma=1.0, lambda_policy=0.95,
                        loss=LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2),
                                        aggregation="seq_mean_token_mean"))


@recipe("vapo", notebook="07")
def _vapo(base: TrainConfig) -> TrainConfig:
    # VAPO (Yue et al. 2025), value-based advantages plus DAPO's fixes:
    #   Value-Pretraining (Sec. 3): the critic first fits Monte-Carlo returns of the base policy, 50 steps (Sec. 6.1);
    #   Decoupled-GAE (Sec. 3): lambda_critic = 1.0 for the value target;
    #   Length-Adaptive GAE (Sec. 4.1): lambda_policy = 1 - 1 / (alpha |y|), alpha = 0.05;
    #   Token-Level Policy Gradient Loss (Sec. 4.2; DAPO Sec. 3.3); Clip-Higher 0.2 / 0.28 (Sec. 5.1; DAPO Sec. 3.1);
    #   Positive Example LM Loss (Sec. 5.2), weighted 0.1 (VAPO's mu); Group-Sampling (Sec. 5.3): several responses
    #   per prompt, here the shared G = 8 (VAPO: 16), so that all arms generate equal samples;
    #   critic learning rate 2x the actor's (Sec. 6.1: 2e-6 vs 1e-6); gamma = 1 (one terminal reward).
    return base.replace(name="vapo", advantage_estimator="gae", gamma=1.0, lambda_critic=1.0, lambda_alpha=0.05,
                        value_pretrain_steps=50, value_lr_scale=2.0, positive_lm_weight=0.1,
                        loss=LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28),
                                        aggregation="token_mean"))


@recipe("cispo", notebook="09")
def _cispo(base: TrainConfig) -> TrainConfig:
    # MiniMax-M1 Sec. 3.1 (CISPO): J = sg(clip(r, 1 - eps_low^IS, 1 + eps_high^IS)) A log pi, token-level mean over
    # the group's tokens; "we did not impose a lower bound on the IS weight by setting eps_low^IS to a
    # large value" -> floor = 0 (never binds: r > 0). The paper tunes eps_high^IS without giving its value; we take
    # ScaleRL's (Khatri et al. 2025) cap eps_max = 5, the value TRL 1.16 recommends for loss_type='cispo' (its
    # epsilon_high is the cap itself): cap = 1 + eps_high^IS = 5. Group-std advantages as GRPO.
    return base.replace(name="cispo", adv_scale="group",
                        loss=LossConfig(ratio_level="token", surrogate=Cispo(cap=5.0, floor=0.0),
                                        aggregation="token_mean"))


@recipe("gmpo", notebook="09")
def _gmpo(base: TrainConfig) -> TrainConfig:
    # GMPO (Zhao et al. 2025) Sec. 3: maximise the geometric mean of the token ratios, each clipped in log space
    # (sign-aware, PPO's min) before the mean; Sec. 4: clip range (e^-0.4, e^0.4); one term per response, mean over
    # the responses (sequence level: 'seq_mean_token_mean' of the broadcast term); group-std advantages as GRPO.
    return base.replace(name="gmpo", adv_scale="group",
                        loss=LossConfig(ratio_level="token", surrogate=Gmpo(log_clip_low=0.4, log_clip_high=0.4),
                                        aggregation="seq_mean_token_mean"))


@recipe("sapo", notebook="10")
def _sapo(base: TrainConfig) -> TrainConfig:
    # SAPO (Gao et al. 2025, arXiv 2511.20347) Sec. 3: the hard clip replaced by the soft gate
    # (4 / tau) sigmoid(tau (r - 1)) A on the token ratio, tau_pos = 1.0 (A > 0), tau_neg = 1.05 (A < 0), the values
    # TRL 1.16 (loss_type='sapo') and verl 0.9.1 (loss_mode 'sapo') default to; mean over responses, as both compute
    # it; group-std advantages as GRPO.
    return base.replace(name="sapo", adv_scale="group",
                        loss=LossConfig(ratio_level="token", surrogate=Sapo(tau_pos=1.0, tau_neg=1.05),
                                        aggregation="seq_mean_token_mean"))


@recipe("luspo", notebook="10")
def _luspo(base: TrainConfig) -> TrainConfig:
    # LUSPO (arXiv 2602.05261): GSPO's clipped sequence term scaled by the response length |o_i|, summed over each
    # response's tokens and meaned over the responses (TRL 1.16 loss_type='luspo'); everything else GSPO's preset:
    # sequence ratio, clip 3e-4 / 4e-4 and 4 minibatches (GSPO Sec. 5.1), group-std advantages.
    return base.replace(name="luspo", adv_scale="group", mu=4,
                        loss=LossConfig(ratio_level="sequence", surrogate=Luspo(eps_low=3e-4, eps_high=4e-4),
                                        aggregation="seq_mean_token_mean"))


@recipe("vespo", notebook="10")
def _vespo(base: TrainConfig) -> TrainConfig:
    # VESPO (arXiv 2602.10693): sg(phi(w)) A log pi with phi(w) = exp(lambda + k ln w - lambda w) of the unnormalised
    # sequence ratio w = prod_t r_t, (k, lambda) = (2, 3) for A >= 0 and (3, 2) for A < 0 (TRL 1.16's vespo_*
    # defaults); mean over the batch's tokens, as TRL's loss_type='vespo'; group-std advantages as GRPO.
    return base.replace(name="vespo", adv_scale="group",
                        loss=LossConfig(ratio_level="token", aggregation="token_mean",
                                        surrogate=Vespo(shape_pos=2.0, rate_pos=3.0, shape_neg=3.0, rate_neg=2.0)))


@recipe("grpo_top_entropy", notebook="10")
def _grpo_top_entropy(base: TrainConfig) -> TrainConfig:
    # "Beyond the 80/20 rule" (Wang et al. 2025, arXiv 2506.01939) Sec. 4: the policy gradient on the top rho = 0.2
    # of tokens by entropy only (TRL 1.16 top_entropy_quantile = 0.2), on GRPO's objective otherwise, so that the
    # two differ in the selection alone.
    return _grpo(base).replace(name="grpo_top_entropy", loss_top_entropy_quantile=0.2)


PRESETS = tuple(RECIPES)
"""the presets of the library, in order (a preset registered later, e.g. by a test, is in RECIPES only)"""


def get(name: str, /, **overrides) -> TrainConfig:
    """The TrainConfig of a paper's recipe, with optional field overrides (`loss_<field>` for LossConfig, or for a
    parameter of its surrogate: `loss_eps_high`, `loss_cap`, ...).

    Values derived from the budget follow an overridden `max_new_tokens` (see `TrainConfig.replace`).
    """
    if name not in RECIPES:
        fail("preset", name, " | ".join(RECIPES))
    cfg = RECIPES[name].build(TrainConfig())
    return cfg.replace(**overrides) if overrides else cfg
