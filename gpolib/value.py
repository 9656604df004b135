"""The value model of the PPO / VAPO baselines: V(s_t), its loss, pre-training, VAPO's positive-example LM term.

Design: a scalar head on the policy's own frozen base, run with a second LoRA adapter ("value").
  V(s_t) = w^T h_t + b,  h_t = last hidden state of [base + value LoRA] at the position before token t.
Why not a separate copy of the base: with LoRA the base is frozen, so the policy and the critic would
hold two identical copies of it. Sharing it saves one copy of the weights; the compute is the same
(the adapters differ from the first layer on, so the value model needs its own forward and backward
passes either way). The price is switching peft's active adapter around every value pass
(`adapter`, which restores the policy's adapter and trainable flags). Full fine-tuning (lora_r = 0)
would need the copy; the config refuses that combination.
Memory, P base parameters, L LoRA parameters (per adapter), bf16 weights, LoRA with AdamW in fp32
(param, grad, two moments: 16 bytes): GRPO 2P + 16L; PPO here 2P + 32L + head; a separate copy 4P + 32L.
Qwen2.5-0.5B, LoRA r = 16 on the 7 projections: P = 494.0M, L = 8.80M (`cost_arithmetic`):
GRPO 0.99 GB + 0.14 GB; PPO adds 0.14 GB (x1.12 static memory); a separate copy adds 1.13 GB (x2.0).
Activations are not multiplied: value and policy passes run one after the other.
"""
from __future__ import annotations

import contextlib
import copy

import torch

from .gae import decoupled_gae, length_adaptive_lambda, terminal_rewards
from .logprobs import position_ids

ADAPTER = "value"
FUSED_FIRST_PASS = True
"""one forward per micro-batch gives V_old and the first value update's gradients where the update has a single
minibatch of every row (`advantages_and_gradients`); False: a no-grad pass, then the update's (for comparison)"""


# --- losses and diagnostics (pure) ------------------------------------------------
def value_loss(values, targets, mask, old_values=None, clip=None, n_tokens=None) -> tuple:
    """PPO Eq. 9 value term: 0.5 (V - V_targ)^2 per token, averaged over the masked tokens. (B, T) inputs.

    clip: the clipped value loss of the PPO reference code (OpenAI baselines ppo2):
    0.5 max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2). n_tokens: the normaliser (a micro-batch's
    share of a minibatch passes the minibatch's count); default the mask's sum.
    """
    mask = mask.to(values.dtype)
    n = mask.sum().clamp(min=1) if n_tokens is None else n_tokens
    err = (values - targets) ** 2  # (B, T)
    info = {}
    if clip is not None:
        # V_clip = V_old + clip(V - V_old, -c, c)
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)  # (B, T)
        err_clip = (v_clip - targets) ** 2
        info["value/clip_frac"] = float(((err_clip > err).float() * mask).sum() / mask.sum().clamp(min=1))
        err = torch.maximum(err, err_clip)
    loss = 0.5 * (err * mask).sum() / n
    info["value/loss"] = loss.item()
    return loss, info


def explained_variance(values, targets, mask) -> float | None:
    """1 - Var[R - V] / Var[R] over the masked tokens: 1 perfect, 0 no better than a constant. None if Var[R] = 0."""
    m = mask.bool()
    r, v = targets[m].float(), values[m].float()
    if r.numel() < 2 or float(r.var()) == 0.0:
        return None
    return float(1.0 - (r - v).var() / r.var())


def positive_lm_loss(logps, mask, correct, n_tokens=None) -> tuple:
    """VAPO Sec. 5.2 (Positive Example LM Loss): NLL of the correct responses' tokens, token mean.

    L_NLL = -(1 / sum_{y in T} |y|) sum_{y in T} sum_t log pi(y_t), T = correct responses of the batch;
    the policy minimises L_PPO + w L_NLL (w = `positive_lm_weight`, VAPO's mu = 0.1, Sec. 6.1).
    logps, mask (B, T); correct (B,).
    0 (with a graph) when no response is correct.
    """
    keep = mask.to(logps.dtype) * (correct.to(logps.dtype) > 0).unsqueeze(1)  # (B, T)
    n = keep.sum().clamp(min=1) if n_tokens is None else n_tokens
    loss = -(logps * keep).sum() / n
    return loss, {"positive_lm_loss": loss.item(), "positive_tokens": float(keep.sum())}


