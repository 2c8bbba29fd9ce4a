/* llmc_file.h: llm.c's fp32 model file (magic 20240326, version 3): an
 * int32[256] header (max T, V, L, H, C, padded V) and the tensors in llm.c's
 * order, each tensor for all layers together. Used to start from GPT-2
 * weights, to export a trained model, and by the PyTorch reference tests. */
#ifndef BS_MODEL_LLMC_FILE_H
#define BS_MODEL_LLMC_FILE_H

#include "model/gpt.h"

#define LLMC_MODEL_MAGIC 20240326
#define LLMC_MODEL_VERSION_FP32 3

/* Reads the header into cfg (padded size recomputed for this engine). */
void llmc_model_read_config(const char *path, GPTConfig *cfg);
/* Reads the weights into a model created with the file's config. */
void llmc_model_read_params(const char *path, GPT *model);
/* Reading tensor by tensor (LoRA's frozen base streamed into its format):
 * the file checked against cfg's whole model as above, then any elements
 * [within, within + count) of one tensor (kind, global layer) in this
 * engine's order (wte's padded rows read as 0). */
typedef struct LlmcReader LlmcReader;
LlmcReader *llmc_reader_open(const char *path, const GPTConfig *cfg);
void llmc_reader_read(LlmcReader *r, TensorKind kind, int layer, size_t within, size_t count, float *dst);
void llmc_reader_close(LlmcReader *r);
/* Writes atomically. */
void llmc_model_write(const char *path, const GPT *model);

#endif
