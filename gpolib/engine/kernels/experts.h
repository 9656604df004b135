// An MoE layer's routed experts over rows given by pointers, shared by moe_experts.cpp (the experts alone, forward
// and backward) and decode_step.cpp (a whole decode step, MoE layers included). Each includes it once; everything
// here is internal to the including file.
#pragma once
#include "gemm.h"

namespace {


// `micro` of gemm.h with A's and C's rows given by pointers: C[i] (NR floats) [+]= A[i] (k) B for the panel at column
// col, B's rows as `b` gives them (gemm.h's `Packed`, `Strided`). The gathered rows of an expert are read where they
// lie and its output added into the tokens' rows, no copy.
template <int MR, typename B>
void micro_rows(const float* const* a, B b, int64_t k, float* const* c, int64_t col, bool accumulate) {
    vec16 c0[MR], c1[MR];
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = vec16{};
    for (int64_t p = 0; p < k; ++p) {
        const float* bpj = b.row(p, col);
        const vec16 b0 = load16(bpj), b1 = load16(bpj + W);
        for (int i = 0; i < MR; ++i) {
            const float ai = a[i][p];
            c0[i] += ai * b0;
            c1[i] += ai * b1;
        }
    }
    for (int i = 0; i < MR; ++i) {
        float* ci = c[i] + col;
        if (accumulate) {
            c0[i] += load16(ci);
            c1[i] += load16(ci + W);
        }
        store16(ci, c0[i]);
        store16(ci + W, c1[i]);
    }
}

// `micro_rows` for a panel whose columns past its first W are zero padding (or not there): C[i][col, col + W) [+]=
// A[i] (k) B's first W columns, half the multiplications; C's other W columns of the panel are not written.
template <int MR, typename B>
void micro_rows_half(const float* const* a, B b, int64_t k, float* const* c, int64_t col, bool accumulate) {
    vec16 c0[MR];
    for (int i = 0; i < MR; ++i) c0[i] = vec16{};
    for (int64_t p = 0; p < k; ++p) {
        const vec16 b0 = load16(b.row(p, col));
        for (int i = 0; i < MR; ++i) c0[i] += a[i][p] * b0;
    }
    for (int i = 0; i < MR; ++i) {
        float* ci = c[i] + col;
        if (accumulate) c0[i] += load16(ci);
        store16(ci, c0[i]);
    }
}

// C[i][0, n_p) [+]= A[i] (k) B for m rows given by pointers, B's rows as `b` gives them. n: B's columns before its
// zero padding (default n_p, all); a last panel with at most W of them is multiplied by its first W alone, and C's
// columns from there to n_p are then not written.
template <typename B>
void gemm_rows_of(const float* const* a, int64_t m, int64_t k, B b, int64_t n_p, float* const* c, bool accumulate,
                  int64_t n = -1) {
    using MicroRows = void (*)(const float* const*, B, int64_t, float* const*, int64_t, bool);
    constexpr MicroRows FULL[9] = {nullptr, micro_rows<1, B>, micro_rows<2, B>, micro_rows<3, B>, micro_rows<4, B>,
                                   micro_rows<5, B>, micro_rows<6, B>, micro_rows<7, B>, micro_rows<8, B>};
    constexpr MicroRows HALF[9] = {nullptr, micro_rows_half<1, B>, micro_rows_half<2, B>, micro_rows_half<3, B>,
                                   micro_rows_half<4, B>, micro_rows_half<5, B>, micro_rows_half<6, B>,
                                   micro_rows_half<7, B>, micro_rows_half<8, B>};
    n = n < 0 ? n_p : n;
    for (int64_t j = 0; j < n_p; j += NR) {
        const MicroRows* micro = n - j <= W ? HALF : FULL;
        for (int64_t i = 0; i < m; i += MR_MAX) {
            const int64_t rows = m - i < MR_MAX ? m - i : MR_MAX;
            micro[rows](a + i, b, k, c + i, j, accumulate);
        }
    }
}

// `gemm_rows` for B packed as gemm.h's `gemm` takes it.
void gemm_rows(const float* const* a, int64_t m, int64_t k, const float* bp, int64_t n_p, float* const* c,
               bool accumulate, int64_t n = -1) {
    gemm_rows_of(a, m, k, Packed{bp, k}, n_p, c, accumulate, n);
}

// The S = N k (token, slot) pairs grouped by expert in slot order (a stable counting sort): expert e's slots are
// order[start[e] .. start[e + 1]); most = the largest group. False on an expert index outside [0, E).
bool group_by_expert(const int64_t* idx, int64_t S, int64_t E, std::vector<int64_t>& start,
                     std::vector<int64_t>& order, int64_t& most) {
    start.assign(E + 1, 0);
    for (int64_t s = 0; s < S; ++s) {
        if (idx[s] < 0 || idx[s] >= E) return false;
        ++start[idx[s] + 1];
    }
    most = 0;
    for (int64_t e = 0; e < E; ++e) {
        most = start[e + 1] > most ? start[e + 1] : most;
        start[e + 1] += start[e];
    }
    order.resize(S);
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t s = 0; s < S; ++s) order[next[idx[s]]++] = s;
    return true;
}

