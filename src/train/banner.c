/* banner.c: the job's opening lines (see banner.h). */
#include "train/banner.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_compression(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    if (strcmp(c->grad_compression, "none") != 0 || c->zero_quant_grads)
        printf("compression: gradients %s (%s scheme, blocks of %d), %s\n", c->zero_quant_grads ? "int8 (qgZ)" :
               c->grad_compression, c->zero_quant_grads ? "hierarchical all-to-all" : option_given(c->compression_scheme) ?
               c->compression_scheme : "default", c->compression_block, c->zero_quant_grads ? "no error feedback "
               "(as ZeRO++)" : c->no_error_feedback ? "NO error feedback" : "error feedback");
    if (c->zero_quant_weights || c->zero_hpz)
        printf("compression: ZeRO++%s%s\n", c->zero_quant_weights ? " qwZ (int8 parameter gathers)" : "",
               c->zero_hpz ? " hpZ (backward gathers inside the node)" : "");
    if (tr->onebit.on)
        printf("compression: 1-bit Adam, full precision for %d steps, then 1-bit momentum with error feedback\n",
               c->freeze_step);
}

void banner_print(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const GPTConfig *mc = &tr->model.cfg;
    const Grid *g = tr->grid;
    char mine[160];
    snprintf(mine, sizeof mine, "  rank %d: dp %d, pp %d, tp %d: layers [%d, %d), %zu parameters here", tr->rank,
             g->dp_index, g->pp_index, g->tp_index, gpt_first_layer(mc), gpt_first_layer(mc) + gpt_stage_layers(mc),
             tr->model.num_params);
    char *all = (g->tp > 1 || g->pp > 1) ? comm_gather_text(tr->world, mine, "\n", 0) : NULL;
    if (tr->rank != 0 || c->quiet) {
        free(all);
        return;
    }
    if (all) {
        printf("layout: tp %d x pp %d x dp %d = %d processes, %s pipeline schedule\n%s\n", g->tp, g->pp, g->dp,
               g->tp * g->pp * g->dp, c->pp_schedule, all);
        free(all);
    }
    printf("model: L=%d H=%d C=%d T=%d V=%d (padded %d), %.2fM parameters, %.1f MFLOP/token\n", mc->num_layers,
           mc->num_heads, mc->channels, mc->max_seq_len, mc->vocab_size, mc->padded_vocab_size,
           gpt_num_trained_params(mc) / 1e6, gpt_flops_per_token(mc, c->seq_len) / 1e6);
    printf("batch: global %d sequences = micro %d x accumulation %d x dp %d (%d tokens/step); %d threads/process\n",
           c->global_batch, c->micro_batch, c->global_batch / (c->micro_batch * tr->dp_size), tr->dp_size,
           c->global_batch * c->seq_len, omp_get_max_threads());
    if (strcmp(c->batch_schedule, "constant") != 0 || strcmp(c->lr_scaling, "none") != 0)
        printf("schedule: batch %s, lr scaling %s (base batch %ld), %ld steps, %.3g tokens\n", c->batch_schedule,
               c->lr_scaling, tr->base_batch, tr->total_steps, (double)tr->total_tokens);
    printf("optimizer: %s\n", c->optimizer);
    if (tr->model.bf16)
        printf("precision: bf16 matmuls on %s (this CPU %s bf16 arithmetic), fp32 masters and accumulation\n",
               matmul_bf16_path_name(matmul_bf16_path(tr->model.bf16_matmul)),
               matmul_bf16_cpu_has_bf16() ? "has" : "lacks");
    if (tr->dp_size > 1 || c->zero > 0) {
        DPMemory mem = dp_memory(tr->dp);
        double P = (double)tr->model.num_params * 4, N = tr->dp_size;
        double formula[4] = {16 * P, 8 * P + 8 * P / N, 4 * P + 12 * P / N, 16 * P / N};
        double opt_bytes = (double)tr->update_count * 4 * optimizer_state_arrays(tr->opt.cfg.kind);
        printf("data parallel: %d ranks, ZeRO stage %d, %s collectives, buckets of %.1f MB%s\n", tr->dp_size, c->zero,
               c->comm_algo, c->bucket_mb, c->no_overlap ? " (no overlap)" : "");
        print_compression(tr);
        printf("per-rank state: params %.1f MB, grads %.1f MB, optimizer %.1f MB = %.1f MB (ZeRO formula %.1f MB) "
               "+ buffers %.1f MB\n", mem.param_bytes / 1e6, mem.grad_bytes / 1e6, opt_bytes / 1e6,
               (mem.param_bytes + mem.grad_bytes + opt_bytes) / 1e6, formula[c->zero] / 1e6, mem.buffer_bytes / 1e6);
    }
    printf("data: %s (%zu tokens, %zu sequences, %s)\n", c->data, tr->train_data.num_tokens,
           tr->train_data.num_windows, c->data_order);
}
