/* fp8_scaling.h: the FP8 training recipes' scales for the model's linear
 * layers (--precision fp8 --fp8-recipe delayed|block), and the layer call
 * that uses them (kernels/matmul_fp8.h, the seam).
 *
 * Sites: the four linear layers of each local transformer layer (qkv,
 * attproj, fc, fcproj: site = 4 x local layer + linear), each with three
 * tensors: its input X, its weight W and its output gradient dY. The
 * embedding lookup, the output head (logits), the loss, LayerNorm,
 * attention and GELU never run in FP8 (the first and last layers stay in
 * the higher precision, bf16 or fp32: --fp8-high-precision).
 *
 * delayed (Transformer Engine's DelayedScaling, format HYBRID): X and W in
 * E4M3, dY in E5M2, one scale per tensor, taken from an amax history of
 * --fp8-amax-history steps. During a step each tensor's amax is recorded
 * (the max over the step's micro-batches); fp8_scaling_update, after the
 * optimizer step, reduces it (max) over the tensor-parallel group (the
 * tensors of a split layer are split over it) and over the data-parallel
 * group (one process sees every micro-batch of the global batch: so the
 * scales of a layout equal one process's), then does what TE's
 * amax_and_scale_update does, per tensor:
 *     history[0] = amax of this step
 *     amax = max(history) (max) or history[0] (most_recent)
 *     history = roll(history, -1); history[0] = 0
 *     sf = (fmax / amax) / 2^margin;  sf = scale where amax <= 0 or amax
 *     not finite;  sf = FLT_MAX where sf is inf;  scale = sf
 * so the scale used at step t comes from amaxes of steps before t, and
 * every scale starts at 1. Unlike TE (which updates at the end of each
 * fp8_autocast, i.e. per micro-batch forward), the update here is once per
 * optimizer step, so that the accumulation split does not change the
 * scales. A step the trainer skips records nothing.
 *
 * block (DeepSeek-V3): E4M3 everywhere, power-of-two scales from each
 * block's own amax: 1x128 blocks for activations and gradients, 128x128 for
 * weights (the seam picks the blocks per product); no state.
 *
 * Statistics per tensor kind (X, W, dY) of the step being recorded: values,
 * underflows (non-zero values flushed to zero) and overflows (saturated),
 * for the metrics. */
#ifndef BS_MODEL_FP8_SCALING_H
#define BS_MODEL_FP8_SCALING_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "kernels/matmul_fp8.h"

typedef enum { FP8_RECIPE_DELAYED, FP8_RECIPE_BLOCK } Fp8Recipe;
typedef enum { FP8_AMAX_MAX, FP8_AMAX_MOST_RECENT } Fp8AmaxAlgo;

typedef struct {
    Fp8Recipe recipe;
    int history; /* --fp8-amax-history: steps of amax kept (>= 1) */
    Fp8AmaxAlgo amax_algo;
    int margin; /* --fp8-margin: scales divided by 2^margin */
} Fp8Options;

enum { FP8_INPUT, FP8_WEIGHT, FP8_GRAD, FP8_KINDS };
enum { FP8_LINEARS_PER_LAYER = 4 };

typedef struct Fp8State Fp8State;

Fp8State *fp8_scaling_create(const Fp8Options *o, int sites);
void fp8_scaling_free(Fp8State *s);
const Fp8Options *fp8_scaling_options(const Fp8State *s);
int fp8_scaling_sites(const Fp8State *s);

/* Starts recording a training step (clears its amaxes and counts); passes
 * that are not training (evaluation) run with recording off. */
void fp8_scaling_begin_step(Fp8State *s);
void fp8_scaling_set_recording(Fp8State *s, bool recording);
bool fp8_scaling_recording(const Fp8State *s);

/* --fp8-param-gather: the weights arrive as the values of their E4M3 codes
 * (parallel/fp8_gather.h), made with fp8_scaling_operand's scale and
 * counted there (amax and counts of each rank's shard, so the reduction
 * over dp gives the whole tensor's amax); the forward then quantizes them
 * to the same codes again and counts nothing for W. */
void fp8_scaling_set_weights_gathered(Fp8State *s, bool gathered);

/* How tensor `kind` of `site` is quantized now; its stats point at the
 * step's record when recording, else NULL. */
Fp8Operand fp8_scaling_operand(Fp8State *s, int site, int kind);

/* The linear layer of a site in FP8 (the seam), with its current scales. */
void fp8_scaling_forward(Fp8State *s, int site, float *out, const float *inp, const float *weight, const float *bias,
                         size_t N, int IC, int OC);
void fp8_scaling_backward(Fp8State *s, int site, float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, size_t N, int IC, int OC);

/* After the optimizer step: the amaxes reduced over tp, then dp (either
 * NULL: none), and the delayed scales updated (see above). */
void fp8_scaling_update(Fp8State *s, Comm *tp, Comm *dp);

/* The recorded step's statistics of one tensor kind, summed over sites. */
Fp8Stats fp8_scaling_kind_stats(const Fp8State *s, int kind);

/* Checkpoint state per site: for each kind its scale, then its history. */
size_t fp8_scaling_site_floats(const Fp8State *s);
void fp8_scaling_save_site(const Fp8State *s, int site, float *out);
void fp8_scaling_load_site(Fp8State *s, int site, const float *in);

#endif
