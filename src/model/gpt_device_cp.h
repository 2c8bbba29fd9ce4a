/* gpt_device_cp.h: context parallelism inside gpt_device.h's step (as
 * model/context_attention.h on the CPU): each rank of the context group
 * holds t = T / size rows of every sequence (the zigzag or contiguous
 * split), with their true positions (the encoder reads them). Attention
 * takes every rank's keys and values through the FlashAttention-2 block
 * interface (device/flash_math.h): this rank's queries against one block of
 * keys at a time, the blocks' partial outputs merged by log-sum-exp
 * (DK_FLASH_MERGE), starting with its own block so that every query row has
 * seen a key. Blocks move over the context group's DeviceComm, ordered
 * against the compute stream by events, in forward and again in backward
 * (nothing of them is kept between the two). Two algorithms, as the CPU's:
 *   allgather: each layer's qkv gathered from every rank (broadcasts from
 *              each); backward adds each block's key/value gradients into a
 *              gathered buffer summed over the group, of which each rank
 *              keeps its own block.
 *   ring:      each rank's qkv block passes to the next rank (send/receive)
 *              while the one in hand is computed; backward passes each block
 *              with its key/value gradient so far, each rank adding its
 *              share, and one last hop brings every rank its own.
 * Everything returns 0, or -1 with
 * the reason in device_error; a failed collective ends the job with one
 * line (device_comm.h). */
#ifndef BS_MODEL_GPT_DEVICE_CP_H
#define BS_MODEL_GPT_DEVICE_CP_H

#include "comm/device_comm.h"
#include "device/device.h"
#include "model/context_attention.h"

typedef struct GPTDeviceCP GPTDeviceCP;

/* B sequences of t local rows (T = t x the group's size), C channels and H
 * heads (the tensor-parallel shard's); comm: the context group's (rank order
 * = context rank), kept by the caller. NULL with the reason in device_error. */
GPTDeviceCP *gpt_device_cp_create(Device *dev, DeviceStream *compute, DeviceComm *comm, int size, int rank,
                                  CpAlgo algo, CpSplit split, int B, int t, int C, int H);
void gpt_device_cp_free(GPTDeviceCP *cp);
/* Each local token's true position (B,t), on the device (EncoderArgs.positions). */
const int32_t *gpt_device_cp_positions(const GPTDeviceCP *cp);
/* out (B,t,C) and lse (B,H,t) from qkv (B,t,3C): causal attention over the whole sequence. */
int gpt_device_cp_forward(GPTDeviceCP *cp, float *out, float *lse, const float *qkv);
/* dqkv (B,t,3C) written from dout (B,t,C); qkv, out and lse as forward read and wrote them. */
int gpt_device_cp_backward(GPTDeviceCP *cp, float *dqkv, const float *dout, const float *qkv, float *out, float *lse);

#endif
