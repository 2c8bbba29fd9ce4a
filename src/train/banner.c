/* banner.c: the job's opening lines (see banner.h). */
#include "train/banner.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_compression(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    if (strcmp(c->compression.codec, "none") != 0 || c->parallel.zero_quant_grads)
        printf("compression: gradients %s (%s scheme, blocks of %d), %s\n", c->parallel.zero_quant_grads ? "int8 (qgZ)" :
               c->compression.codec, c->parallel.zero_quant_grads ? "hierarchical all-to-all" : option_given(c->compression.scheme) ?
               c->compression.scheme : "default", c->compression.block, c->parallel.zero_quant_grads ? "no error feedback "
               "(as ZeRO++)" : c->compression.no_error_feedback ? "NO error feedback" : "error feedback");
    if (c->parallel.zero_quant_weights || c->parallel.zero_hpz)
        printf("compression: ZeRO++%s%s\n", c->parallel.zero_quant_weights ? " qwZ (int8 parameter gathers)" : "",
               c->parallel.zero_hpz ? " hpZ (backward gathers inside the node)" : "");
    if (c->optim.kind == OPTIM_ONEBIT_ADAM)
        printf("compression: 1-bit Adam, full precision for %d steps, then 1-bit momentum with error feedback\n",
               c->optim.freeze_step);
}

/* This rank's place: grid coordinates, its chunks' layers, its parameter count. */
static void rank_line(const Trainer *tr, char *out, size_t n) {
    Engine *e = tr->engine;
    const Grid *g = engine_grid(e);
    size_t k = (size_t)snprintf(out, n, "  rank %d: dp %d, pp %d, cp %d, tp %d: layers", tr->rank, g->dp_index,
                                g->pp_index, g->cp_index, g->tp_index), params = 0;
    for (int c = 0; c < engine_num_chunks(e) && k < n; c++) {
        const GPTConfig *mc = &engine_chunk(e, c)->model.cfg;
        k += (size_t)snprintf(out + k, n - k, " [%d, %d)", gpt_first_layer(mc), gpt_first_layer(mc) + gpt_stage_layers(mc));
        params += engine_chunk(e, c)->model.num_params;
    }
    if (k < n) snprintf(out + k, n - k, ", %zu parameters here", params);
}

/* This rank's parameters and optimizer-state floats over its chunks. */
static void rank_sizes(const Trainer *tr, double *params, double *updated) {
    *params = *updated = 0;
    for (int c = 0; c < engine_num_chunks(tr->engine); c++) {
        *params += (double)engine_chunk(tr->engine, c)->model.num_params;
        *updated += (double)engine_chunk(tr->engine, c)->update_count;
    }
}

/* The data-parallel lines: ranks, ZeRO stage, how gradients move, per-rank state (with more than one rank or ZeRO). */
static void print_data_parallel(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const Grid *g = engine_grid(tr->engine);
    const int reducing = comm_size(g->dp_group); /* dp x cp ranks: gradients reduced and ZeRO shards over them */
    if (reducing > 1 || c->parallel.zero > 0) {
        DPMemory mem = engine_memory(tr->engine);
        double params, updated;
        rank_sizes(tr, &params, &updated);
        double P = params, N = reducing; /* the formulas count bytes per parameter: fp32 4 + 4 + 8 */
        double formula[4] = {16 * P, 8 * P + 8 * P / N, 4 * P + 12 * P / N, 16 * P / N};
        double opt_bytes = updated * 4 * optimizer_state_arrays(c->optim.kind);
        char path[48] = "", reduced[128]; /* a device reduces the same buckets, through the host or NCCL */
        if (engine_device_comm(tr->engine)) snprintf(path, sizeof path, "device buffers over %s, ", engine_device_comm(tr->engine));
        snprintf(reduced, sizeof reduced, "%sbuckets of %.1f MB%s", path, c->parallel.bucket_mb,
                 c->parallel.no_overlap ? " (no overlap)" : "");
        printf("data parallel: %d ranks%s, ZeRO stage %d, %s collectives, %s\n", reducing, g->cp > 1 ? " (dp x cp)" : "",
               c->parallel.zero, TRAIN_COMM_ALGO_WORDS[c->parallel.comm_algo], reduced);
        print_compression(tr);
        printf("per-rank state: params %.1f MB, grads %.1f MB, optimizer %.1f MB = %.1f MB (ZeRO formula %.1f MB) "
               "+ buffers %.1f MB\n", mem.param_bytes / 1e6, mem.grad_bytes / 1e6, opt_bytes / 1e6,
               (mem.param_bytes + mem.grad_bytes + opt_bytes) / 1e6, formula[c->parallel.zero] / 1e6, mem.buffer_bytes / 1e6);
        size_t peak;
        if (engine_device_memory_peak(tr->engine, &peak))
            printf("device memory: %zu bytes per rank at most (device_memory_peak: sim's allocations, a GPU's use with its context)\n", peak);
    }
}

