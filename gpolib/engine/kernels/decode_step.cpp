// One whole decode step of a dense Qwen3 / Qwen2 or a Qwen3-MoE model in one call, for Decoder.step of
// gpolib/engine/decoder.py
// (gpolib/engine/step_kernel.py packs the weights and calls it through ctypes; gpolib/engine/native.py builds it).
//
// Per row (a token at its position, written to cache column `col`) and per layer, as decoder.py's torch path:
//     h    = x / sqrt(mean(x^2) + eps)                              (input norm; its weight is in W_qkv)
//     qkv  = h W_qkv [+ b_qkv]                                       (q, k, v heads side by side)
//     q, k = RoPE(headnorm(q), pos), RoPE(headnorm(k), pos)           (head norm with weight; Qwen3 only)
//     K[:, col], V[col] = k, v                                       (the cache, in place)
//     o    = softmax(q K^T + padding bias) V                         (attention.h; scale folded into q)
//     x   += o W_o [+ b_o]
//     h    = x / sqrt(mean(x^2) + eps);  x += (silu(h W_gate) * (h W_up)) W_down
// or, in an MoE layer (issue 50), p = softmax(h W_router) over the E experts, the k largest p_e (ties: the lower e)
// with weights w = p_e (divided by their sum if norm_topk), and x += sum_j w_j down_e(silu(gate_e h) * up_e h), the
// routed experts of experts.h as the per-layer experts kernel computes them;
// then logits = (x / sqrt(mean(x^2) + eps)) W_head. The matrices come packed (`gemm`), LoRA and the norm
// weights folded in by gpolib/engine/weights.py.
//
// Rows are independent: the batch is split into n_threads contiguous parts, each run through every layer on its
// own thread with its own scratch, no synchronisation between them (the calling thread takes the first part).
#include "attention.h"
#include "experts.h"
#include "exp_float.h"
#include "topk.h"

namespace {

// out[i] = x[i] / sqrt(mean(x[i]^2) + eps) for m rows of n (strides ld); the sum of squares in double where `wide`
// (an MoE model: in float its step's log-probs were further from float64 than the torch path's, 95.4% vs 97.4%
// within 1e-5 on the embedded 8-expert MoE; a dense model keeps the float sum its runs were sampled with).
void rms_norm(const float* __restrict x, int64_t m, int64_t n, int64_t ld, float eps, float* __restrict out,
              bool wide) {
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ld;
        float r;
        if (wide) {
            double ss = 0.0;
            for (int64_t c = 0; c < n; ++c) ss += static_cast<double>(xi[c]) * xi[c];
            r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
        } else {
            float ss = 0.0f;
            for (int64_t c = 0; c < n; ++c) ss += xi[c] * xi[c];
            r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
        }
        float* oi = out + i * ld;
        for (int64_t c = 0; c < n; ++c) oi[c] = xi[c] * r;
    }
}

// The sizes and weights of a model, as gpolib/engine/step_kernel.py lays them out (see `gpolib_decode_step_f32`).
struct Model {
    int64_t layers, H, Hp, nq, nkv, d, I, Ip, V, Vp, qkv_p, vocab, S;
    int64_t E, Ep, K, Ie, gu_p, norm_topk;  // MoE layers: experts, padded, per token, width, packed [gate | up] width
    float eps;
    const float* embed;  // (vocab, H)
    const float* cos;    // (S, d)
    const float* sin;    // (S, d), signed: rotate_half(x) sin = roll(x, d/2) * sin
    const float* head;   // packed (H, Vp)
    const int64_t* w;    // per layer: w_qkv, b_qkv, head_norm, w_o, b_o, w_gu, w_down, router, experts' gate_up,
                         // experts' down (addresses; 0 = none: a dense layer has no router, an MoE layer no w_gu)
    const float* qk_eps; // per layer
};

struct Cache {
    float* k;  // K[l][b][h][c][t] at k + l kl + b kb + h kh + c kc + t
    int64_t kl, kb, kh, kc, span;  // span: the columns allocated per key row (readable past the used ones)
    float* v;  // V[l][b][h][t][c] at v + l vl + b vb + h vh + t vt + c
    int64_t vl, vb, vh, vt;
    const float* bias;  // (B nkv, P) or null
    int64_t P;
};

constexpr int64_t WEIGHTS = 10;  // addresses per layer

