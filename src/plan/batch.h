/* batch.h: the global batch over training (constant or a schedule of
 * steps, as Llama 3's 4M -> 8M -> 16M tokens) and the critical batch size
 * that says how large a batch still pays (Kaplan et al. 2020).
 *
 * All batch sizes and positions here are in tokens. */
#ifndef BS_PLAN_BATCH_H
#define BS_PLAN_BATCH_H

#include <stdbool.h>
#include <stddef.h>

#define BATCH_MAX_SEGMENTS 16

typedef struct {
    int n;
    double from[BATCH_MAX_SEGMENTS];  /* tokens trained when the segment starts (from[0] = 0) */
    double batch[BATCH_MAX_SEGMENTS]; /* global batch in tokens */
} PlanBatch;

PlanBatch plan_batch_constant(double batch_tokens);
/* "0:4M,252M:8M,2.87T:16M" (k/M/G/T are powers of 1000): tokens trained at
 * which each batch starts. The first must start at 0, starts must increase.
 * False with a one-line reason. */
bool plan_batch_parse(const char *text, PlanBatch *out, char *why, size_t n);
/* Tokens trained in segment i of a run of `total` tokens (0 if it starts
 * after the end). */
double plan_batch_segment_tokens(const PlanBatch *s, int i, double total);
double plan_batch_final(const PlanBatch *s, double total);

/* Kaplan et al. 2020 (eq. 1.4 and 1.5; L in nats, their BPE tokens):
 * B_crit(L) = B* / L^(1/alpha_B), B* = 2e8 tokens, alpha_B = 0.21;
 * L(N, D) = [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D, N_c = 8.8e13
 * non-embedding parameters, D_c = 5.4e13 tokens, alpha_N = 0.076,
 * alpha_D = 0.095. */
double critical_batch_tokens(double loss_nats);
double kaplan_loss(double non_embedding_params, double tokens);
/* Tokens needed relative to the minimum at batch B (McCandlish et al. 2018:
 * E/E_min = 1 + B/B_crit). */
double data_inefficiency(double batch_tokens, double critical);

#endif
