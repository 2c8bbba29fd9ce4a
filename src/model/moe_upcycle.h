/* moe_upcycle.h: sparse upcycling (Komatsuzaki et al. 2022, "Sparse
 * Upcycling"): an MoE model started from a dense one of the same shape.
 *
 * Every tensor outside the MoE layers' MLPs is the dense model's; in an MoE
 * layer each expert is a copy of the dense layer's MLP (fc, fc bias, fcproj,
 * fcproj bias) plus a seeded perturbation, element by element
 *   w_e = w + noise x rms(w) x N(0, 1)
 * with rms(w) the root mean square of that dense tensor in that layer (so a
 * zero bias stays zero; noise is relative: 0.01 moves a weight by about 1%
 * of its tensor's scale), drawn from one stream seeded by `seed` in the
 * order layer, expert, tensor, element (every rank draws the same). The
 * router keeps the MoE model's own fresh (seeded) initial values and the
 * selection bias is zero. With noise 0 and top-k weights renormalised to
 * sum 1, the MoE layer's output is the dense MLP's (up to rounding). */
#ifndef BS_MODEL_MOE_UPCYCLE_H
#define BS_MODEL_MOE_UPCYCLE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/gpt.h"

/* dense: a whole dense model; moe: a whole MoE model of the same shape, its
 * parameters already initialised (the router's values are kept). False with a
 * one-line reason if the shapes differ (each expert's hidden width must be the
 * dense MLP's 4 C). */
bool moe_upcycle(const GPT *dense, GPT *moe, uint64_t seed, double noise, char *why, size_t why_size);

#endif
