/* pipeline_device.h: pipeline parallelism on device buffers (--pp with
 * --device cuda|sim): this rank's stage is a device model of its layers
 * (model/gpt_device.h: the embeddings on the first stage, the head on the
 * last), run by the CPU's executor (parallel/pipeline.h) through
 * PipeChunkOps, so gpipe, 1f1b and zbh1 run their CPU action lists unchanged
 * (zbh1 through the model's split backward: B, then W from the output
 * gradients B kept in the activation set's stash).
 * Activations and their gradients move over the pipeline group's device
 * collectives (comm/device_comm.h, the host path: the executor's separate
 * sends and receives would block each other on one NCCL stream), each
 * receive waited for by the compute stream through the group's event. The
 * tied output weights are shared as on the CPU (model_parallel.h): the last
 * stage reads a device copy of the first stage's wte, refreshed after each
 * update, and its gradient is added to the first stage's before the
 * data-parallel reduction; in bf16 the copy's bf16 bits are rounded again
 * each time it changes, as the model's own copies after AdamW. FP8: each
 * stage's linear layers are its own sites, as gpt.c's. Not yet:
 * interleaved virtual stages (one device model per rank): refused with a
 * reason. */
#ifndef BS_PARALLEL_PIPELINE_DEVICE_H
#define BS_PARALLEL_PIPELINE_DEVICE_H

#include "device/device.h"
#include "model/gpt_device.h"
#include "parallel/engine.h"

typedef struct PipelineDevice PipelineDevice;

/* Tests of what sim catches: the compute stream does not wait for a received activation or gradient. */
enum { PIPELINE_DEVICE_SKIP_RECV_WAIT = 1 };

/* Why this layout's pipeline cannot run on a device (NULL: it can). */
const char *pipeline_device_refusal(const EngineConfig *cfg, const Grid *g);
/* The stage over model (made from chunk's config; collective over the
 * pipeline group), or NULL with the reason. debug: the flags above. */
PipelineDevice *pipeline_device_create(Device *dev, GPTDevice *model, const EngineConfig *cfg, const EngineChunk *chunk,
                                       const Grid *g, int debug, char *reason, size_t reason_size);
void pipeline_device_free(PipelineDevice *pd);
/* The step's schedule over m micro-batches (the gradients zeroed by the
 * caller), then the tied weights' gradient added to the first stage's:
 * this rank's loss sum (the last stage's tokens; 0 elsewhere). */
double pipeline_device_train(PipelineDevice *pd, int m, float dloss, PipeLoad load, void *ctx);
/* Forward only of m micro-batches, of which the first `counted` count. */
double pipeline_device_eval(PipelineDevice *pd, int m, int counted, PipeLoad load, void *ctx);
/* The executor and its last train's measurements (busy, idle, sets alive, seconds per action). */
const Pipeline *pipeline_device_pipeline(const PipelineDevice *pd, PipeStats *last);
/* The first layer whose output was not finite in the last train's forwards (-1: none). */
int pipeline_device_nonfinite_layer(const PipelineDevice *pd);
/* The last stage's copy of the tied weights from the host's (host->head_wte, current after mp_share_output_weights). */
void pipeline_device_upload_head(PipelineDevice *pd, const GPT *host);
/* After an update: the first stage's wte to the last stage's copy, on the devices (collective over the group). */
void pipeline_device_share_weights(PipelineDevice *pd);
/* x summed over the pipeline group (each stage's tensors counted once). */
void pipeline_device_sum(PipelineDevice *pd, double *x, int n);

#endif
