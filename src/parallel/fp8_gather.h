/* fp8_gather.h: --fp8-param-gather, the ZeRO-3 gather of a transformer
 * layer with its four FP8 weight matrices (qkv, attproj, fc, fcproj) sent
 * as E4M3 codes, one byte each instead of four; the rest of the layer
 * (LayerNorm, biases) stays fp32. Delayed FP8 only: the codes are made with
 * the weight's training-time scale (model/fp8_scaling.h), which every rank
 * holds the same, so the scale itself need not travel.
 *
 * Each rank quantizes its shard's part of every weight (after bf16
 * rounding where the higher precision is bf16, as the gathered weight would
 * be), keeps the values of its codes and sends the codes; receivers decode
 * code * (1/scale) in fp32, the very expression of kernels/fp8.c. So the
 * gathered layer holds, bit for bit, what quantizing after an fp32 gather
 * gives, and the forward's quantization of it returns the same codes (an
 * fp32 round trip moves a value by ~2^-23, far from E4M3's half-ulp): the
 * training is the same bits as without the flag. The weight's statistics
 * and amax are recorded here, per shard (max over dp at the update: the
 * whole tensor's amax); the forward counts nothing for W.
 *
 * One all-gather of equal blocks (each rank's message padded to the
 * largest, carried as floats, so CommStats counts its bytes), waited for at
 * once: not overlapped with compute like the fp32 gathers. Not here:
 * the block recipe (its 128x128 weight tiles cross shard boundaries, so a
 * shard cannot compute its tiles' scales alone). */
#ifndef BS_PARALLEL_FP8_GATHER_H
#define BS_PARALLEL_FP8_GATHER_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/range.h"
#include "model/gpt.h"

/* buf (the block's `count` floats at flat offset `off`) = the gathered
 * layer `block` (1..layers), from every rank's shard of the flat parameters
 * (`shard` of the group's partition of `total`; this rank's values in
 * shard_params). */
void fp8_gather_layer(Comm *comm, GPT *model, int block, float *buf, size_t off, size_t count, size_t total,
                      const float *shard_params, Range shard);

#endif
