"""Per-token log-probabilities and entropies of completions under a causal LM.

Only completion positions reach the LM head (`logits_to_keep`), and log-probs are gathered chunk by
chunk so no (B, T, V) log-softmax is kept beyond what autograd needs for the chunk.
"""
from __future__ import annotations

import torch


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, as `generate` computes them: cumsum(mask) - 1. (B, L)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature: float = 1.0,
                     chunk_rows: int = 64, with_entropy: bool = False):
    """log pi(o_t | q, o_<t) / temperature-scaled, for each completion token.

    prompt_ids/mask (B, P), completion_ids/mask (B, T) -> logps (B, T) [, entropy (B, T) detached].
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + T)
    attn = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P + T)
    T = completion_ids.shape[1]
    out_lp, out_ent = [], []
    for s in range(0, ids.shape[0], chunk_rows):
        rows = slice(s, s + chunk_rows)
        # logits at positions P-1 .. P+T-2 predict completion tokens 0 .. T-1
        logits = model(input_ids=ids[rows], attention_mask=attn[rows], position_ids=position_ids(attn[rows]),
                       logits_to_keep=T + 1, use_cache=False).logits[:, :-1]  # (b, T, V)
        logits = logits.float() / temperature
        lse = torch.logsumexp(logits, dim=-1)  # (b, T)
        out_lp.append(logits.gather(-1, completion_ids[rows].unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.no_grad():
                p = torch.softmax(logits, dim=-1)
                out_ent.append(lse - (p * logits).sum(-1))  # H = logsumexp - E_p[logit]
    logps = torch.cat(out_lp) * completion_mask
    return (logps, torch.cat(out_ent) * completion_mask) if with_entropy else logps
