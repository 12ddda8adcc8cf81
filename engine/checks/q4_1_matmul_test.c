/*
 * Proves that ggml's CPU mul_mat of Q4_1 weights by F32 activations (which patch 0001 sends to the batched
 * tinyBLAS_Q4_1 kernel in llamafile_sgemm) gives byte for byte what ggml_vec_dot_q4_1_q8_1 gives for every
 * output element, over 2,592 shapes: k (row length) 32-1536, m (weight rows) 1-192, n (tokens) 1-64, 1 and
 * 2 threads. Prints "2592 shapes, 0 mismatching elements" and exits 0, or lists the first mismatches and
 * exits 1.
 *
 * Build and run against a patched, cmake-built vendor/llama.cpp (engine/README.md, "Changing a patch");
 * CIRRUS is this repository's root. Takes a few seconds to compile and under a second to run.
 *
 *   cd <sdist>/vendor/llama.cpp
 *   gcc -O2 -std=gnu11 -I ggml/include "$CIRRUS/engine/checks/q4_1_matmul_test.c" \
 *       -L build/bin -lggml-cpu -lggml-base -lm -Wl,-rpath,"$PWD/build/bin" -o /tmp/q4_1_matmul_test
 *   /tmp/q4_1_matmul_test
 *
 * Which kernel runs is decided when the library is built (-DGGML_NATIVE=ON: AVX-512 here; -DGGML_NATIVE=OFF:
 * the AVX2 variant), not when this test is. Adding -DQ4_1_TEST_FLIP_ONE_BIT to the gcc line flips the lowest
 * bit of one reference value, to see the test report exactly one mismatching element.
 */

#include "ggml-cpu.h"
#include "ggml.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int KS[] = {32, 64, 576, 1536};
static const int MS[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 31, 64, 192};
static const int NS[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 33, 64};
#define COUNT(a) (sizeof(a) / sizeof *(a))
#define SHOWN 10

// A fixed linear congruential sequence in [-1, 1), so that every run tests the same values.
static float next_value(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return ((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

struct shape { int k, m, n, threads; };

// Compares the graph's result c (n columns of m floats) against vec_dot on each row of a and the column of b
// quantized to Q8_1; returns the number of elements whose bytes differ.
static long count_mismatches(struct shape s, const struct ggml_tensor *a, const float *b, const float *c) {
    const struct ggml_type_traits_cpu *q4_1 = ggml_get_type_traits_cpu(GGML_TYPE_Q4_1);
    const struct ggml_type_traits_cpu *q8_1 = ggml_get_type_traits_cpu(q4_1->vec_dot_type);
    const size_t column_size = ggml_row_size(q4_1->vec_dot_type, s.k);
    char *columns = malloc(column_size * s.n);
    for (int j = 0; j < s.n; ++j) q8_1->from_float(b + (size_t)j * s.k, columns + j * column_size, s.k);
    long bad = 0;
    for (int j = 0; j < s.n; ++j) {
        for (int i = 0; i < s.m; ++i) {
            float want;
            const char *row = (const char *)a->data + i * a->nb[1];
            q4_1->vec_dot(s.k, &want, 0, row, 0, columns + j * column_size, 0, 1);
#ifdef Q4_1_TEST_FLIP_ONE_BIT
            if (s.k == KS[0] && s.m == MS[0] && s.n == NS[0] && s.threads == 1) {
                unsigned bits;
                memcpy(&bits, &want, 4);
                bits ^= 1u;
                memcpy(&want, &bits, 4);
            }
#endif
            const float got = c[(size_t)j * s.m + i];
            if (memcmp(&want, &got, 4) != 0) {
                if (bad < SHOWN) {
                    printf("MISMATCH k=%d m=%d n=%d threads=%d (%d,%d): vec_dot %.9g, mul_mat %.9g\n", s.k,
                           s.m, s.n, s.threads, i, j, want, got);
                }
                ++bad;
            }
        }
    }
    free(columns);
    return bad;
}

// Quantizes pseudo-random weights to Q4_1, multiplies them by pseudo-random activations with ggml's graph
// (the code path llama.cpp takes) and checks every output element.
static long test_shape(struct shape s, unsigned *seed) {
    struct ggml_init_params params = {64u << 20, NULL, false};
    struct ggml_context *ctx = ggml_init(params);
    struct ggml_tensor *a = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_1, s.k, s.m);
    struct ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, s.k, s.n);
    float *weights = malloc(sizeof(float) * s.k * s.m);
    for (int i = 0; i < s.k * s.m; ++i) weights[i] = next_value(seed) * (1 + (i % 7)) + 0.3f * (i % 3);
    ggml_quantize_chunk(GGML_TYPE_Q4_1, weights, a->data, 0, s.m, s.k, NULL);
    float *activations = (float *)b->data;
    for (int i = 0; i < s.k * s.n; ++i) activations[i] = next_value(seed) * (1 + (i % 5));
    struct ggml_tensor *c = ggml_mul_mat(ctx, a, b);
    struct ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, c);
    ggml_graph_compute_with_ctx(ctx, graph, s.threads);
    const long bad = count_mismatches(s, a, activations, (const float *)c->data);
    free(weights);
    ggml_free(ctx);
    return bad;
}

int main(void) {
    ggml_cpu_init();
    unsigned seed = 42;
    long shapes = 0, bad = 0;
    for (size_t ik = 0; ik < COUNT(KS); ++ik)
        for (size_t im = 0; im < COUNT(MS); ++im)
            for (size_t in = 0; in < COUNT(NS); ++in)
                for (int threads = 1; threads <= 2; ++threads) {
                    struct shape s = {KS[ik], MS[im], NS[in], threads};
                    bad += test_shape(s, &seed);
                    ++shapes;
                }
    printf("%ld shapes, %ld mismatching elements\n", shapes, bad);
    return bad != 0;
}
