/* pipeline.h: executes one training step (or one evaluation) of this rank's
 * pipeline stage as an ordered list of actions (parallel/schedule.h): the
 * forward F, the backward (whole, or split into B for input gradients and
 * W for weight gradients), and the sends and receives between neighbours.
 * The executor hard-codes no schedule: gpipe, 1f1b, interleaved and zbh1
 * are lists the generator emits, validated before the first step.
 *
 * The rank holds one or more model chunks (virtual stages), each run on the
 * CPU model through gpt.h or by its PipeChunkOps (a stage whose state lives
 * on a device: parallel/pipeline_device.h). An activation
 * set per (chunk, micro-batch) is taken at its forward and given back when
 * its gradients are done (and its sends have left); sets are made on first
 * need and kept (one allocation per shape). Messages are MPI
 * point-to-point: sends non-blocking, a receive waited where it stands in
 * the list (that wait is the rank's idle time). Gradients reach the
 * data-parallel layer through its BlockAccess; a chunk's last
 * gradient-producing action of the step is the one that launches its
 * reduction. With one stage and one chunk this is plain gradient
 * accumulation. Measured per step: busy and idle time, seconds per action
 * kind, and the most activation sets alive at once. */
#ifndef BS_PARALLEL_PIPELINE_H
#define BS_PARALLEL_PIPELINE_H

#include <stdint.h>

#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/schedule.h"

/* Fills micro-batch i's tokens (B*T inputs and targets). */
typedef void (*PipeLoad)(void *ctx, int micro, int32_t *inputs, int32_t *targets);

#define PIPE_MAX_CHUNKS 8 /* message tags carry the chunk in 3 bits */
enum { PIPE_FORWARD, PIPE_BACKWARD, PIPE_BACKWARD_INPUT, PIPE_BACKWARD_WEIGHT, PIPE_COMPUTE_KINDS };

typedef struct {
    double loss_sum;       /* over this rank's loss-computing chunk's tokens (last virtual stage only) */
    double busy, idle;     /* seconds computing / waiting for a neighbour */
    int max_live;          /* activation sets alive at once */
    double seconds[PIPE_MAX_CHUNKS][PIPE_COMPUTE_KINDS]; /* per chunk and compute kind */
    int count[PIPE_MAX_CHUNKS][PIPE_COMPUTE_KINDS];
} PipeStats;

/* What an action does to a chunk whose state lives elsewhere than the CPU
 * model (a device: parallel/pipeline_device.c), on the activation set the
 * executor holds for the action's micro-batch (index `set` among the chunk's
 * sets, reused as the CPU's). forward returns the loss sum (dloss 0:
 * evaluation); backward is the fused one, backward_split B (weight false)
 * or W of a split one (NULL: the chunk has none, zbh1 cannot run it); transfer moves the
 * set's input, output or gradient for a send or receive action (kind) with
 * group rank peer under tag, a receive complete for the chunk's next compute. */
typedef struct {
    double (*forward)(void *ctx, int set, const int32_t *inputs, const int32_t *targets, float dloss);
    void (*backward)(void *ctx, int set);
    void (*backward_split)(void *ctx, int set, bool weight);
    void (*transfer)(void *ctx, int set, ActionKind kind, int peer, int tag);
    void *ctx;
} PipeChunkOps;

/* A model chunk as the pipeline sees it: the CPU model (model->cfg is read
 * either way) and its data-parallel layer, or ops doing the actions. */
typedef struct {
    GPT *model;
    DataParallel *dp;
    const PipeChunkOps *ops; /* NULL: the CPU model through gpt.h and dp */
} PipeChunk;

/* Called around a chunk's last gradient-producing action of a step: before
 * (e.g. to hand the model the tied weights' gradient from the last stage)
 * and after it (e.g. to send the head's share of it). Either may be NULL. */
typedef struct {
    void (*before_last_grads)(void *ctx, int chunk);
    void (*after_last_grads)(void *ctx, int chunk);
    void *ctx;
} PipeHooks;

typedef struct Pipeline Pipeline;
typedef struct Trace Trace;

/* stage / stages: this rank's pipeline index and the pipeline's size;
 * chunks[c] is virtual stage c * stages + stage. */
Pipeline *pipeline_create(Comm *pp_group, int stage, int stages, const PipeChunk *chunks, int num_chunks,
                          PipeSchedule schedule, int B, int T);
void pipeline_free(Pipeline *p);
/* Record forward, backward and waits as trace intervals (NULL: off). */
/* Bytes of the activation sets made so far (each set's forward activations
 * and split stash, one backward scratch per chunk). */
size_t pipeline_activation_bytes(const Pipeline *p);
void pipeline_set_trace(Pipeline *p, Trace *trace);

/* One step's forward and backward over m micro-batches (dies with the
 * validator's line if the schedule cannot run m). */
PipeStats pipeline_train(Pipeline *p, int m, float dloss, PipeLoad load, void *ctx, const PipeHooks *hooks);
/* The step's idle share on the stage that idles most, in theory: every
 * stage's action list replayed with the seconds per action given
 * (means[stage][chunk][PIPE_COMPUTE_KINDS], e.g. as each rank measured them in
 * the last step), a wait counted as this executor counts it (time blocked
 * inside the list). -1 before the first step. */
double pipeline_simulated_bubble(const Pipeline *p, const double *means);
/* Forward only (validation) of m micro-batches, of which the first `counted`
 * count: their loss sum (last virtual stage; 0 elsewhere). */
double pipeline_eval(Pipeline *p, int m, int counted, PipeLoad load, void *ctx);

#endif
