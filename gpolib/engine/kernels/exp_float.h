// exp of float arguments <= 0 computed in double and rounded to float, 8 at a time, for the MoE router's softmax in
// decode_step.cpp (issue 50): the same floats as static_cast<float>(std::exp(static_cast<double>(x))) for every x,
// which the step computed one call at a time (~14% of a fine-MoE decode step at 128 rows).
//
// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, the first exact times n), exp(r) by its
// Taylor polynomial to degree 13 (|r| <= ln2 / 2: truncation below 5e-18), 2^n written into the exponent bits. The
// double result is within a few ulps of exp(x), std::exp's within one; rounding to float can then differ only where
// exp(x) lies within a few double ulps of a float rounding boundary. Ziv's test finds those: where y (1 - 2^-48) and
// y (1 + 2^-48) round to different floats, std::exp decides that element. So the floats are std::exp's, exactly
// (checked over every float in [-110, 0] by gpolib_exp_check in decode_step.cpp; tests/test_step_kernel.py).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

typedef double vec8d __attribute__((vector_size(64)));
typedef float vec8f __attribute__((vector_size(32)));
typedef int64_t vec8l __attribute__((vector_size(64)));
typedef int32_t vec8i __attribute__((vector_size(32)));

constexpr double EXP_LOWEST = -110.0;  // exp(-110) = 1.7e-48 rounds to float 0, as does anything below

// exp(x) in double for x in [EXP_LOWEST, 0].
inline vec8d exp_double8(vec8d x) {
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double shift = 6755399441055744.0;  // 1.5 2^52: t - shift is t rounded to an integer
    const vec8d n = (x * 1.44269504088896338700 + shift) - shift;
    const vec8d r = (x - n * ln2_hi) - n * ln2_lo;
    vec8d p = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;  // 1/13!, 1/12!
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const vec8l bits = (__builtin_convertvector(n, vec8l) + 1023) << 52;  // 2^n, n in [-159, 0]
    vec8d scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// All lanes of a comparison's result (-1 / 0 per lane) set.
inline bool all_set(vec8i m) {
    m &= __builtin_shuffle(m, vec8i{4, 5, 6, 7, 0, 1, 2, 3});
    m &= __builtin_shuffle(m, vec8i{2, 3, 0, 1, 6, 7, 4, 5});
    m &= __builtin_shuffle(m, vec8i{1, 0, 3, 2, 5, 4, 7, 6});
    return m[0] != 0;
}

// out[j] = static_cast<float>(std::exp(static_cast<double>(x[j]))) for j < m <= 8, from y = exp_double8(x clamped)
// (x[j] <= 0 or NaN; lanes past m ignored); returns how many Ziv's test sent to std::exp.
inline int rounded8(vec8f x, vec8d y, int64_t m, float* out) {
    const double eps = 1.0 / 281474976710656.0;  // 2^-48
    const vec8f f = __builtin_convertvector(y, vec8f), lo = __builtin_convertvector(y * (1.0 - eps), vec8f),
                hi = __builtin_convertvector(y * (1.0 + eps), vec8f);
    const vec8i ok = (x >= static_cast<float>(EXP_LOWEST)) & (lo == hi);  // -1 where f is std::exp's float
    if (m == 8 && all_set(ok)) {  // the usual case: one store
        std::memcpy(out, &f, sizeof f);
        return 0;
    }
    int fallbacks = 0;
    for (int64_t j = 0; j < m; ++j) {
        if (ok[j]) {
            out[j] = f[j];
        } else if (x[j] < static_cast<float>(EXP_LOWEST)) {
            out[j] = 0.0f;
        } else {  // near a float rounding boundary, or NaN
            out[j] = static_cast<float>(std::exp(static_cast<double>(x[j])));
            ++fallbacks;
        }
    }
    return fallbacks;
}

// out[e] = static_cast<float>(std::exp(static_cast<double>(a[e] - b))) for e < n (a[e] - b <= 0 in float, or NaN),
// the differences taken in float; returns how many Ziv's test sent to std::exp.
inline int exp_to_float(const float* a, float b, int64_t n, float* out) {
    int fallbacks = 0;
    for (int64_t e0 = 0; e0 < n; e0 += 8) {
        const int64_t m = n - e0 < 8 ? n - e0 : 8;
        float xs[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // a tail's missing lanes: exp(0), not stored
        if (m == 8)
            std::memcpy(xs, a + e0, sizeof xs);
        else
            for (int64_t j = 0; j < m; ++j) xs[j] = a[e0 + j];
        vec8f x;
        std::memcpy(&x, xs, sizeof x);
        x -= b;
        for (int64_t j = m; j < 8; ++j) x[j] = 0.0f;
        const vec8d xd = __builtin_convertvector(x, vec8d);
        fallbacks += rounded8(x, exp_double8(xd < EXP_LOWEST ? EXP_LOWEST : xd), m, out + e0);  // NaN: rounded8
    }
    return fallbacks;
}

}  // namespace