void banner_print(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const GPTConfig *mc = &tr->model;
    const Grid *g = engine_grid(tr->engine);
    const GPT *first = &engine_chunk(tr->engine, 0)->model;
    char mine[400];
    rank_line(tr, mine, sizeof mine);
    char *all = (g->tp > 1 || g->pp > 1 || g->cp > 1) ? comm_gather_text(tr->world, mine, "\n", 0) : NULL;
    if (tr->rank != 0 || c->output.quiet) {
        free(all);
        return;
    }
    if (all) {
        char chunks[64] = "";
        if (engine_num_chunks(tr->engine) > 1) snprintf(chunks, sizeof chunks, " (%d virtual stages per rank)",
                                                        engine_num_chunks(tr->engine));
        char context[96] = "";
        if (g->cp > 1) snprintf(context, sizeof context, ", %s context attention over %s chunks of %d tokens",
                                TRAIN_CP_ALGO_WORDS[c->parallel.cp_algo], TRAIN_CP_SPLIT_WORDS[c->parallel.cp_split], c->model.seq_len / (2 * g->cp));
        /* a device pipeline's transfers take the host path whatever --gpu-comm says (parallel/pipeline_device.h) */
        const char *stages = g->pp > 1 && c->device.kind != TRAIN_DEVICE_CPU ? ", stage transfers as device buffers over host" : "";
        char device[64] = ""; /* the tensor and context groups' collectives on a device */
        if ((g->tp > 1 || g->cp > 1) && engine_device_comm(tr->engine))
            snprintf(device, sizeof device, ", device buffers over %s", engine_device_comm(tr->engine));
        printf("layout: tp %d x cp %d x pp %d x dp %d = %d processes (tp varies fastest, then cp, pp, dp), %s "
               "pipeline schedule%s%s%s%s\n%s\n", g->tp, g->cp, g->pp, g->dp, g->tp * g->cp * g->pp * g->dp,
               TRAIN_PP_SCHEDULE_WORDS[c->parallel.pp_schedule], chunks, context, device, stages, all);
        free(all);
    }
    printf("model: L=%d H=%d C=%d T=%d V=%d (padded %d), %.2fM parameters, %.1f MFLOP/token\n", mc->num_layers,
           mc->num_heads, mc->channels, mc->max_seq_len, mc->vocab_size, mc->padded_vocab_size,
           gpt_num_trained_params(mc) / 1e6, gpt_flops_per_token(mc, c->model.seq_len) / 1e6);
    printf("batch: global %d sequences = micro %d x accumulation %d x dp %d (%d tokens/step); %d threads/process\n",
           c->batch.global_batch, c->batch.micro_batch, c->batch.global_batch / (c->batch.micro_batch * tr->dp_size), tr->dp_size,
           c->batch.global_batch * c->model.seq_len, omp_get_max_threads());
    if (strcmp(c->batch.schedule, "constant") != 0 || c->batch.lr_scaling != LR_SCALING_NONE)
        printf("schedule: batch %s, lr scaling %s (base batch %ld), %ld steps, %.3g tokens\n", c->batch.schedule,
               TRAIN_LR_SCALING_WORDS[c->batch.lr_scaling], tr->batch.base_batch, tr->total_steps, (double)tr->total_tokens);
    printf("optimizer: %s\n", TRAIN_OPTIMIZER_WORDS[c->optim.kind]);
    if (first->bf16)
        printf("precision: bf16 matmuls on %s (this CPU %s bf16 arithmetic), fp32 masters and accumulation\n",
               matmul_bf16_path_name(matmul_bf16_path(first->bf16_matmul)),
               matmul_bf16_cpu_has_bf16() ? "has" : "lacks");
    if (c->precision.mode == PRECISION_FP8)
        printf("precision: fp8 %s recipe in the transformer layers' matmuls (%s), the rest in %s\n",
               TRAIN_FP8_RECIPE_WORDS[c->precision.fp8_recipe],
               c->precision.fp8_recipe == FP8_RECIPE_BLOCK ? "E4M3, power-of-two scales per 1x128 and 128x128 block"
                                                 : "E4M3 forward, E5M2 gradients, per-tensor scales from the amax history",
               TRAIN_FP8_HIGH_PRECISION_WORDS[c->precision.fp8_high_precision]);
    print_data_parallel(tr);
    printf("data: %s (%zu tokens, %zu sequences, %s)\n", c->data.train, tr->train_data.num_tokens,
           tr->train_data.num_windows, TRAIN_DATA_ORDER_WORDS[c->data.order]);
}
