/* watch.h: what a person watching a run looks at beyond the step's loss:
 * each layer's gradient and weight norm (one collective over the ranks that
 * hold the model's parts, each logical parameter counted once, as the global
 * gradient norm counts it), each rank's local gradient norm (with
 * --noise-scale, which measures every micro-step's local gradient before the
 * reduction: the root of the sum over the rank's micro-steps of their
 * squared norms, from the step's one all-gather), the MFU (with
 * --peak-gflops), and the TensorBoard event file (--tensorboard) that rank
 * 0 writes them to with the step's loss, validation loss, learning rate,
 * global batch, gradient norm, tokens/s, exposed communication and noise
 * scale. The metrics JSON (train/metrics.h) carries the same norms.
 *
 * Norms are of the gradient as reduced (before clipping, which the
 * optimizer applies on the fly) and of the weights after the update. Blocks
 * are the model's: 0 the embeddings (wte, wpe), 1..L the layers, L+1 the
 * final LayerNorm. Measured only with --metrics or --tensorboard. */
#ifndef BS_TRAIN_WATCH_H
#define BS_TRAIN_WATCH_H

#include <stdbool.h>

#include "parallel/engine.h"
#include "train/step_result.h"
#include "train/step_stats.h"
#include <jansson.h>

#include "train/tensorboard.h"
#include "train/train_config.h"

typedef struct {
    bool on;            /* every rank: measure the norms (a collective) */
    int blocks;         /* L + 2 */
    double *grad_sq;    /* per block: squared gradient norm; weight_sq follows it in the same array */
    double *weight_sq;  /* per block: squared weight norm */
    double *rank_grad;  /* per world rank: local gradient norm (NaN without --noise-scale) */
    int ranks;
    bool tensorboard;   /* rank 0 with --tensorboard */
    TensorBoard tb;
    double flops_per_token, peak_flops; /* peak: one process's FLOP/s (0: no MFU) */
    bool on_device;                     /* --device cuda|sim: the norms summed there, the step's copies counted */
    uint64_t device_bytes, step_device_bytes; /* device-to-host bytes: since it opened, and in the last step */
} Watch;

/* rank: this world rank of `ranks`; layers: the whole model's. */
void watch_init(Watch *w, const TrainConfig *c, int rank, int ranks, int layers, double flops_per_token);
void watch_free(Watch *w);
/* After the step's update, on every rank (collective when on); stats: the step's exchange. */
void watch_measure(Watch *w, Engine *e, const TrainConfig *c, const StepRecord *records);
/* The model FLOPs utilisation of the step (NaN without --peak-gflops). */
double watch_mfu(const Watch *w, const StepResult *r, int seq_len);
/* Rank 0: the step's scalars into the event file. */
void watch_write_tensorboard(Watch *w, const StepResult *r, long step, double val_loss, int seq_len);
/* The norms into a metrics line ("grad_norm_layers", "weight_norm_layers", "grad_norm_ranks", "mfu";
 * on a device "device_to_host_bytes": what the step copied from the device to the host). */
void watch_metrics(const Watch *w, json_t *record, double mfu);

#endif
