/* outer_optimizer.h: the outer step of low-communication training (DiLoCo,
 * FedAvg): the global weights move along the workers' averaged
 * pseudo-gradient delta = global - mean(local weights after H inner steps).
 *   nesterov  (DiLoCo, Douillard et al. 2023) PyTorch's SGD with Nesterov
 *             momentum and no dampening: v = mu v + delta,
 *             global -= lr (delta + mu v)
 *   sgd       heavy ball: v = mu v + delta, global -= lr v
 *   avg       FedAvg (McMahan et al. 2017): global -= delta, i.e. the mean of
 *             the workers' weights (lr 1, no momentum)
 * Elementwise in float, in index order: bitwise the same on every rank. */
#ifndef BS_OPTIM_OUTER_OPTIMIZER_H
#define BS_OPTIM_OUTER_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { OUTER_NESTEROV, OUTER_SGD, OUTER_AVG } OuterKind;

typedef struct {
    OuterKind kind;
    float lr, momentum;
} OuterConfig;

/* global (n) takes one outer step with the averaged delta (n); velocity (n)
 * is the momentum buffer (unused by avg). */
void outer_step(const OuterConfig *cfg, float *global, float *velocity, const float *delta, size_t n);

#endif