const float* ptr(const Model& m, int64_t layer, int which) {
    return reinterpret_cast<const float*>(m.w[layer * WEIGHTS + which]);
}

// Head norm (with its weight) and RoPE of one head of d channels, from `in` to `out` (may alias; tmp: d floats).
void norm_rope(const float* in, const float* weight, float eps, const float* cos, const float* sin, int64_t d,
               float* tmp, float* out, int64_t out_stride) {
    if (weight != nullptr) {
        float ss = 0.0f;
        for (int64_t c = 0; c < d; ++c) ss += in[c] * in[c];
        const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
        for (int64_t c = 0; c < d; ++c) tmp[c] = in[c] * r * weight[c];
    } else {
        for (int64_t c = 0; c < d; ++c) tmp[c] = in[c];
    }
    const int64_t half = d / 2;
    for (int64_t c = 0; c < d; ++c)
        out[c * out_stride] = tmp[c] * cos[c] + tmp[c < half ? c + half : c - half] * sin[c];
}

// An MoE router's choice for one token from its logits (E): p = softmax(logits) (exact exp, as torch's), the K
// largest p_e in descending order (ties: the lower e first) into idx, their p_e into w, divided by their sum if
// norm_topk. p: E floats of scratch.
void route(const float* logits, int64_t E, int64_t K, bool norm_topk, float* p, int64_t* idx, float* w) {
    float mx = logits[0];
    for (int64_t e = 1; e < E; ++e) mx = logits[e] > mx ? logits[e] : mx;
    exp_to_float(logits, mx, E, p);  // p[e] = float(exp(double(logits[e] - mx))), as std::exp gives it (exp_float.h)
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += p[e];
    for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(p[e] / sum);
    // the K best in descending order, equal values with the lower e first (topk.h: K rounds of a vector maximum on an
    // AVX-512 CPU, else one pass by insertion; K passes over E had taken ~40% of this file's own time on the fine MoE)
    top_k(p, E, K, w, idx);
    float chosen = 0.0f;
    for (int64_t j = 0; j < K; ++j) chosen += w[j];  // in descending order, as the passes summed them
    if (norm_topk)
        for (int64_t j = 0; j < K; ++j) w[j] /= chosen;
}

