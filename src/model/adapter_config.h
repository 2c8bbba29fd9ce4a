/* adapter_config.h: peft's adapter_config.json for LoRA adapters, read and
 * written, so adapters load as they were saved (by batchscale or by peft).
 *
 * Read: r, lora_alpha, lora_dropout and target_modules (a list of module
 * names matched as peft matches them: a name equal to the module's or a
 * suffix of it after a dot, so "c_proj" is both attn.c_proj and
 * mlp.c_proj), base_model_name_or_path, and batchscale's hash of the frozen
 * base from "revision" (see below). What batchscale cannot apply as peft
 * would is refused in one line naming the file and the field: another
 * peft_type, target_modules as a regular expression or naming a module
 * that is not one of GPT-2's four linear layers, use_rslora, use_dora,
 * rank_pattern, alpha_pattern, layers_to_transform, modules_to_save, bias
 * other than "none".
 *
 * Written: peft's fields with the real dropout and the base model's path;
 * the base's hash goes in peft's "revision" ("the specific model version to
 * use": here "batchscale-xxh64:<16 hex digits>"), because peft 0.7.1 builds
 * its LoraConfig from every key of the file and refuses a key it does not
 * know. This file does not read the adapters' tensors (safetensors_file.h). */
#ifndef BS_MODEL_ADAPTER_CONFIG_H
#define BS_MODEL_ADAPTER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int rank;
    double alpha, dropout;
    int targets;           /* mask of 1 << LORA_TARGET_* */
    char base_model[4096]; /* base_model_name_or_path ("": none) */
    uint64_t base_hash;    /* lora_base_hash of the base it was trained over (0: not recorded) */
} AdapterConfig;

/* Where an adapter path's adapter_config.json is: DIR/adapter_config.json
 * for a directory, the one beside it for a file. */
void adapter_config_path(const char *adapter, char *out, size_t size);
/* Reads path into out; false with a one-line reason naming the file and the field. */
bool adapter_config_read(const char *path, AdapterConfig *out, char *why, size_t why_size);
/* Writes c as peft's adapter_config.json (atomically; dies with one line). */
void adapter_config_write(const char *path, const AdapterConfig *c);

#endif
