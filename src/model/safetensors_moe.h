/* safetensors_moe.h: a Mixture-of-Experts GPT in a Hugging Face directory
 * (model/safetensors_file.c's helper; not a door of its own).
 *
 * No transformers class holds a GPT-2 block with experts, so the names follow
 * the MoE models that do (Qwen2-MoE, OLMoE: mlp.gate, mlp.experts.E.*) with
 * GPT-2's own MLP inside each expert. In an MoE layer N, instead of
 * h.N.mlp.c_fc / h.N.mlp.c_proj:
 *   h.N.mlp.gate.weight                    (E, C)  the router, nn.Linear's (out, in)
 *   h.N.mlp.gate.e_score_correction_bias   (E)     loss-free balancing's selection bias
 *                                                  (DeepSeek-V3's name; state beside
 *                                                  the flat buffer; absent on reading: 0)
 *   h.N.mlp.experts.E.c_fc.weight          (C, F)  Conv1D (in, out), as GPT-2's mlp.c_fc
 *   h.N.mlp.experts.E.c_fc.bias            (F)
 *   h.N.mlp.experts.E.c_proj.weight        (F, C)  Conv1D
 *   h.N.mlp.experts.E.c_proj.bias          (C)
 * The shape (config.json's keys, and the same as strings in the file's
 * __metadata__): num_experts, num_experts_per_tok, moe_intermediate_size
 * (Qwen2-MoE's), decoder_sparse_step (Qwen2-MoE's: layer l is MoE when
 * (l + 1) % step == 0, --moe-every), scoring_func softmax|sigmoid
 * (DeepSeek-V3's, --router), norm_topk_prob (true: the top-k weights are
 * renormalised, the only kind this engine computes), and for the record
 * capacity_factor (0: dropless; how training dropped tokens, a run option
 * not read back). config.json's model_type is
 * batchscale_gpt2_moe, so transformers' Auto classes refuse it rather than
 * load a dense GPT-2 with random MLPs. */
#ifndef BS_MODEL_SAFETENSORS_MOE_H
#define BS_MODEL_SAFETENSORS_MOE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "model/gpt.h"

#define ST_MOE_MODEL_TYPE "batchscale_gpt2_moe"

/* One named tensor of a file, where its values live in the model. */
typedef struct {
    char name[128];  /* without the "transformer." prefix */
    size_t offset;   /* in the flat buffer, or (state) in the model's moe_bias */
    size_t rows, cols; /* the file's shape; cols 0 for a vector */
    bool conv1d;     /* the file holds the transpose of the engine's (out, in) */
    bool state;      /* the selection bias: model->moe_bias, optional on reading */
} StPiece;
typedef bool (*StPieceFn)(void *ctx, const StPiece *p);

/* Every MoE layer's router, selection bias and experts, layer by layer; false at the first fn that fails. */
bool st_moe_for_each(const GPTConfig *cfg, StPieceFn fn, void *ctx);
/* Whether `rest` (a name after "h.N.") is one of layer N's MoE tensors in cfg. */
bool st_moe_known_name(const GPTConfig *cfg, int layer, const char *rest);
/* The MoE fields into a config.json object (as numbers) or the metadata (as strings). */
void st_moe_describe(const GPTConfig *cfg, json_t *obj, bool as_strings);
/* The MoE fields from the metadata, else from config.json (NULL: none); both
 * silent: a dense model (cfg untouched). False with a one-line reason (naming
 * `source`) for a field that is missing or out of range. */
bool st_moe_read_fields(json_t *meta, json_t *config, const char *source, GPTConfig *cfg, char *why, size_t n);

#endif
