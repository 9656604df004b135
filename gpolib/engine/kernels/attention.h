// The decode-attention product, shared by the two kernels of gpolib/engine/kernels: decode_attention.cpp (a step's
// attention alone) and decode_step.cpp (a whole decode step of a dense model). Each includes it once; everything
// here is internal to the including file.
//
// For each of `bn` products (a row's KV head) and its r query heads j:
//     s_j[t]  = sum_c q_j[c] K[c][t]                      t < end (the scale 1/sqrt(d) is folded into q)
//     s_j[t] += bias[t]                                   t < P   (-inf on left padding; P = 0: no padding)
//     p_j[t]  = exp(s_j[t] - max_t s_j) / sum_t exp(s_j[t] - max_t s_j)
//     o_j[c]  = sum_t p_j[t] V[t][c]
// Keys are stored transposed in the cache (K[c][t], a row of positions per channel), values untransposed
// (V[t][c]); both are strided views of the cache, so nothing is copied. Float32 throughout; exp is a
// polynomial of degree 7 after range reduction (within a few float32 ulps on [-87, 0], 0 below), written
// to vectorise (the library's expf is scalar).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace {

// exp(x) for x <= 0 (scores minus their row maximum): exp(x) = 2^n exp(g), n = round(x / ln 2),
// g = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts, the first with few enough bits that n times it is
// exact), exp(g) by its Taylor polynomial to degree 7 (truncation below 1e-8 relative there); 2^n written into
// the exponent bits. Below -87 (incl. -inf) the result is 0.
inline float exp_nonpositive(float x) {
    const float lo = -87.0f;
    float xc = x < lo ? lo : x;
    float n = std::nearbyint(xc * 1.44269504088896341f);
    float g = xc - n * 0.693359375f;
    g = g + n * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * g + 1.0f / 720.0f;
    p = p * g + 1.0f / 120.0f;
    p = p * g + 1.0f / 24.0f;
    p = p * g + 1.0f / 6.0f;
    p = p * g + 0.5f;
    p = p * g + 1.0f;
    p = p * g + 1.0f;
    int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return x < lo ? 0.0f : p * scale;
}

