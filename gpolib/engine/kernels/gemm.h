// The register-blocked matmul and SiLU shared by decode_step.cpp (a whole dense decode step) and moe_experts.cpp (an
// MoE layer's routed experts). Each includes it once; everything here is internal to the including file.
#pragma once
#include "attention.h"

namespace {

// C (m, n_p) [+]= A (m, k) B for B packed as n_p / NR panels of (k, NR) (columns zero-padded to a multiple of
// NR): micro-kernels of up to MR_MAX rows x 32 columns held in vector accumulators, each B panel row read once per
// MR_MAX rows. A's rows have stride lda, C's ldc. MR_MAX fits the accumulators, the two B vectors and a broadcast
// in the CPU's vector registers: 32 of 16 floats with AVX-512 (8 rows: 16 accumulators), else 16 of 8 floats, where
// a 16-float vector takes two (2 rows: 8).
constexpr int NR = 2 * W;
#if defined(__AVX512F__)
constexpr int MR_MAX = 8;
#else
constexpr int MR_MAX = 2;
#endif

template <int MR>
void micro(const float* __restrict a, int64_t lda, const float* __restrict bp, int64_t k, float* __restrict c,
           int64_t ldc, bool accumulate) {
    vec16 c0[MR], c1[MR];
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = vec16{};
    for (int64_t p = 0; p < k; ++p) {
        const vec16 b0 = load16(bp + p * NR), b1 = load16(bp + p * NR + W);
        for (int i = 0; i < MR; ++i) {
            const float ai = a[i * lda + p];
            c0[i] += ai * b0;
            c1[i] += ai * b1;
        }
    }
    for (int i = 0; i < MR; ++i) {
        float* ci = c + i * ldc;
        if (accumulate) {
            c0[i] += load16(ci);
            c1[i] += load16(ci + W);
        }
        store16(ci, c0[i]);
        store16(ci + W, c1[i]);
    }
}

using Micro = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);
constexpr Micro MICRO[9] = {nullptr, micro<1>, micro<2>, micro<3>, micro<4>, micro<5>, micro<6>, micro<7>, micro<8>};

void gemm(const float* a, int64_t lda, int64_t m, int64_t k, const float* bp, int64_t n_p, float* c, int64_t ldc,
          bool accumulate) {
    for (int64_t j = 0; j < n_p; j += NR) {
        const float* panel = bp + j * k;
        for (int64_t i = 0; i < m; i += MR_MAX) {
            const int64_t rows = m - i < MR_MAX ? m - i : MR_MAX;
            MICRO[rows](a + i * lda, lda, panel, k, c + i * ldc + j, ldc, accumulate);
        }
    }
}

// silu(x) = x sigmoid(x), sigmoid from e = exp(-|x|) <= 1: 1 / (1 + e) for x >= 0, e / (1 + e) below.
inline float silu(float x) {
    const float e = exp_nonpositive(x < 0.0f ? x : -x);
    return x * ((x < 0.0f ? e : 1.0f) / (1.0f + e));
}

}  // namespace
