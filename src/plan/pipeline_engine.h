/* pipeline_engine.h: what one pipeline stage's sends cost per micro-batch,
 * by the implementation that runs the pipeline.
 *
 * Megatron-LM's 1F1B pairs each send with the opposite receive in one
 * batched exchange (send_forward_recv_backward, send_backward_recv_forward):
 * two transfer times per micro-batch and virtual stage, of the activation
 * split over the TP ranks.
 *
 * DeepSpeed's PipelineEngine (deepspeed/runtime/pipe/schedule.py,
 * TrainSchedule; engine.py; p2p.py), as Megatron-DeepSpeed ran it for
 * MT-NLG and BLOOM:
 *   - every send and receive is its own blocking call (p2p.send/recv assert
 *     async_op == False): a middle stage runs RecvActivation and SendGrad
 *     with the previous stage before its forward, SendActivation and
 *     RecvGrad with the next one before its backward, one after the other:
 *     four transfer times per micro-batch; no interleaved schedule exists;
 *   - with TP > 1 the activation and its gradient travel partitioned over
 *     the TP ranks (the pipeline config's pipe_partitioned and
 *     grad_partitioned, both true by default), each as two sends: the
 *     PartitionedTensor's meta-data (a few 8-byte integers: latency only)
 *     and the 1/TP part; the receiver rebuilds the full tensor with an
 *     all-gather over the TP group, three per micro-batch and nothing
 *     beside them (the received input before the forward, the stage's own
 *     output and the received gradient before the backward: full() in
 *     _exec_forward_pass and _exec_backward_pass);
 *   - with TP 1 the whole tensor is sent, with no meta-data or all-gather.
 * The attention mask is not sent (Megatron-DeepSpeed's
 * ParallelTransformerLayerPipe reads the cached args.attn_mask). */
#ifndef BS_PLAN_PIPELINE_ENGINE_H
#define BS_PLAN_PIPELINE_ENGINE_H

#include <stdbool.h>

#include "plan/comms.h"
#include "plan/hardware.h"

typedef enum { PIPE_ENGINE_MEGATRON, PIPE_ENGINE_DEEPSPEED } PipelineEngine;

/* The meta-data tensor of a DeepSpeed PartitionedTensor, in bytes (its
 * to_meta(): dimensions, shape and partition offsets as 64-bit integers);
 * its send costs the link's latency. */
#define DEEPSPEED_META_BYTES 64.0

/* The engines' names in the enum's order, NULL-terminated (for --pipeline-engine). */
extern const char *const PIPELINE_ENGINE_WORDS[];

/* Seconds per micro-batch of one stage's pipeline sends, nothing beside
 * them: `activation_bytes` is one micro-batch's stage output (all of it,
 * before any TP split), `tp` the tensor-parallel group it is split over,
 * v the virtual stages (1 for DeepSpeed), same_node whether neighbouring
 * stages share a node. */
double pipeline_sends_per_micro_batch(PipelineEngine engine, const Hardware *hw, double activation_bytes, Group tp,
                                      int v, bool same_node);

#endif
