// One decode step's attention over a preallocated KV cache, fused: scores, padding bias, softmax and the
// weighted sum of values in one pass per (row, KV head), for Decoder.step of gpolib/engine/decoder.py where the whole
// step is not fused (MoE models, kernels='attention'). gpolib/engine/native.py builds every kernels/*.cpp into one
// library with the machine's C++ compiler; gpolib/engine/attention_kernel.py calls this function through ctypes.
// The product itself is in attention.h.
#include "attention.h"

extern "C" {

// q (bn, r, d) contiguous; K[b][c][t] at k + b k_b + c k_c + t; V[b][t][c] at v + b v_b + t v_t + c;
// bias (bn, P) contiguous or null; out (bn, r, d) contiguous. The products are split into n_threads contiguous
// parts, each on its own thread (the calling thread takes the first). Returns 0, or 1 on invalid sizes.
int gpolib_decode_attention_f32(const float* q, const float* k, int64_t k_b, int64_t k_c, const float* v,
                                int64_t v_b, int64_t v_t, const float* bias, int64_t P, float* out, int64_t bn,
                                int64_t r, int64_t d, int64_t end, int64_t n_threads) {
    if (end <= 0 || bn <= 0 || r <= 0 || d <= 0 || P < 0 || P > end || n_threads < 1) return 1;
    const Product fixed = fixed_for(r, d);
    auto part = [=](int64_t first, int64_t last) {
        std::vector<float> s(static_cast<size_t>(r * end));
        for (int64_t b = first; b < last; ++b)
            product(fixed, q + b * r * d, k + b * k_b, k_c, end, v + b * v_b, v_t,
                    bias == nullptr ? nullptr : bias + b * P, P, out + b * r * d, r, d, end, s.data());
    };
    in_parts(bn, n_threads, part);
    return 0;
}

}  // extern "C"