# --- the model ------------------------------------------------------------------------
class ValueModel:
    """A scalar head + a second LoRA adapter on the policy's frozen base, with its own AdamW."""

    def __init__(self, policy, lr: float, weight_decay: float = 0.0, max_grad_norm: float = 1.0):
        if not hasattr(policy, "peft_config") or "default" not in policy.peft_config:
            raise ValueError("the value model shares the policy's frozen base through a second LoRA "
                             "adapter; the policy needs LoRA (lora_r > 0)")
        self.policy = policy
        if ADAPTER not in policy.peft_config:
            # same targets, rank and alpha as the policy's adapter (peft needs identical target_parameters)
            policy.add_adapter(ADAPTER, copy.deepcopy(policy.peft_config["default"]))
        hidden = policy.get_base_model().config.hidden_size
        device = next(policy.parameters()).device
        self.head = torch.nn.Linear(hidden, 1, device=device)  # fp32 head on the (cast) hidden state
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)  # V = 0 before any training
        self.lora = [p for n, p in policy.named_parameters() if f".{ADAPTER}." in n]
        self.max_grad_norm = max_grad_norm
        self.opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    def parameters(self) -> list:
        return self.lora + list(self.head.parameters())

    @contextlib.contextmanager
    def adapter(self):
        """Run the block with the value adapter active (and trainable); restore the policy's state after."""
        flags = [(p, p.requires_grad) for p in self.policy.parameters()]
        before = self.policy.active_adapter
        self.policy.set_adapter(ADAPTER)
        try:
            yield
        finally:
            self.policy.set_adapter(before)
            for p, f in flags:
                p.requires_grad_(f)

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """V(s_t) for every completion position: (b, P), (b, T) -> (b, T), 0 on padding. Call inside `adapter`."""
        T = completion_ids.shape[1]
        t = int(completion_mask.sum(dim=1).max())
        p0 = prompt_ids.shape[1] - int(prompt_mask.sum(dim=1).max())  # left padding shared by every row
        ids = torch.cat([prompt_ids[:, p0:], completion_ids[:, :t]], dim=1)  # (b, P' + t)
        attn = torch.cat([prompt_mask[:, p0:], completion_mask[:, :t]], dim=1)
        P = ids.shape[1] - t
        decoder = self.policy.get_base_model().base_model  # e.g. Qwen3Model: hidden states, no LM head
        h = decoder(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn),
                    use_cache=False).last_hidden_state[:, P - 1:P - 1 + t]  # (b, t, H): state before token t
        v = self.head(h.float()).squeeze(-1) * completion_mask[:, :t]  # (b, t)
        return torch.nn.functional.pad(v, (0, T - t))  # (b, T)

    @torch.no_grad()
    def predict(self, ro, chunk_rows: int = 64) -> torch.Tensor:
        """V of every row of a Rollout, no graph: (B, T), on the CPU. Rows of similar length share a chunk."""
        out = torch.zeros(ro.completion_ids.shape)  # (B, T)
        with self.adapter():
            for rows in torch.argsort(ro.lengths, stable=True).split(chunk_rows):
                out[rows] = self._forward_rows(ro, rows)[0].cpu()
        return out

    def update(self, ro, targets, old_values, minibatches: list, clip=None, micro_rows: int = 64) -> dict:
        """One AdamW step per minibatch (index tensors) on the value loss; returns mean diagnostics."""
        infos: dict = {}
        with self.adapter():
            for mb in minibatches:
                n_tok = ro.completion_mask[mb].sum().clamp(min=1)
                for micro in mb[torch.argsort(ro.lengths[mb], stable=True)].split(micro_rows):  # similar lengths
                    v, c_mask = self._forward_rows(ro, micro)
                    dev = v.device
                    loss, _ = value_loss(v, targets[micro].to(dev), c_mask, old_values[micro].to(dev), clip,
                                         n_tok.to(dev))
                    loss.backward()
                infos.setdefault("value/grad_norm", []).append(self.step()["value/grad_norm"])
        # the loss after the update is not measured here: the loop reports the pre-update fit (explained variance)
        return {k: sum(v) / len(v) for k, v in infos.items()}

    def _forward_rows(self, ro, rows) -> tuple:
        """V of a Rollout's `rows` with gradients, and their completion mask, on the model's device: (b, T) each."""
        dev = self.head.weight.device
        c_mask = ro.completion_mask[rows].to(dev)
        return self.forward(ro.prompt_ids[rows].to(dev), ro.prompt_mask[rows].to(dev), ro.completion_ids[rows].to(dev),
                            c_mask), c_mask

    def step(self) -> dict:
        """The optimiser step on the gradients accumulated so far (clipped to max_grad_norm); its grad norm."""
        gn = torch.nn.utils.clip_grad_norm_(self.parameters(), self.max_grad_norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return {"value/grad_norm": gn.item()}

    def state_dict(self) -> dict:
        """A copy (not views of the live tensors): adapter weights, head, optimiser."""
        return copy.deepcopy({"lora": [p.detach().cpu() for p in self.lora], "head": self.head.state_dict(),
                              "opt": self.opt.state_dict()})

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            for p, w in zip(self.lora, state["lora"]):
                p.copy_(w)
        self.head.load_state_dict(state["head"])
        self.opt.load_state_dict(state["opt"])


# --- advantages and targets, one step, pre-training ------------------------------------
def _gae(old, ro, rewards, rows, gamma: float, lam_policy: float, lam_critic, alpha) -> tuple:
    """Decoupled GAE of `rows` (an index tensor or slice) of a rollout on their V_old (b, T): (adv, targets)."""
    mask = ro.completion_mask[rows].float()  # (b, T)
    lam_p = length_adaptive_lambda(ro.lengths[rows], alpha) if alpha is not None else lam_policy
    lam_c = lam_p if lam_critic is None else lam_critic
    return decoupled_gae(terminal_rewards(rewards[rows], mask), old, mask, gamma, lam_p, lam_c)


def _fit_stats(old, targets, mask) -> dict:
    """The value model's fit to a rollout before its update: loss, explained variance, mean V."""
    loss, _ = value_loss(old, targets, mask)
    return {"value/loss": loss.item(), "value/explained_var": explained_variance(old, targets, mask),
            "value/mean": float((old * mask).sum() / mask.sum().clamp(min=1))}


def token_advantages(vm: ValueModel, ro, rewards, gamma: float, lam_policy: float, lam_critic=None,
                     alpha=None, chunk_rows: int = 64) -> tuple:
    """Per-token policy advantages and value targets of one scored rollout, both (B, T), by decoupled GAE.

    rewards (B,) sit on each response's last token. lam_policy, or VAPO's 1 - 1/(alpha |y|) per response
    when alpha is set (Length-Adaptive GAE); lam_critic None: the policy's lambda (PPO), 1.0: VAPO.
    Also returns V_old (B, T) and the value metrics of the rollout before the value model is updated.
    """
    old = vm.predict(ro, chunk_rows)  # (B, T)
    adv, targets = _gae(old, ro, rewards, slice(None), gamma, lam_policy, lam_critic, alpha)
    return adv, targets, old, _fit_stats(old, targets, ro.completion_mask.float())


def advantages_and_gradients(vm: ValueModel, ro, rewards, gamma: float, lam_policy: float, lam_critic=None,
                             alpha=None, clip=None, micro_rows: int = 64) -> tuple:
    """`token_advantages` and the backward of a one-minibatch value update on every row, from one forward.

    With a single minibatch (mu = 1; every pre-training step) the update's first forward sees the weights that
    gave V_old, so V_old is that forward's output: per micro-batch (the rows by length, as in `predict` and
    `update`) V with gradients, V_old = V detached, GAE of those rows (each row's own), the value loss
    (PPO Eq. 9, normalised by all rows' tokens) and its backward. The gradients wait in the value parameters
    for `ValueModel.step`; a no-grad pass (`predict`) is saved. Returns (adv, targets, V_old, stats) as
    `token_advantages` does.
    """
    B, T = ro.completion_ids.shape
    adv, targets, old = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)  # on the CPU, as `predict`'s
    n_tok = ro.completion_mask.sum().clamp(min=1)
    vm.opt.zero_grad(set_to_none=True)  # a skipped update may have left gradients behind
    with vm.adapter():
        for rows in torch.argsort(ro.lengths, stable=True).split(micro_rows):
            v, c_mask = vm._forward_rows(ro, rows)
            o = v.detach()
            a, t = _gae(o.cpu(), ro, rewards, rows, gamma, lam_policy, lam_critic, alpha)
            loss, _ = value_loss(v, t.to(v.device), c_mask, o, clip, n_tok.to(v.device))
            loss.backward()
            adv[rows], targets[rows], old[rows] = a, t, o.cpu()
    return adv, targets, old, _fit_stats(old, targets, ro.completion_mask.float())


