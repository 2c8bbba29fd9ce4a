/* model_file.h: model weights in either format this engine reads and
 * writes, chosen by content on reading and by name on writing:
 *   llm.c's fp32 model file (model/llmc_file.h): the default;
 *   Hugging Face safetensors (model/safetensors_file.h): a file whose name
 *   ends in .safetensors, or a directory holding model.safetensors (what
 *   save_pretrained writes, its config.json giving the heads); the only
 *   one that holds an MoE model (model/safetensors_moe.h). */
#ifndef BS_MODEL_MODEL_FILE_H
#define BS_MODEL_MODEL_FILE_H

#include <stdbool.h>

#include "model/gpt.h"

/* The shape into cfg, from the weights and the sizes declared beside them
 * (a safetensors file's metadata and config.json must agree with its
 * tensors); cfg->num_heads, if > 0, stands where a safetensors file declares
 * no n_head, and with neither it is refused. Dies with one line naming the
 * file and the field. */
void model_file_read_config(const char *path, GPTConfig *cfg);
/* The weights into a whole model created with that config. */
void model_file_read_params(const char *path, GPT *model);
/* Either format read tensor by tensor: the file checked against cfg's whole
 * model when opened, then any elements [within, within + count) of one
 * tensor (kind, global layer) in this engine's order, wte's padded rows 0
 * (model/llmc_file.h, model/safetensors_file.h). */
typedef struct ModelReader ModelReader;
ModelReader *model_file_open(const char *path, const GPTConfig *cfg);
void model_file_read_range(ModelReader *r, TensorKind kind, int layer, size_t within, size_t count, float *dst);
void model_file_close(ModelReader *r);
/* Writes atomically: safetensors if path ends in .safetensors, else llm.c. */
void model_file_write(const char *path, const GPT *model);
bool model_file_is_safetensors_name(const char *path);
/* XXH64 of the model file's bytes (a directory: its model.safetensors), read
 * in small pieces (the file is not mapped, so it adds nothing to the resident
 * memory): a base model's identity. Dies with one line if it cannot be read. */
uint64_t model_file_hash(const char *path);
/* A seeded model's identity: XXH64 of the seed and the shape (its values follow from them). */
uint64_t model_seeded_hash(const GPTConfig *cfg, uint64_t seed);

#endif
