"""Notebook 02, S1 within responses: how the product of token ratios compounds along a response (GSPO Sec. 2).

GSPO's argument is about one response as its tokens are multiplied in: after the policy moved, the prefix
product prod_{t<=L} rho_t of a long response drifts away from 1 as L grows, while the prefix geometric mean
(GSPO Eq. 7's s_i, taken over the first L tokens) stays near 1. The committed measure of an earlier design
compared whole responses of different lengths, which the advantage and the 1/|o| weight of the sample-level
loss confound; here each response is followed along its own tokens:
- the per-token log ratios of every response, one compact file per run (`save_tokens` / `load_tokens`, `.npz`:
  flat log ratios with offsets, and per response its step, prompt, advantage and length);
- prefix sums S_i(L) = sum_{t<=L} log rho_t of responses of >= `MIN_LEN` tokens (`prefix_sums`);
- V(L), the variance of S_i(L) over responses pooled within step (`pooled_var`), and V_geo(L) = V(L) / L^2, the
  variance of the prefix geometric mean's log;
- the slope of V(L) on L over `GRID` with a bootstrap over prompts, resampled within each step (`bootstrap_slope`);
- the share of responses whose prefix product has left [0.5, 2] at L (`leave_share`), beside 0.99^L.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

MIN_LEN = 120
"""responses of at least this many tokens are followed (DESIGN S1)"""
GRID = tuple(range(10, MIN_LEN + 1, 10))
"""prefix lengths L at which V(L) is read: 10, 20, ..., 120"""
LEAVE_AT = (20, 60, 120)
"""prefix lengths at which the share outside [0.5, 2] is reported"""
BAND = (0.5, 2.0)
N_BOOT = 1000
"""bootstrap resamples of the prompts (fixed before the runs)"""
BOOT_SEED = 0
"""the bootstrap's generator seed (fixed before the runs)"""
TOKENS_FILE = "token_ratios.npz"


def save_tokens(path: Path | str, log_rho: np.ndarray, offsets: np.ndarray, step: np.ndarray, prompt: np.ndarray,
                advantage: np.ndarray, **per_response: np.ndarray) -> None:
    """Write one run's per-token log ratios: `log_rho` (sum of lengths,) float32, response i's tokens at
    offsets[i]:offsets[i+1]; per response (N,) its step, prompt id within the step and advantage, and any further
    integer arrays (N,) by name (notebook 02's panel: `update`, the minibatch update k after which it was scored)."""
    extra = {k: np.asarray(v).astype(np.int32) for k, v in per_response.items()}
    np.savez_compressed(path, log_rho=log_rho.astype(np.float32), offsets=offsets.astype(np.int64),
                        step=step.astype(np.int32), prompt=prompt.astype(np.int32),
                        advantage=advantage.astype(np.float32), **extra)


def load_tokens(path: Path | str) -> dict:
    """`save_tokens`'s arrays by name (the further per-response ones too), with `length` (N,) derived from the
    offsets; a file that does not hold the five it always writes is refused, naming it."""
    with np.load(path) as f:
        need = ("log_rho", "offsets", "step", "prompt", "advantage")
        missing = [k for k in need if k not in f.files]
        if missing:
            raise ValueError(f"{path}: not a per-token ratio file (missing {', '.join(missing)})")
        out = {k: f[k] for k in f.files}
    out["length"] = np.diff(out["offsets"])
    return out


def prefix_sums(tok: dict, min_len: int = MIN_LEN) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S, step, prompt) of the responses of >= min_len tokens: S (n, min_len), S[i, L-1] = sum_{t<=L} log rho_t."""
    keep = np.flatnonzero(tok["length"] >= min_len)
    starts = tok["offsets"][keep]  # (n,)
    rows = tok["log_rho"][starts[:, None] + np.arange(min_len)[None, :]].astype(np.float64)  # (n, min_len)
    return np.cumsum(rows, axis=1), tok["step"][keep], tok["prompt"][keep]


def pooled_var(S: np.ndarray, step: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Variance of each column of S (n, k) over responses, pooled within step: sum of squared deviations from the
    step's mean over sum of (n_s - 1); `weights` (n,) are resampling counts (the bootstrap), default 1."""
    w = np.ones(len(S)) if weights is None else weights.astype(np.float64)
    ss, dof = np.zeros(S.shape[1]), 0.0
    for s in np.unique(step):
        m = step == s
        n_s = w[m].sum()
        if n_s < 2:
            continue
        mean = (w[m, None] * S[m]).sum(0) / n_s  # (k,)
        ss += (w[m, None] * (S[m] - mean) ** 2).sum(0)
        dof += n_s - 1
    return ss / dof if dof > 0 else np.full(S.shape[1], np.nan)