def value_step(vm: ValueModel, ro, rewards, gamma: float, lam_critic: float, minibatches: list,
               clip=None, micro_rows: int = 64) -> dict:
    """Fit V to the GAE(lam_critic) targets of one scored rollout; the metrics use the values before the step.
    One minibatch of every row: one forward per micro-batch (`advantages_and_gradients`)."""
    if FUSED_FIRST_PASS and len(minibatches) == 1 and len(minibatches[0]) == len(ro.lengths):
        *_, stats = advantages_and_gradients(vm, ro, rewards, gamma, lam_critic, lam_critic, None, clip, micro_rows)
        return {**stats, **vm.step()}
    _, targets, old, stats = token_advantages(vm, ro, rewards, gamma, lam_critic, lam_critic, None, micro_rows)
    return {**stats, **vm.update(ro, targets, old, minibatches, clip, micro_rows)}


def pretrain(vm: ValueModel, sample, steps: int, gamma: float = 1.0, micro_rows: int = 64) -> list:
    """VAPO Sec. 3 (Value-Pretraining): fit V to Monte-Carlo returns of a fixed policy's rollouts.

    sample(i) -> (Rollout, scores (B,)) draws from the fixed (base) policy; lam = 1 makes the target the
    Monte-Carlo return. One optimiser step per rollout. Returns one metrics dict per step.
    """
    out = []
    for i in range(steps):
        ro, scores = sample(i)
        everything = [torch.arange(len(ro.texts))]
        out.append({"step": i, **value_step(vm, ro, scores, gamma, 1.0, everything, None, micro_rows)})
    return out


def cost_arithmetic(config, lora_r: int, weight_bytes: int = 2, targets=None) -> dict:
    """Parameter counts and static bytes of GRPO vs PPO for a dense HF config (model built on the meta device).

    P: base parameters; L: LoRA parameters of one adapter, r (in + out) summed over the target nn.Linear.
    Bytes: weights P * weight_bytes; LoRA with AdamW in fp32 = 16 bytes per parameter.
    """
    from transformers import AutoModelForCausalLM

    from .models import ATTENTION_TARGETS, MLP_TARGETS

    targets = targets or ATTENTION_TARGETS + MLP_TARGETS
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    P = sum(p.numel() for p in model.parameters())
    L = sum(lora_r * (m.in_features + m.out_features) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.split(".")[-1] in targets)
    head = config.hidden_size + 1
    grpo = P * weight_bytes + 16 * L
    ppo_shared = grpo + 16 * (L + head)
    ppo_copy = ppo_shared + P * weight_bytes
    return {"P": P, "L": L, "head": head, "grpo_bytes": grpo, "ppo_shared_bytes": ppo_shared,
            "ppo_copy_bytes": ppo_copy, "ratio_shared": ppo_shared / grpo, "ratio_copy": ppo_copy / grpo}
