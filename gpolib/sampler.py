"""A KV-cache sampling loop that drops finished rows from the batch.

`transformers.generate` keeps every row in the batch until the longest one ends, so late decode
steps spend most of their compute on rows that only emit padding. Here rows that produced EOS leave
the batch (their cache rows too) once they make up a quarter of it. The model forward is the same
transformers forward with a `DynamicCache`; log-probabilities of the sampled tokens are kept as
they are drawn.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from .logprobs import position_ids

COMPACT_AT = 0.25
"""compact the batch when this share of its rows has finished"""


def _top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability mass reaches top_p. (B, V) -> (B, V)."""
    sorted_lp, idx = torch.sort(logp, descending=True, dim=-1)
    mass_before = torch.cumsum(sorted_lp.exp(), dim=-1) - sorted_lp.exp()  # mass of strictly better tokens
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(1, idx, drop_sorted)
    return logp.masked_fill(drop, float("-inf"))


def _draw(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool) -> tuple:
    """Next token (b,) and its log-prob under softmax(logits / temperature) (b,)."""
    logp = torch.log_softmax(logits.float() / (1.0 if greedy else temperature), dim=-1)  # (b, V)
    if greedy:
        tok = logp.argmax(dim=-1)
    else:
        probs = (_top_p_filter(logp, top_p) if top_p < 1.0 else logp).exp()
        tok = torch.multinomial(probs, 1).squeeze(1)
    return tok, logp.gather(1, tok.unsqueeze(1)).squeeze(1)


@torch.inference_mode()
def sample(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int, eos_id: int,
           pad_id: int, temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False) -> tuple:
    """prompt_ids/mask (B, P) left-padded -> completion ids (B, T) (pad after EOS), sampling logps (B, T)."""
    B, dev = prompt_ids.shape[0], prompt_ids.device
    out_ids = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=dev)
    out_lp = torch.zeros(B, max_new_tokens, device=dev)
    cache = DynamicCache()
    attn = prompt_mask
    pos = position_ids(attn)[:, -1:]  # (b, 1)
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=position_ids(attn),
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]  # (b, V)
    rows = torch.arange(B, device=dev)  # original index of each row still in the batch
    done = torch.zeros(B, dtype=torch.bool, device=dev)  # finished rows still in the batch
    T = 0
    for t in range(max_new_tokens):
        tok, lp = _draw(logits, temperature, top_p, greedy)
        live = ~done
        out_ids[rows[live], t] = tok[live]
        out_lp[rows[live], t] = lp[live]
        T = t + 1
        done = done | (tok == eos_id)
        if bool(done.all()):
            break
        if float(done.float().mean()) >= COMPACT_AT:  # drop finished rows and their cache
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, attn, pos, tok, done = rows[keep], attn[keep], pos[keep], tok[keep], done[keep]
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        pos = pos + 1
        logits = model(input_ids=tok.unsqueeze(1), attention_mask=attn, position_ids=pos,
                       past_key_values=cache, use_cache=True).logits[:, -1]
    return out_ids[:, :T], out_lp[:, :T]
