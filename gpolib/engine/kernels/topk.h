// The K largest of E values in descending order, shared by router_topk.cpp (the trainer's router top-k) and
// decode_step.cpp (the router inside a decode step). Each includes it once; everything here is internal to the
// including file.
#pragma once
#include <cmath>
#include <cstdint>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

// One pass over p (E), keeping the K best in best / idx (K each) in descending order by insertion: a value that does
// not beat the K-th costs one comparison; strictly larger moves ahead, so equal values keep the lower index first.
// Returns whether p holds a NaN (then the K kept are not torch.topk's, which ranks NaN highest).
bool top_k_insert(const float* p, int64_t E, int64_t K, float* best, int64_t* idx) {
    bool nan = false;
    int64_t filled = 0;
    for (int64_t e = 0; e < E; ++e) {
        const float v = p[e];
        nan = nan || v != v;
        if (filled == K && !(v > best[K - 1])) continue;  // not among the K best so far
        int64_t j = filled < K ? filled++ : K - 1;         // the K-th falls out when all K are filled
        for (; j > 0 && v > best[j - 1]; --j) {
            best[j] = best[j - 1];
            idx[j] = idx[j - 1];
        }
        best[j] = v;
        idx[j] = e;
    }
    return nan;
}

#if defined(__AVX512F__)
// `top_k_insert`'s K best by K rounds of a vector maximum over the values not yet taken (E <= 64: up to 4 vectors of
// 16 in registers), each round taking the lowest index holding that maximum (the first set bit of one 64-bit mask):
// the same indices in the same order (equal values, -0 and +0 included, lower index first; -inf taken like any
// value), without the insertion's unpredictable branch per value. NaN: `top_k_insert` (its flag and its choice).
bool top_k_vector(const float* p, int64_t E, int64_t K, float* best, int64_t* idx) {
    const int nv = static_cast<int>((E + 15) / 16);
    __m512 v[4];
    __mmask16 live[4];
    __mmask16 nan = 0;
    for (int c = 0; c < nv; ++c) {
        const int64_t n = E - 16 * c < 16 ? E - 16 * c : 16;
        live[c] = static_cast<__mmask16>((1u << n) - 1u);
        v[c] = _mm512_maskz_loadu_ps(live[c], p + 16 * c);  // no read past E
        nan |= _mm512_mask_cmp_ps_mask(live[c], v[c], v[c], _CMP_UNORD_Q);
    }
    if (nan) return top_k_insert(p, E, K, best, idx);
    const __m512 lowest = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < K; ++j) {
        __m512 mx = _mm512_mask_mov_ps(lowest, live[0], v[0]);
        for (int c = 1; c < nv; ++c) mx = _mm512_mask_max_ps(mx, live[c], mx, v[c]);
        const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
        uint64_t at = 0;  // the live values equal to the maximum, bit e for value e
        for (int c = 0; c < nv; ++c)
            at |= static_cast<uint64_t>(_mm512_mask_cmp_ps_mask(live[c], v[c], m, _CMP_EQ_OQ)) << (16 * c);
        const int e = __builtin_ctzll(at);
        idx[j] = e;
        best[j] = p[e];
        live[e / 16] = static_cast<__mmask16>(live[e / 16] & ~(1u << (e % 16)));
    }
    return false;
}
#endif

// The K best of p (E) in descending order as `top_k_insert` gives them (its return value too): `top_k_vector` where
// the CPU has AVX-512 and E <= 64, else `top_k_insert`.
bool top_k(const float* p, int64_t E, int64_t K, float* best, int64_t* idx) {
#if defined(__AVX512F__)
    if (E <= 64) return top_k_vector(p, E, K, best, idx);
#endif
    return top_k_insert(p, E, K, best, idx);
}

}  // namespace
