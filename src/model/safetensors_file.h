/* safetensors_file.h: Hugging Face safetensors model files in GPT-2's naming.
 *
 * The format: a little-endian u64 header length n, n bytes of JSON (padded
 * with spaces to a multiple of 8 bytes), then the data area. The header maps
 * each tensor's name to {dtype, shape, data_offsets [begin, end)} relative to
 * the data area; tensors tile it with no holes; an optional "__metadata__"
 * holds strings. Read by mmap and validated strictly: every violation is one
 * line naming the file and the tensor. Dtypes F32, BF16 and F16 are read;
 * F32 is written.
 *
 * GPT-2's names, with or without the "transformer." prefix: wte.weight,
 * wpe.weight, h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.
 * {weight,bias}, ln_f.{weight,bias}. The linear weights are Conv1D's (in,
 * out), transposed to this engine's (out, in) on the way in and back on the
 * way out; the attn.bias / attn.masked_bias mask buffers are ignored;
 * lm_head.weight, if present, must equal wte (tied). The number of heads is
 * not in the tensors: it comes from the "n_head" metadata (written here) or
 * the config.json beside the file (Hugging Face's save_pretrained). Also
 * peft's LoRA adapter files (below). */
#ifndef BS_MODEL_SAFETENSORS_FILE_H
#define BS_MODEL_SAFETENSORS_FILE_H

#include <stdbool.h>

#include "model/gpt.h"

/* Whether path starts like a safetensors file (a header length, then '{'). */
bool safetensors_is_file(const char *path);
/* The shape from the tensors into cfg; every size the file's metadata or the
 * config.json beside it declares (n_layer, n_embd, n_positions, n_ctx,
 * vocab_size, n_inner, n_head) must agree with them; heads from those, else
 * cfg->num_heads if > 0, else refused. Every tensor read is checked finite.
 * Dies with one line naming the file and the field or tensor. */
void safetensors_read_config(const char *path, GPTConfig *cfg);
/* The weights into a whole model created with that config. */
void safetensors_read_params(const char *path, GPT *model);
/* The same, returning false with the one-line reason instead of dying. */
bool safetensors_try_read_config(const char *path, GPTConfig *cfg, char *why, size_t why_size);
bool safetensors_try_read_params(const char *path, GPT *model, char *why, size_t why_size);
/* Reading tensor by tensor (LoRA's frozen base streamed into its format):
 * the file checked against cfg's whole model as above (lm_head against wte
 * as each range of wte is read), then any elements [within, within + count)
 * of one tensor (kind, global layer) in this engine's order ((out, in);
 * wte's padded rows as 0). The mapped pages read are given back. */
typedef struct SafetensorsReader SafetensorsReader;
SafetensorsReader *safetensors_reader_open(const char *path, const GPTConfig *cfg);
void safetensors_reader_read(SafetensorsReader *r, TensorKind kind, int layer, size_t within, size_t count,
                             float *dst);
void safetensors_reader_close(SafetensorsReader *r);
/* Writes the whole model (fp32, "transformer." names, the shape as
 * metadata) atomically. */
void safetensors_write(const char *path, const GPT *model);
/* A Hugging Face GPT-2 config.json for the model (GPT2LMHeadModel). */
void safetensors_write_hf_config(const char *path, const GPTConfig *cfg);

/* LoRA adapters in peft's file (adapter_model.safetensors): names
 * base_model.model.transformer.h.N.{attn.c_attn,attn.c_proj,mlp.c_fc,
 * mlp.c_proj}.lora_{A,B}.weight, A (r, in) and B (out, r) as they are here
 * (no transpose). cfg: the whole model with its lora fields; params in cfg's
 * layout (any part holding the adapters). Reading refuses, in one line, a
 * missing or misshapen adapter and any other tensor (dies). */
void safetensors_read_adapters(const char *path, const GPTConfig *cfg, float *params);
void safetensors_write_adapters(const char *path, const GPTConfig *cfg, const float *params);
/* peft's adapter_config.json beside it: model/adapter_config.h. */

#endif
