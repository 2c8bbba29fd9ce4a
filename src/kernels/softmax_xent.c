/* softmax_xent.c: softmax cross-entropy over the vocabulary, fused with its
 * backward (llm.c's fused classifier): the (N,Vp) logits are turned into
 * their gradient in place, so no second (N,Vp) buffer exists. Only the first
 * V columns take part; the padded columns get gradient 0. */
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

double softmax_xent_forward_backward(real *logits, real *losses, const int32_t *targets, size_t N, int V,
                                     int Vp, real dloss) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        real *row = logits + i * Vp;
        int target = targets[i];
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
