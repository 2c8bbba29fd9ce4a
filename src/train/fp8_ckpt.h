/* fp8_ckpt.h: the delayed-scaling state of FP8 training in checkpoints.
 *
 * After the amax reduction every tensor-parallel and data-parallel rank
 * holds the same scales and histories (model/fp8_scaling.h), so the state
 * belongs to the logical layer, not to a rank: one file per transformer
 * layer, fp8_layer_LLLLL.bin, written by the first tensor- and
 * data-parallel rank of the stage that holds the layer:
 *   "BSFP8S01"  8 bytes
 *   history     u32 (--fp8-amax-history)
 *   floats      u32, then per linear layer (qkv, attproj, fc, fcproj) and
 *               tensor (input, weight, grad): its scale, then its history
 * so a checkpoint resumes in any layout. A checkpoint without these files
 * (written in bf16 or fp32, or with the block recipe, which has no state)
 * or with another history length resumes FP8 with fresh scales (1, empty
 * histories, as a new run starts), and rank 0 says so; the fp8 files are
 * ignored by a run in another precision. */
#ifndef BS_TRAIN_FP8_CKPT_H
#define BS_TRAIN_FP8_CKPT_H

#include "train/feature.h"

/* Writes this rank's share into the checkpoint's directory (a collective-free call on every rank). */
void fp8_ckpt_save(const TrainContext *cx, const char *dir);
/* Restores the state of every local layer from dir, or leaves it fresh (see above). */
void fp8_ckpt_resume(const TrainContext *cx, const char *dir);

#endif