// out rows [+]= the routed experts of N tokens grouped by `group_by_expert` (start, order, most): for x's rows (stride
// ldx), out_n += sum_j down_e(silu(gate_e x_n) * up_e x_n * w_nj), e = idx[n, j], each expert's rows read in place
// and its output added into the tokens' rows of out (stride ldo) in expert order. gate_up / down packed as
// gpolib_moe_experts_f32 takes them. g_save: null, or (N k, 2I) written with each (token, slot) pair's [gate_e x_n |
// up_e x_n] in slot order, for the backward (gpolib_moe_experts_backward_f32's g_saved).
void experts_add(const float* x, int64_t ldx, int64_t H, const float* w, int64_t k, int64_t E, int64_t I,
                 const float* gate_up, int64_t gu_p, const float* down, int64_t h_p, float* out, int64_t ldo,
                 const std::vector<int64_t>& start, const std::vector<int64_t>& order, int64_t most,
                 float* g_save = nullptr) {
    // H a multiple of NR: each expert's output rows are added into the tokens' rows directly; else through y
    const bool direct = H % NR == 0;
    // g_save without padding (gu_p = 2I): the [gate | up] product written into its rows directly, else copied there
    const bool in_place = g_save != nullptr && gu_p == 2 * I;
    std::vector<float> g(most * gu_p), a(most * I), y(direct ? 0 : most * h_p);
    std::vector<const float*> xr(most), ar(most);
    std::vector<float*> gr(most), outr(most);
    for (int64_t r = 0; r < most; ++r) {
        gr[r] = &g[r * gu_p];
        ar[r] = &a[r * I];
    }
    for (int64_t e = 0; e < E; ++e) {
        const int64_t first = start[e], rows = start[e + 1] - first;
        if (rows == 0) continue;
        for (int64_t r = 0; r < rows; ++r) {  // the expert's tokens, read in place
            xr[r] = x + (order[first + r] / k) * ldx;
            outr[r] = direct ? out + (order[first + r] / k) * ldo : &y[r * h_p];
            if (in_place) gr[r] = g_save + order[first + r] * 2 * I;
        }
        gemm_rows(xr.data(), rows, H, gate_up + e * H * gu_p, gu_p, gr.data(), false);  // (rows, gu_p)
        if (g_save != nullptr && !in_place)
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(g_save + order[first + r] * 2 * I, gr[r], sizeof(float) * 2 * I);
        for (int64_t r = 0; r < rows; ++r) {
            const float* g_r = gr[r];
            const float wr = w[order[first + r]];
            for (int64_t c = 0; c < I; ++c) a[r * I + c] = silu(g_r[c]) * g_r[I + c] * wr;
        }
        gemm_rows(ar.data(), rows, I, down + e * I * h_p, h_p, outr.data(), direct);  // out rows += (rows, H)
        if (!direct)
            for (int64_t r = 0; r < rows; ++r) {
                float* o = out + (order[first + r] / k) * ldo;
                for (int64_t c = 0; c < H; ++c) o[c] += y[r * h_p + c];
            }
    }
}

}  // namespace
