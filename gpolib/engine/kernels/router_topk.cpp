// An MoE router's top-k choice for the trainer's passes (gpolib/engine/topk_kernel.py, called from the router's
// forward in gpolib/qwen_ops.py): the indices of the K largest router probabilities of each token, in descending
// order of probability, as torch.topk(p, K) gives them (issue 50). torch's CPU topk spends ~0.7 us per token on
// 64 experts; here one pass over each row keeps the K best in order by insertion, and a candidate that does not beat
// the K-th costs one comparison. Ties: the lower index first (torch leaves their order unspecified).
#include <cstdint>
#include <vector>

extern "C" {

// p (N, E) contiguous; idx (N, K) int64, written. Returns 0, 1 on invalid sizes, 3 on a NaN in p (idx then
// incomplete: the caller falls back to torch, which ranks NaN highest).
int gpolib_router_topk_f32(const float* p, int64_t N, int64_t E, int64_t K, int64_t* idx) {
    if (N < 0 || E <= 0 || K <= 0 || K > E) return 1;
    std::vector<float> best(K);
    for (int64_t n = 0; n < N; ++n) {
        const float* row = p + n * E;
        int64_t* out = idx + n * K;
        int64_t filled = 0;
        for (int64_t e = 0; e < E; ++e) {
            const float v = row[e];
            if (v != v) return 3;
            if (filled == K && !(v > best[K - 1])) continue;  // not among the K best so far
            int64_t j = filled < K ? filled++ : K - 1;        // the K-th falls out when all K are filled
            for (; j > 0 && v > best[j - 1]; --j) {           // strictly larger moves ahead: equals keep index order
                best[j] = best[j - 1];
                out[j] = out[j - 1];
            }
            best[j] = v;
            out[j] = e;
        }
    }
    return 0;
}

}  // extern "C"
