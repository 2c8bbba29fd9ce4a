/* noise_scale.h: the gradient noise scale B_simple = tr(Sigma) / |G|^2 and
 * with it the critical batch size, estimated during training from gradient
 * norms the step computes anyway (McCandlish et al. 2018, "An Empirical
 * Model of Large-Batch Training", appendix A.1).
 *
 * From |G_small|^2 measured at batch B_small and |G_big|^2 at B_big > B_small
 * (norms of MEAN-loss gradients, before clipping), each step gives the
 * unbiased estimates
 *     |G|^2     = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
 *     tr(Sigma) = (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
 * Each is kept as an exponential moving average (Adam-style bias correction
 * for the values reported alone), and B_simple = EMA(tr Sigma) / EMA(|G|^2):
 * the ratio of raw per-step estimates would be biased and very noisy.
 *
 * Which small batch: one micro-batch (B_small = micro_batch sequences), and
 * |G_small|^2 is the MEAN over all micro-batches of the global batch (every
 * accumulation micro-step of every data-parallel rank) of their squared
 * gradient norms; B_big is the global batch and |G_big|^2 the norm of the
 * reduced gradient. Each micro-batch norm is an unbiased estimate of
 * |G|^2 + tr(Sigma)/B_small, so their mean is too, with less variance; and
 * the mean over the same micro-batches does not depend on how they are laid
 * out (1 rank x accumulation 4 and 4 ranks x accumulation 1 give the same
 * estimate). With that choice the tr(Sigma) estimate is exactly the sample
 * variance of the micro-batch gradients, times B_small. It needs at least two
 * micro-batches per step (B_big > B_small).
 *
 * The state is four doubles, saved in checkpoints as they are. Deliberately
 * not here: how the trainer measures the norms, and any policy that acts on
 * the estimate. */
#ifndef BS_OPTIM_NOISE_SCALE_H
#define BS_OPTIM_NOISE_SCALE_H

#include <stdbool.h>

typedef struct {
    double ema_decay;   /* weight of the past in each EMA, in [0, 1); e.g. 0.99 */
    double grad_sq_ema; /* EMA of the |G|^2 estimates (not bias-corrected) */
    double trace_ema;   /* EMA of the tr(Sigma) estimates (not bias-corrected) */
    double ema_weight;  /* 1 - ema_decay^updates: the EMAs' bias correction */
} NoiseScale;

void noise_scale_init(NoiseScale *ns, double ema_decay);

/* One step's unbiased estimates; false (outputs untouched) unless
 * 0 < b_small < b_big and both norms are finite. */
bool noise_scale_estimates(double small_sq, double b_small, double big_sq, double b_big, double *grad_sq,
                           double *trace);

/* Adds one step's measurement to the EMAs; false (nothing changes) when
 * noise_scale_estimates has none. */
bool noise_scale_update(NoiseScale *ns, double small_sq, double b_small, double big_sq, double b_big);

/* B_simple in sequences (multiply by the sequence length for tokens); NaN
 * before the first update or while the |G|^2 average is not positive (the
 * gradient signal is not yet resolved from the noise). */
double noise_scale_simple(const NoiseScale *ns);
/* The bias-corrected averages of |G|^2 and tr(Sigma), for logging; NaN before the first update. */
double noise_scale_grad_sq(const NoiseScale *ns);
double noise_scale_trace(const NoiseScale *ns);

#endif
