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
/* Writes atomically: safetensors if path ends in .safetensors, else llm.c. */
void model_file_write(const char *path, const GPT *model);
bool model_file_is_safetensors_name(const char *path);

#endif
