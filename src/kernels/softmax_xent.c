/* softmax_xent.c: softmax cross-entropy over the vocabulary, fused with its
 * backward (llm.c's fused classifier): the (N,Vp) logits are turned into
 * their gradient in place, so no second (N,Vp) buffer exists. Only the first
 * V columns take part; the padded columns get gradient 0. The same in three
 * phases for a vocabulary split over tensor-parallel ranks, whose caller
 * combines the per-row statistics between phases. A negative target is a
 * token the loss does not count (a loss mask): loss 0 and gradient 0. */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vecmath.h"

double softmax_xent_forward_backward(real *logits, real *losses, const int32_t *targets, size_t N, int V,
                                     int Vp, real dloss) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        real *row = logits + i * Vp;
        int target = targets[i];
        if (target < 0) { /* not counted (a loss mask): no loss, no gradient */
            losses[i] = 0;
            if (dloss != 0) memset(row, 0, sizeof(real) * (size_t)Vp);
            continue;
        }
        real m = row[0];
#pragma omp simd reduction(max : m)
        for (int j = 1; j < V; j++) m = row[j] > m ? row[j] : m;
        real target_logit = row[target];
        real sum = 0;
        if (dloss != 0) {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; j++) {
                row[j] = real_exp(row[j] - m);
                sum += row[j];
            }
            real s = dloss / sum;
#pragma omp simd
            for (int j = 0; j < V; j++) row[j] *= s;
            row[target] -= dloss;
            for (int j = V; j < Vp; j++) row[j] = 0;
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; j++) sum += real_exp(row[j] - m);
        }
        losses[i] = real_log(sum) - (target_logit - m);
    }
    double total = 0;
    for (size_t i = 0; i < N; i++) total += losses[i];
    return total;
}

void xent_shard_max(const real *logits, double *row_max, size_t N, int V_valid, int Vl) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        const real *row = logits + i * Vl;
        real m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int j = 0; j < V_valid; j++) m = row[j] > m ? row[j] : m;
        row_max[i] = m;
    }
}

void xent_shard_exp(real *logits, const double *row_max, double *row_sum, double *target_logit,
                    const int32_t *targets, int v_begin, size_t N, int V_valid, int Vl) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        real *row = logits + i * Vl;
        const real m = (real)row_max[i];
        int local_target = targets[i] - v_begin;
        target_logit[i] = local_target >= 0 && local_target < V_valid ? (double)(row[local_target] - m) : 0.0;
        real sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V_valid; j++) {
            row[j] = real_exp(row[j] - m);
            sum += row[j];
        }
        row_sum[i] = sum;
    }
}

double xent_shard_finish(real *logits, real *losses, const double *row_sum, const double *target_logit,
                         const int32_t *targets, int v_begin, size_t N, int V_valid, int Vl, real dloss) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        real *row = logits + i * Vl;
        if (targets[i] < 0) { /* not counted */
            losses[i] = 0;
            if (dloss != 0) memset(row, 0, sizeof(real) * (size_t)Vl);
            continue;
        }
        losses[i] = (real)(log(row_sum[i]) - target_logit[i]);
        if (dloss == 0) continue;
        real s = dloss / (real)row_sum[i];
#pragma omp simd
        for (int j = 0; j < V_valid; j++) row[j] *= s;
        int local_target = targets[i] - v_begin;
        if (local_target >= 0 && local_target < V_valid) row[local_target] -= dloss;
        for (int j = V_valid; j < Vl; j++) row[j] = 0;
    }
    double total = 0;
    for (size_t i = 0; i < N; i++) total += losses[i];
    return total;
}