// Rows [first, last) of the batch through the whole model -> logits rows of `out` (stride Vp).
void rows_step(const Model& m, const Cache& cache, const int64_t* tok, const int64_t* pos, int64_t col,
               int64_t first, int64_t last, float* out) {
    const int64_t n = last - first, r = m.nq / m.nkv, end = col + 1, nqd = m.nq * m.d;
    std::vector<float> x(n * m.Hp, 0.0f), h(n * m.Hp, 0.0f), qkv(n * m.qkv_p), o(n * nqd), g(n * 2 * m.Ip),
        a(n * m.Ip), s(r * end), tmp(m.d), lg(n * m.Ep), p(m.E), wt(n * m.K);
    std::vector<int64_t> idx(n * m.K), start, order;
    for (int64_t i = 0; i < n; ++i) std::memcpy(&x[i * m.Hp], m.embed + tok[first + i] * m.H, m.H * sizeof(float));
    const Product fixed = fixed_for(r, m.d);
    for (int64_t l = 0; l < m.layers; ++l) {
        const float *w_qkv = ptr(m, l, 0), *b_qkv = ptr(m, l, 1), *hn = ptr(m, l, 2), *w_o = ptr(m, l, 3),
                    *b_o = ptr(m, l, 4), *w_gu = ptr(m, l, 5), *w_down = ptr(m, l, 6);
        rms_norm(x.data(), n, m.H, m.Hp, m.eps, h.data(), m.E > 0);
        gemm(h.data(), m.Hp, n, m.H, w_qkv, m.qkv_p, qkv.data(), m.qkv_p, false);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t b = first + i;
            float* row = &qkv[i * m.qkv_p];
            if (b_qkv != nullptr)
                for (int64_t c = 0; c < (m.nq + 2 * m.nkv) * m.d; ++c) row[c] += b_qkv[c];
            const float *cs = m.cos + pos[b] * m.d, *sn = m.sin + pos[b] * m.d;
            for (int64_t hd = 0; hd < m.nq; ++hd)  // query heads, in place
                norm_rope(row + hd * m.d, hn == nullptr ? nullptr : hn + hd * m.d, m.qk_eps[l], cs, sn, m.d,
                          tmp.data(), row + hd * m.d, 1);
            for (int64_t hd = 0; hd < m.nkv; ++hd) {  // key heads into cache column col; values into row col
                norm_rope(row + (m.nq + hd) * m.d, hn == nullptr ? nullptr : hn + (m.nq + hd) * m.d, m.qk_eps[l], cs,
                          sn, m.d, tmp.data(), cache.k + l * cache.kl + b * cache.kb + hd * cache.kh + col,
                          cache.kc);
                std::memcpy(cache.v + l * cache.vl + b * cache.vb + hd * cache.vh + col * cache.vt,
                            row + (m.nq + m.nkv + hd) * m.d, m.d * sizeof(float));
            }
            for (int64_t hd = 0; hd < m.nkv; ++hd)
                product(fixed, row + hd * r * m.d, cache.k + l * cache.kl + b * cache.kb + hd * cache.kh, cache.kc,
                        cache.span, cache.v + l * cache.vl + b * cache.vb + hd * cache.vh, cache.vt,
                        cache.bias == nullptr ? nullptr : cache.bias + (b * m.nkv + hd) * cache.P, cache.P,
                        &o[i * nqd + hd * r * m.d], r, m.d, end, s.data());
        }
        gemm(o.data(), nqd, n, nqd, w_o, m.Hp, x.data(), m.Hp, true);
        if (b_o != nullptr)
            for (int64_t i = 0; i < n; ++i)
                for (int64_t c = 0; c < m.H; ++c) x[i * m.Hp + c] += b_o[c];
        rms_norm(x.data(), n, m.H, m.Hp, m.eps, h.data(), m.E > 0);
        const float* router = ptr(m, l, 7);
        if (router != nullptr) {  // an MoE layer: route each row, then its experts added into x
            gemm(h.data(), m.Hp, n, m.H, router, m.Ep, lg.data(), m.Ep, false);  // (n, Ep) router logits
            for (int64_t i = 0; i < n; ++i)
                route(&lg[i * m.Ep], m.E, m.K, m.norm_topk != 0, p.data(), &idx[i * m.K], &wt[i * m.K]);
            int64_t most = 0;
            group_by_expert(idx.data(), n * m.K, m.E, start, order, most);
            experts_add(h.data(), m.Hp, m.H, wt.data(), m.K, m.E, m.Ie, ptr(m, l, 8), m.gu_p, ptr(m, l, 9), m.Hp,
                        x.data(), m.Hp, start, order, most);
            continue;
        }
        gemm(h.data(), m.Hp, n, m.H, w_gu, 2 * m.Ip, g.data(), 2 * m.Ip, false);
        for (int64_t i = 0; i < n; ++i) {
            const float* gi = &g[i * 2 * m.Ip];
            float* ai = &a[i * m.Ip];
            for (int64_t c = 0; c < m.Ip; ++c) ai[c] = silu(gi[c]) * gi[m.Ip + c];
        }
        gemm(a.data(), m.Ip, n, m.I, w_down, m.Hp, x.data(), m.Hp, true);
    }
    rms_norm(x.data(), n, m.H, m.Hp, m.eps, h.data(), m.E > 0);
    gemm(h.data(), m.Hp, n, m.H, m.head, m.Vp, out + first * m.Vp, m.Vp, false);
}

}  // namespace

