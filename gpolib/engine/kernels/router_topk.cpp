// An MoE router's top-k choice for the trainer's passes (gpolib/engine/topk_kernel.py, called from the router's
// forward in gpolib/qwen_ops.py): the indices of the K largest router probabilities of each token, in descending
// order of probability, as torch.topk(p, K) gives them (issue 50). torch's CPU topk spends ~0.7 us per token on
// 64 experts; here each row takes ~0.12 us on an AVX-512 CPU (K rounds of a vector maximum, E <= 64) or ~0.35 us by
// insertion (one pass keeping the K best in order), topk.h's `top_k`. Ties: the lower index first (torch leaves their
// order unspecified).
#include <cstdint>
#include <vector>

#include "topk.h"

extern "C" {

// p (N, E) contiguous; idx (N, K) int64, written. Returns 0, 1 on invalid sizes, 3 on a NaN in p (idx then not
// torch's: the caller falls back to torch, which ranks NaN highest).
int gpolib_router_topk_f32(const float* p, int64_t N, int64_t E, int64_t K, int64_t* idx) {
    if (N < 0 || E <= 0 || K <= 0 || K > E) return 1;
    std::vector<float> best(K);
    for (int64_t n = 0; n < N; ++n)
        if (top_k(p + n * E, E, K, best.data(), idx + n * K)) return 3;
    return 0;
}

}  // extern "C"
