/* pipeline_device.h: pipeline parallelism on device buffers (--pp with
 * --device cuda|sim): each of this rank's chunks is a device model of its
 * layers (model/gpt_device.h: the embeddings on virtual stage 0, the head on
 * the last), run by the CPU's executor (parallel/pipeline.h) through
 * PipeChunkOps, so gpipe, 1f1b, interleaved and zbh1 run their CPU action
 * lists unchanged (zbh1 through the model's split backward: B, then W from
 * the output gradients B kept in the activation set's stash). With
 * interleaved virtual stages the rank holds v chunks, chunk c virtual stage
 * c x stages + stage, each its own device model over its own flat buffers,
 * as the CPU's chunks are (the engine's EngineChunk each); an action runs on
 * its chunk's model and moves through that chunk's collectives.
 * Activations and their gradients move over the pipeline group's device
 * collectives (one DeviceComm per chunk, on its model's compute stream) (comm/device_comm.h, the host path: the executor's separate
 * sends and receives would block each other on one NCCL stream), each
 * receive waited for by the compute stream through the group's event. The
 * tied output weights are shared as on the CPU (model_parallel.h): the last
 * stage reads a device copy of the first stage's wte, refreshed after each
 * update, and its gradient is added to the first stage's after its last
 * backward (with data parallelism summed over the group apart: the
 * buckets were reduced during backward); in bf16 the copy's bf16 bits are
 * rounded again each time it changes, as the model's own copies after
 * AdamW. FP8: each stage's linear layers are its own sites, as gpt.c's. A
 * stage's layers may be tensor-parallel shards (each tensor rank exchanges
 * its copy of the residual stream with the same tensor rank of the next
 * stage, and the last stage gathers the head's whole vocabulary from its
 * ranks' rows of the tied weights, model/gpt_device_tp.h) or take
 * context-parallel rows (the transfers carry this rank's rows). Interleaved
 * virtual stages: one device model per chunk, each with its own pipeline
 * collectives. Not yet, refused with a reason: interleaved stages in FP8 or
 * with tensor or context parallelism; stages of TP shards or CP rows in
 * bf16 or FP8. */
#ifndef BS_PARALLEL_PIPELINE_DEVICE_H
#define BS_PARALLEL_PIPELINE_DEVICE_H

#include "device/device.h"
#include "model/gpt_device.h"
#include "parallel/device_buckets.h"
#include "parallel/device_gather.h"
#include "parallel/engine.h"

typedef struct PipelineDevice PipelineDevice;

/* Tests of what sim catches: the compute stream does not wait for a received activation or gradient. */
enum { PIPELINE_DEVICE_SKIP_RECV_WAIT = 1 };

/* Why this layout's pipeline cannot run on a device (NULL: it can). */
const char *pipeline_device_refusal(const EngineConfig *cfg, const Grid *g);
/* The stage over this rank's num_chunks chunk models (models[c] made from
 * chunks[c]'s config; collective over the pipeline group), or NULL with the
 * reason. debug: the flags above. */
PipelineDevice *pipeline_device_create(Device *dev, GPTDevice *const *models, int num_chunks, const EngineConfig *cfg,
                                       const EngineChunk *chunks, const Grid *g, int debug, char *reason, size_t reason_size);
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
/* Data parallelism over each stage's group: the buckets are begun and ended
 * around every micro-batch's gradient pass (backward, or zbh1's W) and take
 * the tied weights' gradient (device_buckets_add_reduced); ZeRO 3's gathers
 * around every forward and backward pass (device_gather_begin_stage_pass),
 * and the tied weights gathered whole before they are shared. NULL: none. */
void pipeline_device_set_data_parallel(PipelineDevice *pd, DeviceBuckets *buckets, DeviceGather *gather);
/* x summed over the pipeline group (each stage's tensors counted once). */
void pipeline_device_sum(PipelineDevice *pd, double *x, int n);

#endif