def v_curve(S: np.ndarray, step: np.ndarray, grid=GRID) -> dict:
    """V(L) and V_geo(L) = V(L) / L^2 at the prefix lengths of `grid`."""
    L = np.asarray(grid)
    v = pooled_var(S[:, L - 1], step)
    return {"L": L.tolist(), "V": v.tolist(), "V_geo": (v / L.astype(float) ** 2).tolist()}


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x."""
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc ** 2).sum())


def _prompt_weights(step: np.ndarray, prompt: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n,) resampling counts: within each step the step's prompts drawn with replacement, a response counted as
    often as its prompt was drawn."""
    w = np.zeros(len(step))
    for s in np.unique(step):
        m = step == s
        ids, inverse = np.unique(prompt[m], return_inverse=True)
        draws = rng.multinomial(len(ids), np.full(len(ids), 1.0 / len(ids)))  # (prompts in step,)
        w[m] = draws[inverse]
    return w


def bootstrap_slope(S: np.ndarray, step: np.ndarray, prompt: np.ndarray, grid=GRID, n_boot: int = N_BOOT,
                    seed: int = BOOT_SEED) -> dict:
    """Slope of V(L) on L over `grid` with its 95% percentile interval from `n_boot` resamples of the prompts
    (within step: V is pooled within step)."""
    L = np.asarray(grid)
    cols = S[:, L - 1]  # (n, k)
    est = slope(L.astype(float), pooled_var(cols, step))
    rng = np.random.default_rng(seed)
    boots = np.array([slope(L.astype(float), pooled_var(cols, step, _prompt_weights(step, prompt, rng)))
                      for _ in range(n_boot)])
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"slope": est, "lo": float(lo), "hi": float(hi), "n_boot": n_boot}


def leave_share(S: np.ndarray, at=LEAVE_AT, band=BAND) -> dict:
    """Share of responses whose prefix product exp(S(L)) lies outside `band` at each L of `at`."""
    lo, hi = math.log(band[0]), math.log(band[1])
    return {str(L): float(((S[:, L - 1] < lo) | (S[:, L - 1] > hi)).mean()) for L in at}  # str keys: as read back from JSON


def leave_curve(S: np.ndarray, band=BAND) -> np.ndarray:
    """(min_len,) the share outside `band` at every prefix length 1..min_len (for the plot)."""
    lo, hi = math.log(band[0]), math.log(band[1])
    return ((S < lo) | (S > hi)).mean(axis=0)


def compounding_length(per_token: float = 0.99, band=BAND) -> int:
    """The first L at which per_token^L leaves `band` (0.99: L = 69, where 0.99^L < 0.5)."""
    return math.ceil(math.log(band[0]) / math.log(per_token)) if per_token < 1 else math.ceil(
        math.log(band[1]) / math.log(per_token))


def band_length(v_slope: float, band=BAND) -> float:
    """The prefix length at which a spread growing as V(L) = v_slope * L reaches (log band[1])^2, i.e. where the
    prefix product's log has a standard deviation of log 2 (a third of such products outside [1/2, 2]); inf
    when the spread does not grow."""
    return math.log(band[1]) ** 2 / v_slope if v_slope > 0 else math.inf


def seed_summary(tok: dict, min_len: int = MIN_LEN, n_boot: int = N_BOOT) -> dict:
    """One run's S1 numbers: responses followed, V(L) and V_geo(L), the bootstrap slope, the leave shares."""
    S, step, prompt = prefix_sums(tok, min_len)
    curve = v_curve(S, step)
    return {"n_long": int(len(S)), "n_responses": int(len(tok["length"])), **curve,
            "v_geo_drop": curve["V_geo"][GRID.index(20)] - curve["V_geo"][-1],
            **bootstrap_slope(S, step, prompt, n_boot=n_boot), "leave": leave_share(S)}
