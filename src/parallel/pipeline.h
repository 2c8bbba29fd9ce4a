/* pipeline.h: pipeline-parallel execution of one training step (or one
 * evaluation) on this rank's stage, over m micro-batches.
 *
 * Schedules: GPipe (all forwards, then all backwards: m micro-batches of
 * activations alive at once) and 1F1B (PipeDream-Flush: after P - s - 1
 * warm-up forwards, stage s alternates one forward and one backward, so at
 * most P - s are alive). Activations go forward and their gradients backward
 * by MPI point-to-point, non-blocking: a send overlaps the next compute. With
 * one stage this is plain gradient accumulation. Gradients reach the
 * data-parallel layer through its BlockAccess; the last micro-batch's
 * backward is the one that launches the reduction. Measured per step: busy
 * (compute) and idle (waiting for a neighbour) time, and the most activation
 * sets alive at once. */
#ifndef BS_PARALLEL_PIPELINE_H
#define BS_PARALLEL_PIPELINE_H

#include <stdint.h>

#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"

typedef enum { PIPE_GPIPE, PIPE_1F1B } PipeSchedule;

/* Fills micro-batch i's tokens (B*T inputs and targets). */
typedef void (*PipeLoad)(void *ctx, int micro, int32_t *inputs, int32_t *targets);

typedef struct {
    double loss_sum;      /* over this stage's tokens (last stage only) */
    double busy, idle;    /* seconds computing / waiting for a neighbour */
    int max_live;         /* activation sets alive at once */
} PipeStats;

typedef struct Pipeline Pipeline;

Pipeline *pipeline_create(Grid *grid, GPT *model, DataParallel *dp, PipeSchedule schedule, int B, int T);
void pipeline_free(Pipeline *p);
/* Record forward, backward and waits as trace intervals (NULL: off). */
typedef struct Trace Trace;
void pipeline_set_trace(Pipeline *p, Trace *trace);
bool pipeline_parse_schedule(const char *name, PipeSchedule *out);
typedef struct {
    void (*before_last_backward)(void *ctx); /* may be NULL */
    void (*after_last_backward)(void *ctx);  /* before waiting for the step's sends; may be NULL */
    void *ctx;
} PipeHooks;

/* One step's forward and backward over m micro-batches. */
PipeStats pipeline_train(Pipeline *p, int m, float dloss, PipeLoad load, void *ctx, const PipeHooks *hooks);
/* Forward only (validation) of m micro-batches, of which the first `counted`
 * count: their loss sum (last stage; 0 elsewhere). */
double pipeline_eval(Pipeline *p, int m, int counted, PipeLoad load, void *ctx);

#endif
