/* lora_flags.h: the LoRA flags against --lora-init's adapter_config.json,
 * so adapters load as they were saved. A flag left unset takes the
 * adapter's value (r, lora_alpha, lora_dropout, target_modules); one set to
 * another value is refused in one line; without an adapter config the
 * defaults apply (alpha 16, dropout 0, all four targets). "Unset" is the
 * option table's default: --lora-rank 0, --lora-alpha 0, --lora-dropout -1,
 * --lora-targets "". Also a warning where the adapters were trained over
 * another base than the run's. It does not read the adapters' tensors (the
 * engine does, shaped by the flags this settles). */
#ifndef BS_TRAIN_LORA_FLAGS_H
#define BS_TRAIN_LORA_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/train_config.h"

#define LORA_ALPHA_UNSET 0.0    /* --lora-alpha left out */
#define LORA_DROPOUT_UNSET -1.0 /* --lora-dropout left out */
#define LORA_ALPHA_DEFAULT 16.0

/* Fills c's LoRA flags left unset; false with a one-line reason (naming the
 * flag and the file) where a flag contradicts the adapter's config or the
 * config cannot be read. Idempotent. */
bool lora_flags_resolve(TrainConfig *c, char *why, size_t why_size);
/* One warning line where --lora-init's adapter_config.json records a base
 * (batchscale's hash) other than this run's base_hash: the adapters load,
 * as peft would load them, but were trained over another model. */
void lora_flags_check_base(const TrainConfig *c, uint64_t base_hash);

#endif
