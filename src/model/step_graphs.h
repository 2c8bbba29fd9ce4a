/* step_graphs.h: the device step's work replayed as graphs (--cuda-graphs
 * on; device.h's capture and launch): one graph for a training micro-batch
 * (tokens in, forward, backward, losses and flags out) and one for the AdamW
 * update. The host still runs the loop between them: it reads the losses,
 * the non-finite flags and the norm after backward, the collectives and the
 * guard's veto decide whether and how to update.
 *
 * What a graph reads from the host is fixed at capture, so everything that
 * changes between steps reaches the device through memory the graph reads
 * at each replay: the tokens through pinned staging buffers filled before the
 * launch, and the update's step values (learning rate, clipping scale, bias
 * corrections: AdamWStepScalars) through a device array written by a copy
 * queued just before the launch. A scalar passed by value into a launch is
 * the capture's forever: the micro-batch graph is keyed on its one such value
 * (dloss: a change of the batch size recaptures it).
 *
 * The first call with a key runs the work uncaptured (a warm-up: CUDA loads
 * its kernels lazily, which must not happen inside a capture); the second
 * captures it and every later one replays it. It deliberately holds no model
 * state: the bodies (the model's own launches) are the caller's. */
#ifndef BS_MODEL_STEP_GRAPHS_H
#define BS_MODEL_STEP_GRAPHS_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "optim/adamw.h"

typedef struct StepGraphs StepGraphs;

/* A micro-batch's work queued on the stream given to step_graphs_micro_batch. */
typedef int (*MicroBatchWork)(void *model, const int32_t *inputs, const int32_t *targets, float dloss);
/* The update's launches; scalars (device memory) holds the step's values. */
typedef int (*UpdateWork)(void *model, const AdamWStep *s, const AdamWStepScalars *scalars);

/* Graphs over micro-batches of `tokens` tokens, or NULL with the reason in device_error. */
StepGraphs *step_graphs_create(Device *dev, size_t tokens);
void step_graphs_free(StepGraphs *sg);
/* `to` waits for the work queued on `from` so far (inside a capture: `to` joins it). */
int step_graphs_fork(StepGraphs *sg, DeviceStream *from, DeviceStream *to);
/* A training micro-batch on stream: inputs and targets staged, then the graph (or the warm-up). */
int step_graphs_micro_batch(StepGraphs *sg, DeviceStream *stream, const int32_t *inputs, const int32_t *targets,
                            float dloss, MicroBatchWork work, void *model);
/* The update: s's values copied to the device on stream, then the graph (or the warm-up). */
int step_graphs_adamw(StepGraphs *sg, DeviceStream *stream, const AdamWStep *s, UpdateWork work, void *model);
/* The values an AdamW step's launches use (step_size, bias2_sqrt, grad_scale, decay with s->weight_decay). */
AdamWStepScalars adamw_step_scalars(const AdamWStep *s);

#endif
