"""Per-token log-probabilities and entropies of completions under a causal LM.

Efficiency: rows are sorted by length and processed in chunks, each trimmed to its own longest
prompt and completion (less padding); only completion positions reach the LM head
(`logits_to_keep`); log-probs are gathered per chunk, so no (B, T, V) log-softmax is kept
beyond what autograd needs for the chunk.
"""
from __future__ import annotations

import torch


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, as `generate` computes them: cumsum(mask) - 1. (B, L)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def _chunk_logps(model, p_ids, p_mask, c_ids, c_mask, temperature: float, with_entropy: bool):
    """One chunk, already trimmed: (b, P), (b, T) -> logps (b, T), entropy (b, T) or None."""
    ids = torch.cat([p_ids, c_ids], dim=1)  # (b, P + T)
    attn = torch.cat([p_mask, c_mask], dim=1)
    T = c_ids.shape[1]
    # logits at positions P-1 .. P+T-2 predict completion tokens 0 .. T-1
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn),
                   logits_to_keep=T + 1, use_cache=False).logits[:, :-1]  # (b, T, V)
    logits = logits.float() / temperature
    lse = torch.logsumexp(logits, dim=-1)  # (b, T)
    logps = logits.gather(-1, c_ids.unsqueeze(-1)).squeeze(-1) - lse
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # H = logsumexp - E_p[logit]
    return logps, ent


def completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature: float = 1.0,
                     chunk_rows: int = 64, with_entropy: bool = False, bucket: bool = True):
    """log pi(o_t | q, o_<t) under softmax(logits / temperature), for each completion token.

    prompt_ids/mask (B, P) left-padded, completion_ids/mask (B, T) right-padded
    -> logps (B, T) [, entropy (B, T) detached]; zeros on padding.
    bucket=False keeps the rows' order and padding in one pass per chunk (needed by routing replay).
    """
    B, T = completion_ids.shape
    c_len = completion_mask.sum(dim=1)  # (B,)
    order = torch.argsort(c_len, stable=True) if bucket else torch.arange(B, device=c_len.device)
    pad = lambda x: torch.nn.functional.pad(x, (0, T - x.shape[1]))  # (b, t) -> (b, T)
    lps, ents = [], []
    for s in range(0, B, chunk_rows):
        rows = order[s:s + chunk_rows]
        t = int(c_len[rows].max()) if bucket else T
        p_keep = prompt_mask[rows].sum(dim=1).max() if bucket else prompt_ids.shape[1]
        p0 = prompt_ids.shape[1] - int(p_keep)  # left padding shared by every row of the chunk
        lp, en = _chunk_logps(model, prompt_ids[rows, p0:], prompt_mask[rows, p0:], completion_ids[rows, :t],
                              completion_mask[rows, :t], temperature, with_entropy)
        lps.append(pad(lp))
        ents.append(pad(en) if with_entropy else None)
    back = torch.argsort(order)  # chunk order -> original row order
    logps = torch.cat(lps)[back] * completion_mask
    if not with_entropy:
        return logps
    ent = torch.cat(ents)[back]
    return logps, ent * completion_mask
