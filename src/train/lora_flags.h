/* lora_flags.h: the LoRA flags against --lora-init's adapter_config.json,
 * so adapters load as they were saved. A flag not given (TrainConfig's
 * given: the option parser's record) takes the adapter's value (r,
 * lora_alpha, lora_dropout, target_modules); one given with another value is
 * refused in one line; without an adapter config the option table's
 * defaults apply (alpha 16, dropout 0, all four targets). Also a warning where the adapters were trained over
 * another base than the run's. It does not read the adapters' tensors (the
 * engine does, shaped by the flags this settles). */
#ifndef BS_TRAIN_LORA_FLAGS_H
#define BS_TRAIN_LORA_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/train_config.h"


/* Fills c's LoRA flags left unset; false with a one-line reason (naming the
 * flag and the file) where a flag contradicts the adapter's config or the
 * config cannot be read. Idempotent. */
bool lora_flags_resolve(TrainConfig *c, char *why, size_t why_size);
/* One warning line where --lora-init's adapter_config.json records a base
 * (batchscale's hash) other than this run's base_hash: the adapters load,
 * as peft would load them, but were trained over another model. */
void lora_flags_check_base(const TrainConfig *c, uint64_t base_hash);

/* LoRA: the flag-combination rules of this area, run by train_config_check in its order (the first broken
 * one is reported): false with a one-line reason. */
bool lora_flags_check(const TrainConfig *c, char *why, size_t n);

#endif
