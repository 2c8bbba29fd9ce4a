/* frozen_load.h: LoRA's frozen base filled in place, tensor by tensor, with
 * this shard's elements only: read from a model file (llm.c or safetensors)
 * range by range (each tensor-parallel rank reads its rows or columns,
 * nothing else), or seeded. A linear weight matrix passes a block of rows
 * at a time through fp32 scratch into its frozen format
 * (model/frozen_linear.h), wte (when kept in bf16) likewise
 * (model/frozen_embedding.h);
 * everything else is written straight into the fp32 part. So no fp32 copy of
 * the base exists beyond what the frozen format itself keeps in fp32. */
#ifndef BS_MODEL_FROZEN_LOAD_H
#define BS_MODEL_FROZEN_LOAD_H

#include <stdint.h>

#include "model/gpt.h"

/* model: a LoRA shard (cfg.part GPT_PART_ADAPTERS); path NULL: the seeded
 * initialisation (the values the whole model would start from). */
void gpt_load_frozen_base(GPT *model, const char *path, uint64_t seed);

#endif
