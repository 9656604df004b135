"""Per-token log-probabilities and entropies of completions under a causal LM.

Efficiency: rows are sorted by length and processed in chunks, each trimmed to its own longest
prompt and completion (less padding); only completion positions reach the LM head
(`logits_to_keep`); log-probs are gathered per chunk, so no (B, T, V) log-softmax is kept
beyond what autograd needs for the chunk.

Justified (the default for trimmed chunks, `justify=True`): each row's real prompt moved to column 0 and its
completion right after it, so padding is at the right only; with no attention mask the model attends causally (sdpa's
`is_causal`, no mask built, blocks above the diagonal skipped) and every real position sees exactly its row's earlier
real tokens, as under the padded layout's mask. The LM head runs from the earliest column that predicts a completion
token on. Same log-probs as the padded layout up to float rounding (the order of attention's sums),
`tests/test_packing.py`; `benchmarks/train_pass.py --justify` times it.
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
    return _logps_of_logits(logits, c_ids, temperature, with_entropy)


def justified_layout(p_mask, c_mask) -> tuple:
    """Where a chunk's tokens go when each row is left-justified: (b, P) left-padded prompts, (b, T) right-padded
    completions -> source (b, L): the column of [prompt | completion] read at each new column (clamped where a row
    has ended; those columns are padding), and predictor (b, T): the new column of the token that predicts each
    completion token, its prompt's length - 1 + t (clamped to L - 1 past the row's end, padding there)."""
    P, T = p_mask.shape[1], c_mask.shape[1]
    p_len = p_mask.sum(dim=1)  # (b,)
    if not bool((p_len > 0).all()):
        raise ValueError("a justified chunk needs at least one prompt token per row (the first completion token's "
                         "context)")
    L = int((p_len + c_mask.sum(dim=1)).max())
    source = (torch.arange(L, device=p_mask.device)[None] + (P - p_len)[:, None]).clamp(max=P + T - 1)  # (b, L)
    predictor = (p_len[:, None] - 1 + torch.arange(T, device=p_mask.device)[None]).clamp(max=L - 1)  # (b, T)
    return source, predictor


def _justified_chunk_logps(model, p_ids, p_mask, c_ids, c_mask, temperature: float, with_entropy: bool):
    """One chunk, rows left-justified (module docstring): (b, P), (b, T) -> logps (b, T), entropy (b, T) or None."""
    source, predictor = justified_layout(p_mask, c_mask)
    ids = torch.cat([p_ids, c_ids], dim=1).gather(1, source)  # (b, L)
    first = int(predictor.min())  # the LM head runs from the earliest predicting column on
    logits = model(input_ids=ids, attention_mask=None, logits_to_keep=ids.shape[1] - first,
                   use_cache=False).logits  # (b, L - first, V)
    index = (predictor - first)[..., None].expand(-1, -1, logits.shape[-1])  # (b, T, V)
    return _logps_of_logits(logits.gather(1, index), c_ids, temperature, with_entropy)


def _logps_of_logits(logits, targets, temperature: float, with_entropy: bool):
    """logits (..., V), targets (...) -> log softmax(logits / temperature) at the targets (...), entropy or None."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # bf16 up, fp64 kept
    lse = torch.logsumexp(logits, dim=-1)  # (...)
    logps = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # H = logsumexp - E_p[logit]
    return logps, ent


def chunks(prompt_mask, completion_mask, chunk_rows: int, trim: bool) -> list:
    """The forward passes of `completion_logps`: (rows, p0, t) per chunk of `chunk_rows` rows, the chunk being
    prompt columns p0: and completion columns :t of those rows. trim=True: rows sorted by completion length (stable)
    and each chunk cut to its own longest prompt and completion; else rows in order at the full width."""
    B, P = prompt_mask.shape
    T = completion_mask.shape[1]
    c_len = completion_mask.sum(dim=1)  # (B,)
    order = torch.argsort(c_len, stable=True) if trim else torch.arange(B, device=c_len.device)
    out = []
    for s in range(0, B, chunk_rows):
        rows = order[s:s + chunk_rows]
        t = int(c_len[rows].max()) if trim else T
        p0 = P - int(prompt_mask[rows].sum(dim=1).max()) if trim else 0  # left padding shared by the chunk's rows
        out.append((rows, p0, t))
    return out


def completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature: float = 1.0,
                     chunk_rows: int = 64, with_entropy: bool = False, bucket: bool = True, justify: bool = True):
    """log pi(o_t | q, o_<t) under softmax(logits / temperature), for each completion token.

    prompt_ids/mask (B, P) left-padded, completion_ids/mask (B, T) right-padded
    -> logps (B, T) [, entropy (B, T) detached]; zeros on padding.
    bucket=False keeps the rows' order and padding in one pass per chunk (needed by routing replay).
    justify=True (with bucket): each chunk's rows left-justified, no attention mask (module docstring; a routing
    record of it holds each row's real positions first, `moe.routing_pass`); False: the padded layout under its
    mask (a routing record of it is per padded position).
    """
    T = completion_ids.shape[1]
    pad = lambda x: torch.nn.functional.pad(x, (0, T - x.shape[1]))  # (b, t) -> (b, T)
    lps, ents, order = [], [], []
    for rows, p0, t in chunks(prompt_mask, completion_mask, chunk_rows, bucket):
        chunk = _justified_chunk_logps if bucket and justify else _chunk_logps
        lp, en = chunk(model, prompt_ids[rows, p0:], prompt_mask[rows, p0:], completion_ids[rows, :t],
                       completion_mask[rows, :t], temperature, with_entropy)
        lps.append(pad(lp))
        ents.append(pad(en) if with_entropy else None)
        order.append(rows)
    back = torch.argsort(torch.cat(order))  # chunk order -> original row order
    logps = torch.cat(lps)[back] * completion_mask
    if not with_entropy:
        return logps
    ent = torch.cat(ents)[back]
    return logps, ent * completion_mask
