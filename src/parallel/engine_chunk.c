/* engine_chunk.c: a model chunk's data-parallel buffers and shards as the
 * layers above the engine see them (see engine.h): the parts of the
 * data-parallel layer (data_parallel.h, model_parallel.h) that checkpoints,
 * norms and the features need, behind the engine's door. */
#include "parallel/engine.h"
#include "parallel/model_parallel.h"

float *engine_chunk_update_params(EngineChunk *ch) { return dp_update_params(ch->dp); }

float *engine_chunk_update_grads(EngineChunk *ch) { return dp_update_grads(ch->dp); }

float *engine_chunk_params_at(EngineChunk *ch, size_t offset, size_t count) {
    return dp_params_at(ch->dp, offset, count);
}

void engine_chunk_shard_range(const EngineChunk *ch, size_t *offset, size_t *count) {
    dp_shard_range(ch->dp, offset, count);
}

int engine_chunk_num_pieces(const EngineChunk *ch) { return dp_num_pieces(ch->dp); }

DPPiece engine_chunk_piece(const EngineChunk *ch, int k) { return dp_piece(ch->dp, k); }

bool engine_chunk_experts_sharded_apart(const EngineChunk *ch) { return dp_experts_sharded_apart(ch->dp); }

void engine_chunk_gather_state(EngineChunk *ch, const float *packed, size_t offset, size_t count, float *out) {
    dp_gather_state(ch->dp, packed, offset, count, out);
}

bool engine_chunk_counts_in_norm(const EngineChunk *ch, TensorKind kind) {
    return mp_counts_in_norm(&ch->model.cfg, ch->dp, kind);
}

void engine_chunk_residuals(EngineChunk *ch, float **worker, size_t *worker_count, float **server,
                            size_t *server_count) {
    dp_residuals(ch->dp, worker, worker_count, server, server_count);
}

void engine_chunk_reset_residuals(EngineChunk *ch) { dp_reset_residuals(ch->dp); }

void engine_chunk_measure_micro_preconditioned(EngineChunk *ch, const Preconditioner *p) {
    dp_measure_micro_preconditioned(ch->dp, p);
}

double engine_chunk_micro_precond_sum_squares(const EngineChunk *ch) { return dp_micro_precond_sum_squares(ch->dp); }

void engine_chunk_set_probe(EngineChunk *ch, float *probe, const float *signs) { dp_set_probe(ch->dp, probe, signs); }
