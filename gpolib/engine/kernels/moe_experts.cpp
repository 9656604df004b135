// A Qwen3-MoE layer's routed experts in one call, forward and backward, for the trainer's passes (gpolib/qwen_ops.py)
// and the float32 decoder (gpolib/engine/decoder.py); gpolib/engine/experts_kernel.py packs the weights and calls it.
//
// For N tokens x (N, H), each routed to k experts idx (N, k) with weights w (N, k):
//     out_n = sum_j down_e( silu(gate_e x_n) * up_e x_n * w_nj ),   e = idx[n, j]
// as gpolib.qwen_ops.experts_forward computes it: the (token, slot) pairs grouped by expert in slot order (a stable
// counting sort), each expert's rows gathered and multiplied by its packed [gate | up] and down matrices (gemm.h),
// the routing weight on the (rows, I) SwiGLU product, and each token's slots summed in expert order (experts.h). On
// the CPU, torch's grouped matmul is one matmul call per expert, with a gather, a sort and a scatter around it; here
// the whole layer is one call, its small products in registers.
#include "attention.h"
#include "experts.h"

extern "C" {

// x (N, H) contiguous; idx (N, k) int64 in [0, E); w (N, k); gate_up packed per expert: E blocks of (H, gu_p)
// panels (gate in columns [0, I), up in [I, 2I), zero past 2I; gu_p a multiple of 32 >= 2I); down packed per
// expert: E blocks of (I, h_p) panels (h_p a multiple of 32 >= H); out (N, H) contiguous, overwritten (accumulate
// = 0) or added to; g_save null, or (N k, 2I) written with each (token, slot) pair's [gate_e x | up_e x] in slot
// order, which the backward then reads instead of multiplying again (its g_saved). Returns 0, 1 on invalid sizes, 2 on
// an expert index outside [0, E) (nothing written).
int gpolib_moe_experts_f32(const float* x, int64_t N, int64_t H, const int64_t* idx, const float* w, int64_t k,
                           int64_t E, int64_t I, const float* gate_up, int64_t gu_p, const float* down, int64_t h_p,
                           float* out, int64_t accumulate, float* g_save) {
    if (N < 0 || H <= 0 || k <= 0 || E <= 0 || I <= 0 || gu_p % NR != 0 || gu_p < 2 * I || h_p % NR != 0 ||
        h_p < H)
        return 1;
    std::vector<int64_t> start, order;
    int64_t most = 0;
    if (!group_by_expert(idx, N * k, E, start, order, most)) return 2;
    if (accumulate == 0) std::memset(out, 0, sizeof(float) * N * H);
    experts_add(x, H, H, w, k, E, I, gate_up, gu_p, down, h_p, out, H, start, order, most, g_save);
    return 0;
}

// The backward of gpolib_moe_experts_f32 for the output's gradient dy (N, H) (issue 50, the training pass). For each
// (token, slot) pair with expert e, g = gate_e x, u = up_e x, s = sigmoid(g), p = silu(g) u, a = w p:
//     da = down_e^T dy,  dw = <da, p>,  dp = w da,  du = dp silu(g),  dg = dp u s (1 + g (1 - s)),
//     dx += gate_e^T dg + up_e^T du,  dgate_up_e += [dg | du] x^T,  ddown_e += dy a^T,
// each expert's rows read in place, its weight gradients as two matmuls over its rows (gemm.h). x, dy (N, H)
// contiguous, H a multiple of NR; idx, w (N, k); gate_up packed as the forward takes it; gate_up_t (E, 2I, H) and
// down_t (E, H, I) contiguous, the experts as transformers lays them out, read where they lie (down_e's columns packed
// into panels first unless I is a multiple of W). Written
// (overwritten): dx (N, H), dw (N, k), dgate_up (E, 2I, H), ddown_t (E, I, H) = d down_e transposed. g_saved: null,
// or the forward's [g | u] (N k, 2I) in slot order (gpolib_moe_experts_f32's g_save), read instead of multiplying x
// by gate_up again: the same numbers, computed by the same product. Returns 0, 1 on invalid sizes, 2 on an expert
// index outside [0, E) (nothing written).
int gpolib_moe_experts_backward_f32(const float* x, const float* dy, int64_t N, int64_t H, const int64_t* idx,
                                    const float* w, int64_t k, int64_t E, int64_t I, const float* gate_up,
                                    int64_t gu_p, const float* gate_up_t, const float* down_t, float* dx, float* dw,
                                    float* dgate_up, float* ddown_t, const float* g_saved) {
    if (N < 0 || H <= 0 || H % NR != 0 || k <= 0 || E <= 0 || I <= 0 || gu_p % NR != 0 || gu_p < 2 * I) return 1;
    const int64_t i_p = (I + NR - 1) / NR * NR;
    const bool down_as_is = I % W == 0;  // every panel of down_e's rows lies within them, whole or its first W
    std::vector<int64_t> start, order;
    int64_t most = 0;
    if (!group_by_expert(idx, N * k, E, start, order, most)) return 2;
    std::memset(dx, 0, sizeof(float) * N * H);
    const int64_t I2 = 2 * I;
    std::vector<float> g(most * gu_p), da(most * i_p), dgu(most * I2), a(most * I), down_p(down_as_is ? 0 : H * i_p);
    std::vector<const float*> xr(most), dyr(most), dgur(most);
    std::vector<float*> gr(most), dar(most), dxr(most);
    for (int64_t r = 0; r < most; ++r) {
        gr[r] = &g[r * gu_p];
        dar[r] = &da[r * i_p];
        dgur[r] = &dgu[r * I2];
    }
    for (int64_t e = 0; e < E; ++e) {
        const int64_t first = start[e], rows = start[e + 1] - first;
        if (rows == 0) {  // no token: zero weight gradients (the others are written whole below)
            std::memset(dgate_up + e * I2 * H, 0, sizeof(float) * I2 * H);
            std::memset(ddown_t + e * I * H, 0, sizeof(float) * I * H);
            continue;
        }
        for (int64_t r = 0; r < rows; ++r) {  // the expert's tokens, read in place
            const int64_t t = order[first + r] / k;
            xr[r] = x + t * H;
            dyr[r] = dy + t * H;
            dxr[r] = dx + t * H;
        }
        if (g_saved == nullptr)
            gemm_rows(xr.data(), rows, H, gate_up + e * H * gu_p, gu_p, gr.data(), false);  // [g | u] (rows, gu_p)
        else
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(gr[r], g_saved + order[first + r] * I2, sizeof(float) * I2);
        const float* down_e = down_t + e * H * I;  // (H, I)
        if (down_as_is) {
            gemm_rows_of(dyr.data(), rows, H, Strided{down_e, I}, i_p, dar.data(), false, I);  // da (rows, I of i_p)
        } else {
            for (int64_t h = 0; h < H; ++h)  // panels of NR columns, zero past I
                for (int64_t c = 0; c < i_p; ++c)
                    down_p[(c / NR) * H * NR + h * NR + c % NR] = c < I ? down_e[h * I + c] : 0.0f;
            gemm_rows(dyr.data(), rows, H, down_p.data(), i_p, dar.data(), false, I);
        }
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t slot = order[first + r];
            const float wr = w[slot];
            float dot = 0.0f;
            for (int64_t c = 0; c < I; ++c) {
                const float gv = g[r * gu_p + c], uv = g[r * gu_p + I + c], d = da[r * i_p + c];
                const float en = exp_nonpositive(gv < 0.0f ? gv : -gv);
                const float sg = (gv < 0.0f ? en : 1.0f) / (1.0f + en), sl = gv * sg;  // sigmoid(g), silu(g)
                const float p = sl * uv, dp = d * wr;
                const float dg = dp * uv * sg * (1.0f + gv * (1.0f - sg)), du = dp * sl;
                dot += d * p;
                dgu[r * I2 + c] = dg;
                dgu[r * I2 + I + c] = du;
                a[r * I + c] = p * wr;
            }
            dw[slot] = dot;
        }
        const Strided gate_up_e{gate_up_t + e * I2 * H, H};  // (2I, H) as it lies
        gemm_rows_of(dgur.data(), rows, I2, gate_up_e, H, dxr.data(), true);  // dx rows += (rows, H)
        // dgate_up_e = [dg | du]^T x (2I, H) and ddown_e^T = a^T dy (I, H): A transposed, B the rows in place
        gemm_of<Rows, true>(dgu.data(), I2, I2, rows, Rows{xr.data()}, H, dgate_up + e * I2 * H, H, false);
        gemm_of<Rows, true>(a.data(), I, I, rows, Rows{dyr.data()}, H, ddown_t + e * I * H, H, false);
    }
    return 0;
}

}  // extern "C"
