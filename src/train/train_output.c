/* train_output.c: the job's outputs besides its steps (see train_output.h). */
#include "train/train_output.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/io.h"
#include "model/adapter_config.h"
#include "model/model_file.h"
#include "model/safetensors_file.h"
#include "train/micro_source.h"
#include "train/sample.h"

/* Validation batch i goes to replica i mod dp; every replica runs the same
 * number of forwards (collectives under ZeRO-3 and pipelines need it) and
 * counts only real batches. */
double train_evaluate(Trainer *tr) {
    if (!tr->has_val || tr->cfg.eval.val_batches <= 0) return NAN;
    const int B = tr->cfg.batch.micro_batch;
    const int rounds = (tr->cfg.eval.val_batches + tr->dp_size - 1) / tr->dp_size;
    const int mine = tr->cfg.eval.val_batches / tr->dp_size + (tr->dp_index < tr->cfg.eval.val_batches % tr->dp_size ? 1 : 0);
    MicroSource src = {&tr->val_data, B, tr->cfg.model.seq_len, 0, tr->dp_size, tr->dp_index, -1};
    double loss = engine_evaluate(tr->engine, rounds, mine, micro_source_load, &src);
    const Grid *g = engine_grid(tr->engine);
    bool counts = g->tp_index == 0 && g->pp_index == g->pp - 1; /* the loss ranks; their cp ranks share sequences */
    double counted = 0;
    for (int i = 0; counts && g->cp_index == 0 && i < mine; i++)
        counted += (double)loader_counted(&tr->val_data, ((uint64_t)i * tr->dp_size + tr->dp_index) * B, B);
    double stats[2] = {counts ? loss : 0, counted};
    comm_allreduce_double(tr->world, stats, 2);
    return stats[0] / stats[1];
}

/* The whole model on rank 0, for sampling and export (a collective: every
 * rank calls it). Returns a model the caller frees with gpt_free (params
 * NULL on other ranks). */
static GPT full_model(Trainer *tr) {
    GPT m;
    gpt_create_with(&m, &tr->model, tr->rank == 0 ? GPT_ALLOC_PARAMS : 0);
    if (tr->model.lora_rank > 0) m.lora_scale = (float)(tr->cfg.lora.alpha / tr->cfg.lora.rank);
    engine_gather_model(tr->engine, m.params);
    FEATURES_CALL(&tr->features, complete_model, &tr->cx, &m); /* MoE: the selection bias of every stage */
    return m;
}

void train_print_sample(Trainer *tr) {
    if (tr->cfg.eval.sample_tokens <= 0 || tr->cfg.output.quiet || !tr->tok) return;
    GPT m = full_model(tr);
    if (tr->rank == 0) {
        GPTActs acts;
        gpt_acts_create(&acts, &m.cfg, 1, m.cfg.max_seq_len, false);
        int n = tr->cfg.eval.sample_tokens;
        int32_t *tokens = bs_malloc((size_t)(n + 1) * sizeof(int32_t));
        tokens[0] = tokenizer_eot(tr->tok);
        SampleParams sp = {(float)tr->cfg.eval.temperature, tr->cfg.eval.top_k};
        int len = sample_generate(&m, &acts, tokens, 1, n, &sp, &tr->sample_rng);
        size_t bytes;
        unsigned char *text = tokenizer_decode(tr->tok, tokens + 1, (size_t)len - 1, &bytes);
        progress_line(&tr->progress, "--- sample at step %ld (temperature %.2f, top-k %d) ---\n%s\n---", tr->step,
                      tr->cfg.eval.temperature, tr->cfg.eval.top_k, (char *)text);
        free(text);
        free(tokens);
        gpt_acts_free(&acts);
    }
    gpt_free(&m);
}

/* LoRA: the adapters as a peft directory. */
static void export_adapters(const Trainer *tr, const GPT *m) {
    const char *dir = tr->cfg.lora.save_adapters;
    char path[4200];
    bs_mkdir_p(dir);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    safetensors_write_adapters(path, &m->cfg, m->params);
    AdapterConfig a = {m->cfg.lora_rank, tr->cfg.lora.alpha, tr->cfg.lora.dropout, m->cfg.lora_targets, "",
                       engine_base_hash(tr->engine)};
    if (option_given(tr->cfg.model.init_from) && !realpath(tr->cfg.model.init_from, a.base_model)) /* the base's path, absolute */
        snprintf(a.base_model, sizeof a.base_model, "%s", tr->cfg.model.init_from);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    adapter_config_write(path, &a);
}

void train_export_models(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    if (!option_given(c->output.save_model) && !option_given(c->output.out) && !option_given(c->lora.save_adapters)) return;
    GPT m = full_model(tr);
    if (tr->rank == 0 && option_given(c->lora.save_adapters)) export_adapters(tr, &m);
    if (tr->rank == 0 && c->lora.merge) gpt_merge_adapters(&m); /* model files hold the base tensors only */
    if (tr->rank == 0) {
        if (option_given(c->output.save_model)) model_file_write(c->output.save_model, &m);
        if (option_given(c->output.out)) { /* an MoE model in safetensors: llm.c's file cannot hold its experts */
            char path[4200];
            snprintf(path, sizeof path, gpt_is_moe(&m.cfg) ? "%s/model.safetensors" : "%s/model.bin", c->output.out);
            model_file_write(path, &m);
        }
    }
    gpt_free(&m);
}

void train_write_trace(Trainer *tr, double origin) {
    if (!option_given(tr->cfg.output.trace)) return;
    char *mine = trace_events_json(&tr->trace, tr->rank, origin);
    char *all = comm_gather_text(engine_grid(tr->engine)->dp_group, mine, ",\n", 0);
    free(mine);
    if (tr->rank == 0) {
        FILE *f = bs_fopen(tr->cfg.output.trace, "wb");
        fprintf(f, "{\"traceEvents\":[\n%s\n],\"displayTimeUnit\":\"ms\"}\n", all);
        bs_fclose_synced(f, tr->cfg.output.trace);
        free(all);
    }
}