// Rows j < r of s (r, end) in place: add bias to the first P columns (if any), then softmax over each row.
void softmax_rows(float* __restrict s, const float* __restrict bias, int64_t P, int64_t r, int64_t end) {
    for (int64_t j = 0; j < r; ++j) {
        float* sj = s + j * end;
        if (bias != nullptr) {
            for (int64_t t = 0; t < P; ++t) sj[t] += bias[t];
        }
        float m = sj[0];
        for (int64_t t = 1; t < end; ++t) m = sj[t] > m ? sj[t] : m;
        float sum = 0.0f;
        for (int64_t t = 0; t < end; ++t) {
            const float e = exp_nonpositive(sj[t] - m);
            sj[t] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
        for (int64_t t = 0; t < end; ++t) sj[t] *= inv;
    }
}

void one_product(const float* __restrict q, const float* __restrict k, int64_t k_c, const float* __restrict v,
                 int64_t v_t, const float* __restrict bias, int64_t P, float* __restrict out, int64_t r,
                 int64_t d, int64_t end, float* __restrict s) {
    // s: (r, end) scratch
    std::fill(s, s + r * end, 0.0f);
    for (int64_t c = 0; c < d; ++c) {
        const float* kc = k + c * k_c;
        for (int64_t j = 0; j < r; ++j) {
            const float qc = q[j * d + c];
            float* sj = s + j * end;
            for (int64_t t = 0; t < end; ++t) sj[t] += qc * kc[t];
        }
    }
    softmax_rows(s, bias, P, r, end);
    std::fill(out, out + r * d, 0.0f);
    for (int64_t t = 0; t < end; ++t) {
        const float* vt = v + t * v_t;
        for (int64_t j = 0; j < r; ++j) {
            const float p = s[j * end + t];
            float* oj = out + j * d;
            for (int64_t c = 0; c < d; ++c) oj[c] += p * vt[c];
        }
    }
}


// The same product for R query heads per KV head and head dim D (a multiple of 16) known at compile time, in
// 16-float vectors held in registers: scores a block of 16 positions at a time, summed over the D channels
// (each key row read once for the R heads); values summed into R x D/16 vector accumulators. The softmax between
// them is `softmax_rows`.
typedef float vec16 __attribute__((vector_size(64)));
constexpr int W = 16;

inline vec16 load16(const float* p) {
    vec16 x;
    std::memcpy(&x, p, sizeof x);
    return x;
}

inline void store16(float* p, vec16 x) { std::memcpy(p, &x, sizeof x); }

// Scores of R query heads against positions t0 .. t0 + n - 1 (n <= 16) into s (rows of `end`); `whole`: the 16
// positions from t0 are readable in every key row (read as one vector, the ones past n dropped), else the n are
// copied into a zero-padded vector first.
template <int R, int D>
inline void score_block(const float* __restrict q, const float* __restrict k, int64_t k_c, int64_t t0, int64_t n,
                        bool whole, int64_t end, float* __restrict s) {
    vec16 acc[R];
    for (int j = 0; j < R; ++j) acc[j] = vec16{};
    if (whole) {
        for (int c = 0; c < D; ++c) {
            const vec16 kc = load16(k + c * k_c + t0);
            for (int j = 0; j < R; ++j) acc[j] += q[j * D + c] * kc;
        }
    } else {
        float tail[W];
        for (int c = 0; c < D; ++c) {
            std::memset(tail, 0, sizeof tail);
            std::memcpy(tail, k + c * k_c + t0, n * sizeof(float));
            const vec16 kc = load16(tail);
            for (int j = 0; j < R; ++j) acc[j] += q[j * D + c] * kc;
        }
    }
    for (int j = 0; j < R; ++j) {
        if (n == W) {
            store16(s + j * end + t0, acc[j]);
        } else {
            float row[W];
            store16(row, acc[j]);
            std::memcpy(s + j * end + t0, row, n * sizeof(float));
        }
    }
}

// span: positions readable in each key row from t = 0 (>= end; the cache's allocated columns), so that the last
// end % 16 positions are read as one vector where span allows.
template <int R, int D>
void fixed_product(const float* __restrict q, const float* __restrict k, int64_t k_c, int64_t span,
                   const float* __restrict v, int64_t v_t, const float* __restrict bias, int64_t P,
                   float* __restrict out, int64_t end, float* __restrict s) {
    for (int64_t t0 = 0; t0 < end; t0 += W) {
        const int64_t n = end - t0 < W ? end - t0 : W;
        score_block<R, D>(q, k, k_c, t0, n, n == W || t0 + W <= span, end, s);
    }
    softmax_rows(s, bias, P, R, end);
    constexpr int NV = D / W;
    vec16 o[R][NV];
    for (int j = 0; j < R; ++j)
        for (int n = 0; n < NV; ++n) o[j][n] = vec16{};
    for (int64_t t = 0; t < end; ++t) {
        const float* vt = v + t * v_t;
        for (int n = 0; n < NV; ++n) {
            const vec16 vv = load16(vt + n * W);
            for (int j = 0; j < R; ++j) o[j][n] += s[j * end + t] * vv;
        }
    }
    for (int j = 0; j < R; ++j)
        for (int n = 0; n < NV; ++n) store16(out + j * D + n * W, o[j][n]);
}

using Product = void (*)(const float*, const float*, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                         float*, int64_t, float*);

template <int R>
Product for_dim(int64_t d) {
    switch (d) {
        case 32: return fixed_product<R, 32>;
        case 64: return fixed_product<R, 64>;
        case 128: return fixed_product<R, 128>;
        default: return nullptr;
    }
}

// The compiled product for (r, d), or null (then `one_product`, any sizes).
Product fixed_for(int64_t r, int64_t d) {
    switch (r) {
        case 1: return for_dim<1>(d);
        case 2: return for_dim<2>(d);
        case 4: return for_dim<4>(d);
        case 8: return for_dim<8>(d);
        default: return nullptr;
    }
}

// One product by `fixed` where (r, d) has a compiled one (fixed_for), else by the generic loop. span: see
// fixed_product (end where nothing past the used positions may be read).
inline void product(Product fixed, const float* q, const float* k, int64_t k_c, int64_t span, const float* v,
                    int64_t v_t, const float* bias, int64_t P, float* out, int64_t r, int64_t d, int64_t end,
                    float* s) {
    if (fixed != nullptr) {
        fixed(q, k, k_c, span, v, v_t, bias, P, out, end, s);
    } else {
        one_product(q, k, k_c, v, v_t, bias, P, out, r, d, end, s);
    }
}

// part(first, last) on n_threads contiguous parts of [0, total), each on its own thread (the calling thread takes
// the first), joined before returning: the kernels' rows / products are independent, so no other synchronisation.
template <class Part>
void in_parts(int64_t total, int64_t n_threads, Part part) {
    const int64_t n = n_threads < total ? n_threads : total;
    std::vector<std::thread> others;
    for (int64_t i = 1; i < n; ++i) others.emplace_back(part, total * i / n, total * (i + 1) / n);
    part(0, total / n);
    for (auto& th : others) th.join();
}

}  // namespace
