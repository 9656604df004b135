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

// Where B's row p of the panel at column j lies: `Packed`, n_p / NR panels of (k, NR) one after another (`gemm`);
// `Rows`, row pointers (row p of B at b[p], its columns contiguous: no packing copy); `Strided`, B as
// it lies in memory, row p at base + p ld.
struct Packed {
    const float* bp;
    int64_t k;
    const float* row(int64_t p, int64_t j) const { return bp + j * k + p * NR; }
};
struct Rows {
    const float* const* b;
    const float* row(int64_t p, int64_t j) const { return b[p] + j; }
};
struct Strided {  // B's rows ld floats apart (a matrix as it lies, not packed)
    const float* base;
    int64_t ld;
    const float* row(int64_t p, int64_t j) const { return base + p * ld + j; }
};

// TA: A given transposed, A[i][p] at a[p lda + i] (its rows the columns of the matrix in memory).
template <int MR, typename B, bool TA>
void micro(const float* __restrict a, int64_t lda, B b, int64_t j, int64_t k, float* __restrict c, int64_t ldc,
           bool accumulate) {
    vec16 c0[MR], c1[MR];
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = vec16{};
    for (int64_t p = 0; p < k; ++p) {
        const float* bpj = b.row(p, j);
        const vec16 b0 = load16(bpj), b1 = load16(bpj + W);
        for (int i = 0; i < MR; ++i) {
            const float ai = TA ? a[p * lda + i] : a[i * lda + p];
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

// C (m, n_p) [+]= A (m, k) B for B as `b` gives its rows (`Packed`, `Rows`, `Strided`) and A as it lies (TA = false:
// row i at a + i lda) or transposed (TA: A[i][p] at a[p lda + i]): the micro-kernels over MR_MAX rows of A and the NR
// columns of one panel at a time; each C element the same products summed in the same order either way.
template <typename B, bool TA = false>
void gemm_of(const float* a, int64_t lda, int64_t m, int64_t k, B b, int64_t n_p, float* c, int64_t ldc,
             bool accumulate) {
    using Micro = void (*)(const float*, int64_t, B, int64_t, int64_t, float*, int64_t, bool);
    constexpr Micro MICRO[9] = {nullptr, micro<1, B, TA>, micro<2, B, TA>, micro<3, B, TA>, micro<4, B, TA>,
                                micro<5, B, TA>, micro<6, B, TA>, micro<7, B, TA>, micro<8, B, TA>};
    for (int64_t j = 0; j < n_p; j += NR)
        for (int64_t i = 0; i < m; i += MR_MAX) {
            const int64_t rows = m - i < MR_MAX ? m - i : MR_MAX;
            MICRO[rows](TA ? a + i : a + i * lda, lda, b, j, k, c + i * ldc + j, ldc, accumulate);
        }
}

void gemm(const float* a, int64_t lda, int64_t m, int64_t k, const float* bp, int64_t n_p, float* c, int64_t ldc,
          bool accumulate) {
    gemm_of(a, lda, m, k, Packed{bp, k}, n_p, c, ldc, accumulate);
}

// silu(x) = x sigmoid(x), sigmoid from e = exp(-|x|) <= 1: 1 / (1 + e) for x >= 0, e / (1 + e) below.
inline float silu(float x) {
    const float e = exp_nonpositive(x < 0.0f ? x : -x);
    return x * ((x < 0.0f ? e : 1.0f) / (1.0f + e));
}

}  // namespace
