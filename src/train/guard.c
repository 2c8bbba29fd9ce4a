/* guard.c: the step guard (see guard.h). */
#include "train/guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/reason.h"

void guard_init(Guard *g, double spike_sigmas, int window, int max_skips) {
    *g = (Guard){.spike_sigmas = spike_sigmas, .window = window, .max_skips = max_skips};
    g->losses = bs_calloc((size_t)(window > 0 ? window : 1), sizeof(double));
}

void guard_free(Guard *g) {
    free(g->losses);
    g->losses = NULL;
}

void guard_nonfinite_keys(int rank, int world, int num_layers, int layer, int block, double key[2]) {
    key[0] = layer >= 0 ? (double)(num_layers + 1 - layer) * world + (world - rank) : 0;
    key[1] = block >= 0 ? (double)(block + 1) * world + (world - rank) : 0;
}

bool guard_nonfinite_reason(const double key[2], int world, int num_layers, char *reason, size_t size) {
    const int L = num_layers, k = key[0] > 0 ? 0 : 1;
    if (key[k] <= 0) return false;
    const long a = ((long)key[k] - 1) / world;
    const int rank = world - (int)((long)key[k] - a * world);
    const int at = k == 0 ? L + 1 - (int)a : (int)a - 1; /* a layer (forward) or a block (backward) */
    if (k == 0 || (at >= 1 && at <= L))
        snprintf(reason, size, "non-finite value on rank %d at layer %d", rank, k == 0 ? at : at - 1);
    else
        snprintf(reason, size, "non-finite value on rank %d in the %s", rank, at == 0 ? "embeddings" : "final layer norm");
    return true;
}

/* The loss against the window's mean and sample standard deviation, once it holds 10 losses. */
static bool is_spike(const Guard *g, double loss, char *reason, size_t size) {
    if (g->spike_sigmas <= 0 || g->count < 10) return false;
    double mean = 0, var = 0;
    int n = g->count;
    for (int i = 0; i < n; i++) mean += g->losses[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (g->losses[i] - mean) * (g->losses[i] - mean);
    double sd = sqrt(var / (n - 1));
    double z = sd > 0 ? (loss - mean) / sd : 0;
    if (z <= g->spike_sigmas) return false;
    snprintf(reason, size, "loss spike: %.4f is %.1f standard deviations above the last %d steps' mean %.4f", loss, z,
             n, mean);
    return true;
}

bool guard_skip(const Guard *g, double loss, double grad_sq, char *reason, size_t size) {
    if (!isfinite(loss) || !isfinite(grad_sq)) {
        snprintf(reason, size, "non-finite loss or gradient");
        return true;
    }
    return is_spike(g, loss, reason, size);
}

void guard_accept(Guard *g, double loss) {
    g->consecutive = 0;
    if (g->window <= 0) return;
    g->losses[g->next] = loss;
    g->next = (g->next + 1) % g->window;
    if (g->count < g->window) g->count++;
}

void guard_reject(Guard *g) {
    g->skips++;
    g->consecutive++;
}

void guard_stop_if_stuck(const Guard *g, long step, const char *reason) {
    if (g->consecutive < g->max_skips) return;
    bs_die_about("lr max_skips", "%d steps in a row skipped (last, step %ld: %s); stopping: lower the learning rate, "
                 "check the data, or allow more skips", g->consecutive, step, reason);
}