extern "C" {

// C (m, n_p) [+]= A (m, k) B, B packed by gpolib/engine/step_kernel.py `pack` (n_p / 32 panels of (k, 32)); A's
// rows with stride lda >= k, C's with ldc >= n_p. Returns 0, or 1 on invalid sizes. (The matmul of the step,
// exported for its tests and benchmarks/decode_step.py.)
int gpolib_gemm_f32(const float* a, int64_t lda, int64_t m, int64_t k, const float* bp, int64_t n_p, float* c,
                    int64_t ldc, int64_t accumulate) {
    if (m < 0 || k < 0 || lda < k || n_p % NR != 0 || ldc < n_p) return 1;
    gemm(a, lda, m, k, bp, n_p, c, ldc, accumulate != 0);
    return 0;
}

// One decode step for b rows. dims: layers, H, Hp, nq, nkv, d, I, Ip, V, Vp, qkv_p (padded widths: multiples of
// 32), vocab (rows of embed), S (rows of cos / sin), and for MoE layers E, Ep, K, Ie, gu_p, norm_topk (0 without);
// eps; embed (vocab, H); cos, sin (S, d); head packed; w (layers x 10 addresses, see Model; an MoE layer's router
// packed (H, Ep), its experts packed as gpolib_moe_experts_f32 takes them with h_p = Hp); qk_eps (layers); tok, pos
// (b,); the cache (pointers and strides as Cache, the t / c strides 1; k_strides = kl, kb, kh, kc and the key rows'
// allocated columns, v_strides = vl, vb, vh, vt); bias (b nkv, P) or null; out (b, Vp). Returns 0, 1 on invalid
// sizes, 2 on a token outside the vocabulary or a position outside the RoPE table (nothing computed).
int gpolib_decode_step_f32(const int64_t* dims, float eps, const float* embed, const float* cos, const float* sin,
                           const float* head, const int64_t* w, const float* qk_eps, const int64_t* tok,
                           const int64_t* pos, int64_t b, int64_t col, float* k, const int64_t* k_strides, float* v,
                           const int64_t* v_strides, const float* bias, int64_t P, float* out, int64_t n_threads) {
    const Model m{dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8], dims[9], dims[10],
                  dims[11], dims[12], dims[13], dims[14], dims[15], dims[16], dims[17], dims[18], eps, embed, cos,
                  sin, head, w, qk_eps};
    const Cache cache{k, k_strides[0], k_strides[1], k_strides[2], k_strides[3], k_strides[4],
                      v, v_strides[0], v_strides[1], v_strides[2], v_strides[3], bias, P};
    if (b <= 0 || col < 0 || col >= cache.span || P < 0 || P > col + 1 || n_threads < 1 || m.nkv <= 0 ||
        m.nq % m.nkv != 0 || m.d % 2 != 0 || m.Hp % NR != 0 || m.Ip % NR != 0 || m.Vp % NR != 0 ||
        m.qkv_p % NR != 0 || m.Hp < m.H || m.Ip < m.I || m.Vp < m.V || m.qkv_p < (m.nq + 2 * m.nkv) * m.d)
        return 1;
    for (int64_t l = 0; l < m.layers; ++l)
        if (ptr(m, l, 7) != nullptr && (m.E <= 0 || m.K <= 0 || m.K > m.E || m.Ep % NR != 0 || m.Ep < m.E ||
                                        m.Ie <= 0 || m.gu_p % NR != 0 || m.gu_p < 2 * m.Ie))
            return 1;
    for (int64_t i = 0; i < b; ++i)
        if (tok[i] < 0 || tok[i] >= m.vocab || pos[i] < 0 || pos[i] >= m.S) return 2;
    in_parts(b, n_threads, [&](int64_t first, int64_t last) { rows_step(m, cache, tok, pos, col, first, last, out); });
    return 0;
}

// The router softmax's exp (exp_float.h) against std::exp over floats x in [from, to] (from <= to <= 0), every
// stride-th float by bit pattern (and +0 where to is 0): counts of the floats checked, of those whose result differs
// from static_cast<float>(std::exp(static_cast<double>(x))), and of those Ziv's test sent to std::exp. Returns 0, 1 on
// invalid arguments.
int gpolib_exp_check(float from, float to, int64_t stride, int64_t* counts) {
    if (!(from <= to) || to > 0.0f || stride < 1) return 1;
    counts[0] = counts[1] = counts[2] = 0;
    uint32_t lo, hi;  // negative floats: a larger magnitude has a larger bit pattern
    const float top = to == 0.0f ? -0.0f : to;
    std::memcpy(&lo, &top, 4);
    std::memcpy(&hi, &from, 4);
    float xs[8], got[8];
    int64_t m = 0;
    auto flush = [&]() {
        counts[2] += exp_to_float(xs, 0.0f, m, got);
        for (int64_t j = 0; j < m; ++j) {
            const float want = static_cast<float>(std::exp(static_cast<double>(xs[j])));
            counts[1] += std::memcmp(&want, &got[j], 4) != 0;
        }
        counts[0] += m;
        m = 0;
    };
    for (uint64_t bits = lo; bits <= hi; bits += static_cast<uint64_t>(stride)) {
        const uint32_t b32 = static_cast<uint32_t>(bits);
        std::memcpy(&xs[m++], &b32, 4);
        if (m == 8) flush();
    }
    if (to == 0.0f) xs[m++] = 0.0f;  // +0 too (a logit minus itself)
    flush();
    return 0;
}

}  // extern "C"
