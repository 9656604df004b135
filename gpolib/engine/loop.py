"""The decode loop of `gpolib.engine.sample`: one token per row and step, finished rows dropped from the batch.

`transformers.generate` keeps every row in the batch until the longest one ends, so late decode steps spend most of
their compute on rows that only emit padding. Here rows that produced EOS leave the batch (their cache rows too)
once they make up a share `COMPACT_AT` of it. The loop runs on a net with `prefill`, `step` and `keep`: a
`decoder.Decoder`, or `HFNet`, the transformers forward with a `DynamicCache` (any causal LM; the reference).
Both return the same greedy tokens and log-probs within 1e-5 of the model's forward (tests/test_sampler.py).
"""
from __future__ import annotations

import time

import torch
from transformers import DynamicCache

from ..logprobs import position_ids

COMPACT_AT = 0.25
"""compact the batch when this share of its rows has finished (the transformers engine copies every row
that goes on; the decoder moves only the rows that fill holes, see `_fill_holes`)"""


def _top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability mass reaches top_p. (B, V) -> (B, V)."""
    sorted_lp, idx = torch.sort(logp, descending=True, dim=-1)
    mass_before = torch.cumsum(sorted_lp.exp(), dim=-1) - sorted_lp.exp()  # mass of strictly better tokens
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(1, idx, drop_sorted)
    return logp.masked_fill(drop, float("-inf"))


def _draw(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor | None) -> tuple:
    """Next token (b,) and its log-prob under softmax(logits / temperature) (b,); greedy when u is None.

    Sampling by inverse CDF with the row's own uniform u (b,): token = first index whose cumulative
    probability exceeds u * (kept mass). One uniform per row and step, drawn before the loop, so a row's
    tokens depend on its uniforms only, not on which rows share its batch (compaction, sharding).
    """
    logp = torch.log_softmax(logits.float() / (1.0 if u is None else temperature), dim=-1)  # (b, V)
    if u is None:
        tok = logp.argmax(dim=-1)
    else:
        cdf = torch.cumsum((_top_p_filter(logp, top_p) if top_p < 1.0 else logp).exp(), dim=-1)  # (b, V)
        tok = torch.searchsorted(cdf, u.unsqueeze(1) * cdf[:, -1:], right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)
    return tok, logp.gather(1, tok.unsqueeze(1)).squeeze(1)


def after_eos_padded(ids: torch.Tensor, lp: torch.Tensor, eos_id: int, pad_id: int) -> tuple:
    """Pad ids and zero log-probs after each row's first EOS. (B, T) each."""
    is_eos = (ids == eos_id).long()
    after = (is_eos.cumsum(dim=1) - is_eos) > 0  # an EOS strictly earlier
    return ids.masked_fill(after, pad_id), lp.masked_fill(after, 0.0)


class HFNet:
    """The transformers forward with a `DynamicCache`, behind the interface of `decoder.Decoder`."""

    def __init__(self, model):
        self.model, self.cache, self.attn = model, DynamicCache(), None

    def prefill(self, ids, mask, pos):
        self.attn = mask
        return self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=self.cache,
                          use_cache=True, logits_to_keep=1).logits[:, -1]  # (b, V)

    def step(self, tok, pos, col: int):
        self.attn = torch.cat([self.attn, torch.ones_like(self.attn[:, :1])], dim=1)  # (b, col + 1)
        return self.model(input_ids=tok.unsqueeze(1), attention_mask=self.attn, position_ids=pos.unsqueeze(1),
                          past_key_values=self.cache, use_cache=True).logits[:, -1]

    def keep(self, rows, cols: int):
        self.cache.batch_select_indices(rows)
        self.attn = self.attn[rows]


def _fill_holes(done: torch.Tensor) -> torch.Tensor:
    """Indices of the rows that go on (b',), ordered to move as few as possible: the n live rows below n
    stay where they are, the live rows at n or above fill the holes left by finished rows below n."""
    n = int((~done).sum())
    keep = torch.arange(n, device=done.device)
    keep[done[:n].nonzero().squeeze(1)] = (~done[n:]).nonzero().squeeze(1) + n
    return keep


def decode_loop(net, prompt_ids, prompt_mask, spec, u, deadline: float | None = None) -> tuple:
    """`spec` (a `SampleSpec`) on a net (`Decoder` or `HFNet`) -> ids, logps (B, T), T <= spec.max_new_tokens.

    u: (B, spec.max_new_tokens) uniforms, one per row and step, or None (greedy). Tokens of the rows in the batch go
    to (b, T) buffers by plain column writes; a row leaving the batch (compaction) is copied out once. Rows keep
    running past their EOS until compaction (pad is fed in). deadline: a `time.perf_counter()` value after which
    the loop stops early (the plan's calibration runs only).
    """
    (B, P), dev, max_new_tokens = prompt_ids.shape, prompt_ids.device, spec.max_new_tokens
    out_ids = torch.full((B, max_new_tokens), spec.pad_id, dtype=torch.long, device=dev)
    out_lp = torch.zeros(B, max_new_tokens, device=dev)
    cur_ids, cur_lp = out_ids.clone(), out_lp.clone()  # rows still in the batch
    pos = position_ids(prompt_mask)  # (B, P)
    logits = net.prefill(prompt_ids, prompt_mask, pos)  # (B, V)
    pos = pos[:, -1] + 1  # (b,) position of the next token of each row
    rows = torch.arange(B, device=dev)  # original index of each row still in the batch
    done = torch.zeros(B, dtype=torch.bool, device=dev)  # finished rows still in the batch
    T = 0
    for t in range(max_new_tokens):
        tok, lp = _draw(logits, spec.temperature, spec.top_p, None if u is None else u[:, t])
        cur_ids[:, t], cur_lp[:, t] = tok, lp
        T = t + 1
        done = done | (tok == spec.eos_id)
        n_done = int(done.sum())
        if n_done == len(rows) or T == max_new_tokens or (deadline and time.perf_counter() > deadline):
            break
        if n_done >= COMPACT_AT * len(rows):  # drop finished rows and their cache
            keep, gone = _fill_holes(done), done.nonzero().squeeze(1)
            out_ids[rows[gone]], out_lp[rows[gone]] = cur_ids[gone], cur_lp[gone]
            net.keep(keep, P + t)
            rows, pos, tok, done = rows[keep], pos[keep], tok[keep], done[keep]
            cur_ids, cur_lp, u = cur_ids[keep], cur_lp[keep], None if u is None else u[keep]
        logits = net.step(tok.masked_fill(done, spec.pad_id), pos, P + t)
        pos = pos + 1
    out_ids[rows], out_lp[rows] = cur_ids, cur_lp
    return out_ids[:, :T], out_lp[:, :T]
