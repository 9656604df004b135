// The K largest of E values in descending order, shared by router_topk.cpp (the trainer's router top-k) and
// decode_step.cpp (the router inside a decode step). Each includes it once; everything here is internal to the
// including file.
#pragma once
#include <cstdint>

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

}  // namespace
