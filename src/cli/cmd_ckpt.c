/* cmd_ckpt.c: `batchscale ckpt inspect|export|import`: look into checkpoints
 * and convert between a checkpoint and a model file (llm.c's, or Hugging
 * Face's safetensors).
 *
 *   inspect DIR                 the manifest in readable form, every file's
 *                               size and XXH64 checksum verified, and the
 *                               files' ranges checked to cover the model once
 *                               (DIR: one checkpoint, or a checkpoint
 *                               directory: every step_* in it)
 *   export [--format llmc|safetensors] --out PATH DIR
 *                               the parameters as an llm.c fp32 model file or
 *                               a Hugging Face GPT-2 directory (from a
 *                               checkpoint of any layout; --llmc FILE: llmc);
 *                               an MoE model with its experts, routers and
 *                               selection bias (safetensors only: llm.c's
 *                               file cannot hold them, refused; --router for
 *                               a checkpoint that does not record it)
 *   import --from PATH --out DIR --global-batch N
 *                               DIR/step_00000000: the parameters, zero
 *                               optimizer state, step 0: `train --resume`
 *                               starts from it as from --init-from PATH
 *                               (an MoE directory: its bias in moe_bias.bin)
 *
 * Deliberately not here: resharding (any layout reads any checkpoint
 * directly) and editing a checkpoint's training state. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/io.h"
#include "model/model_file.h"
#include "model/safetensors_file.h"
#include "optim/noise_scale.h"
#include "optim/optimizer.h"
#include "train/moe_train.h"
#include "train/train_ckpt.h"

#define OPTION_COUNT(specs) ((int)(sizeof specs / sizeof specs[0]))

/* Moves the positional words (neither an option nor an option's value) out
 * of argv[1..] into pos, so options_parse sees only options. Returns their
 * number; dies if there are more than max_pos. */
static int take_positionals(const OptionSpec *specs, int count, int *argc, char **argv, char **pos, int max_pos,
                            const char *command) {
    int kept = 1, npos = 0;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        bool is_option = a[0] == '-' && a[1] != '\0';
        if (is_option) {
            argv[kept++] = argv[i];
            if (a[1] != '-' || strchr(a, '=')) continue;
            for (int s = 0; s < count; s++)
                if (strcmp(a + 2, specs[s].name) == 0 && specs[s].type != OPT_FLAG && i + 1 < *argc) {
                    argv[kept++] = argv[++i]; /* the option's value */
                    break;
                }
            continue;
        }
        if (npos == max_pos) bs_die("ckpt %s: unexpected argument '%s' (see --help)", command, a);
        pos[npos++] = argv[i];
    }
    *argc = kept;
    return npos;
}

/* A checkpoint given as DIR/step_N, or a checkpoint directory (its newest
 * complete checkpoint, skipping damaged ones with a warning). */
static void resolve_checkpoint(const char *arg, char *out, size_t n) {
    char manifest[4200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", arg);
    if (bs_path_exists(manifest)) snprintf(out, n, "%s", arg);
    else if (bs_is_dir(arg)) ckpt_resolve("latest", arg, out, n);
    else bs_die("%s is neither a checkpoint nor a directory of checkpoints", arg);
}

/* ---- inspect ---- */

static int compare_by_shard_offset(const void *a, const void *b) {
    const CkptFile *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Each model shard's files must tile its flat layout from 0 without gaps or
 * overlaps; a checkpoint of the whole model (one shard) must end at the
 * model's size. (The size of a tensor- or pipeline-parallel shard is not
 * checked here: the trainer maps those layouts.) False and a reason if not. */
static bool check_coverage(const CkptManifest *m, char *why, size_t why_size) {
    CkptFile *sorted = bs_malloc(sizeof(CkptFile) * (size_t)m->num_files);
    memcpy(sorted, m->files, sizeof(CkptFile) * (size_t)m->num_files);
    qsort(sorted, (size_t)m->num_files, sizeof(CkptFile), compare_by_shard_offset);
    uint64_t next = 0;
    bool ok = true;
    for (int i = 0; i < m->num_files && ok; i++) {
        if (i > 0 && sorted[i].shard != sorted[i - 1].shard) next = 0;
        if (sorted[i].offset != next) {
            snprintf(why, why_size, "%s: its range starts at %" PRIu64 " but the files before it in shard %d end at "
                     "%" PRIu64 " (%s)", sorted[i].name, sorted[i].offset, sorted[i].shard, next,
                     sorted[i].offset > next ? "a gap" : "an overlap");
            ok = false;
        }
        next = sorted[i].offset + sorted[i].count;
    }
    uint64_t total = gpt_num_params(&m->model);
    const int shards = m->tp * m->pp * m->ep; /* model shards: tensor x pipeline x expert parallel */
    if (ok && shards == 1 && next != total) {
        snprintf(why, why_size, "the files cover %" PRIu64 " of the model's %" PRIu64 " parameters", next, total);
        ok = false;
    }
    for (int s = 0; ok && s < shards; s++) {
        bool present = false;
        for (int i = 0; i < m->num_files; i++) present = present || m->files[i].shard == s;
        if (!present) {
            snprintf(why, why_size, "no file holds model shard %d of %d", s, shards);
            ok = false;
        }
    }
    free(sorted);
    return ok;
}

static void print_manifest(const char *dir, const CkptManifest *m) {
    const GPTConfig *g = &m->model;
    printf("checkpoint %s\n", dir);
    printf("  format       batchscale-checkpoint version %d\n", CKPT_FORMAT_VERSION);
    printf("  step         %ld (optimizer step %ld)\n", m->step, m->optimizer_step);
    printf("  consumed     %" PRIu64 " sequences, %" PRIu64 " tokens\n", m->seqs_consumed, m->tokens_consumed);
    printf("  model        L=%d H=%d C=%d T=%d V=%d (padded %d): %zu floats\n", g->num_layers, g->num_heads,
           g->channels, g->max_seq_len, g->vocab_size, g->padded_vocab_size, gpt_num_params(g));
    char stages[64] = "";
    if (m->virtual_stages > 1)
        snprintf(stages, sizeof stages, " (x %d virtual stages = %d model stages)", m->virtual_stages, m->pp);
    printf("  layout       world %d: dp %d x cp %d x tp %d x pp %d%s%s%s%s, ZeRO stage %d", m->world, m->dp, m->cp,
           m->tp, m->pp / m->virtual_stages, stages, m->pp_split[0] ? " (layers per stage " : "", m->pp_split,
           m->pp_split[0] ? ")" : "", m->zero);
    if (m->ep > 1) printf(", ep %d inside dp", m->ep);
    printf("\n");
    printf("  optimizer    %s\n", m->optimizer);
    printf("  schedule     batch %s, global batch %ld, adaptive batch reached %ld\n", m->batch_schedule,
           m->final_batch, m->current_batch);
    printf("  noise scale  ema decay %g, |G|^2 ema %g, tr(Sigma) ema %g, ema weight %g\n", m->noise_scale[0],
           m->noise_scale[1], m->noise_scale[2], m->noise_scale[3]);
    printf("  data         seed %" PRIu64 ", %s\n", m->data_seed, m->data_shuffle ? "shuffled" : "sequential");
    printf("  sample rng   %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 "\n", m->sample_rng.s[0],
           m->sample_rng.s[1], m->sample_rng.s[2], m->sample_rng.s[3]);
    printf("  files        %d\n", m->num_files);
}

/* Prints one checkpoint and verifies every file; true if all is well. */
static bool inspect_one(const char *dir) {
    CkptManifest *m = bs_malloc(sizeof *m), *one = bs_malloc(sizeof *one);
    char why[600];
    bool ok = ckpt_try_read_manifest(dir, m, why, sizeof why);
    if (!ok) {
        printf("checkpoint %s\n  CORRUPT: %s\n", dir, why);
        bs_error("%s", why);
    } else {
        print_manifest(dir, m);
        *one = *m;
        one->num_files = 1;
        for (int i = 0; i < m->num_files; i++) {
            const CkptFile *f = &m->files[i];
            one->files[0] = *f;
            bool file_ok = ckpt_verify(dir, one, why, sizeof why);
            printf("    %-16s shard %d [%" PRIu64 ", %" PRIu64 ")  %" PRIu64 " bytes  xxh64 %016" PRIx64 "  %s\n",
                   f->name, f->shard, f->offset, f->offset + f->count, f->bytes, f->xxh64, file_ok ? "ok" : "CORRUPT");
            if (!file_ok) bs_error("%s", why);
            ok = ok && file_ok;
        }
        if (!check_coverage(m, why, sizeof why)) {
            printf("  CORRUPT: %s\n", why);
            bs_error("checkpoint %s: %s", dir, why);
            ok = false;
        }
        const bool whole = m->tp * m->pp * m->ep == 1;
        const char *verdict = whole ? "verified: every checksum matches and the files cover the model once"
                                    : "verified: every checksum matches and each model shard's files tile its layout";
        printf("  %s\n", ok ? verdict : "NOT VALID");
    }
    free(one);
    free(m);
    return ok;
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every step_* of a checkpoint directory, oldest first; leftovers of
 * interrupted writes are listed as such. */
static bool inspect_all(const char *root) {
    DIR *d = opendir(root);
    if (!d) bs_die("ckpt inspect: %s is neither a checkpoint (no manifest.json) nor a readable directory", root);
    char *names[CKPT_MAX_FILES];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < CKPT_MAX_FILES) {
        long step;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &step, &tail) == 1) names[n++] = strdup(e->d_name);
        else if (strncmp(e->d_name, ".tmp-step_", 10) == 0)
            printf("%s/%s: an interrupted write, ignored (removed by the next checkpoint)\n", root, e->d_name);
    }
    closedir(d);
    if (n == 0) bs_die("ckpt inspect: no checkpoint (step_*) in %s", root);
    qsort(names, (size_t)n, sizeof names[0], compare_names);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        ok = inspect_one(dir) && ok;
        free(names[i]);
    }
    return ok;
}

static int ckpt_inspect(int argc, char **argv) {
    char *pos[1] = {NULL};
    int npos = take_positionals(NULL, 0, &argc, argv, pos, 1, "inspect");
    if (!options_parse(NULL, 0, argc, argv,
                       "usage: batchscale ckpt inspect DIR\n\nPrints a checkpoint's manifest and verifies every file "
                       "(DIR: a checkpoint, or a checkpoint directory: all of its checkpoints).\nExit status 1 if "
                       "anything is corrupt, with a line naming the file."))
        return 0;
    if (npos != 1) bs_die("ckpt inspect: give the checkpoint directory (batchscale ckpt inspect DIR)");
    char manifest[4200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", pos[0]);
    bool ok = bs_path_exists(manifest) || !bs_is_dir(pos[0]) ? inspect_one(pos[0]) : inspect_all(pos[0]);
    return ok ? 0 : 1;
}

/* ---- export ---- */

/* The whole model as an llm.c file, or as a Hugging Face directory (model.safetensors and config.json). */
static void write_export(const char *format, const char *out, const GPT *model) {
    if (strcmp(format, "llmc") == 0) {
        model_file_write(out, model);
        return;
    }
    bs_mkdir_p(out);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    safetensors_write(path, model);
    snprintf(path, sizeof path, "%s/config.json", out);
    safetensors_write_hf_config(path, &model->cfg);
}

/* An MoE checkpoint's router: the manifest's, or (one that predates its record) --router; a contradiction refused. */
static void settle_router(const char *dir, GPTConfig *model, const char *given) {
    MoeRouter router = MOE_ROUTER_SOFTMAX;
    if (*given && !gpt_is_moe(model))
        bs_die("ckpt export: --router is for an MoE checkpoint; %s holds a dense model", dir);
    if (*given && !moe_parse_router(given, &router))
        bs_die("ckpt export: --router must be softmax or sigmoid (got '%s')", given);
    if (!gpt_is_moe(model)) return;
    if (model->moe_router == CKPT_UNRECORDED && !*given)
        bs_die("ckpt export: %s does not record its MoE router (an older checkpoint): give --router softmax or "
               "sigmoid, as it was trained", dir);
    if (model->moe_router != CKPT_UNRECORDED && *given && (int)router != model->moe_router)
        bs_die("ckpt export: --router %s contradicts %s, trained with the %s router", given, dir,
               moe_router_name((MoeRouter)model->moe_router));
    if (model->moe_router == CKPT_UNRECORDED) model->moe_router = (int)router;
}

static int ckpt_export(int argc, char **argv) {
    const char *llmc = "", *format = "llmc", *out = "", *router = "";
    const OptionSpec specs[] = {
        {"format", OPT_STRING, &format, OPT_NO_RANGE, "FORMAT", "llmc (an llm.c fp32 model file) or safetensors (a "
         "Hugging Face GPT-2 directory: model.safetensors and config.json)", NULL, NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "PATH", "the file (llmc) or directory (safetensors) to write", NULL, NULL},
        {"llmc", OPT_STRING, &llmc, OPT_NO_RANGE, "FILE", "the same as --format llmc --out FILE", NULL, NULL},
        {"router", OPT_STRING, &router, OPT_NO_RANGE, "NAME", "an MoE checkpoint whose manifest predates the "
         "router's record: softmax or sigmoid, as it was trained", NULL, NULL},
    };
    char *pos[1] = {NULL};
    int npos = take_positionals(specs, OPTION_COUNT(specs), &argc, argv, pos, 1, "export");
    if (!options_parse(specs, OPTION_COUNT(specs), argc, argv,
                       "usage: batchscale ckpt export [--format llmc|safetensors] --out PATH DIR\n\nWrites a "
                       "checkpoint's parameters as an llm.c fp32 model file or a Hugging Face GPT-2 directory\n(DIR: "
                       "a checkpoint, or a checkpoint directory: its newest complete one)."))
        return 0;
    if (*llmc) format = "llmc", out = llmc;
    if (strcmp(format, "llmc") != 0 && strcmp(format, "safetensors") != 0)
        bs_die("ckpt export: --format must be llmc or safetensors (got '%s')", format);
    if (npos != 1) bs_die("ckpt export: give the checkpoint directory (batchscale ckpt export --out PATH DIR)");
    if (!*out) bs_die("ckpt export: --out PATH is required (the file or directory to write)");
    char dir[4096], why[600], unwritable[4400];
    if (!bs_check_writable(out, strcmp(format, "safetensors") == 0, unwritable, sizeof unwritable))
        bs_die("ckpt export: --out %s: %s", out, unwritable);
    resolve_checkpoint(pos[0], dir, sizeof dir);
    CkptManifest *m = bs_malloc(sizeof *m);
    ckpt_read_manifest(dir, m);
    if (!ckpt_verify(dir, m, why, sizeof why)) bs_die("%s", why);
    settle_router(dir, &m->model, router);
    if (m->model.lora_rank > 0)
        bs_die("ckpt export: %s holds LoRA adapters (rank %d) without their frozen base; resume it with train "
               "--init-from BASE --resume ... and export with --save-adapters DIR or --lora-merge --save-model FILE",
               dir, m->model.lora_rank);
    if (gpt_is_moe(&m->model) && strcmp(format, "llmc") == 0)
        bs_die("ckpt export: %s holds an MoE model (%d experts): an llm.c file holds a dense GPT-2 and cannot hold "
               "its experts and routers; use --format safetensors", dir, m->model.experts);
    GPT model;
    gpt_create_with(&model, &m->model, GPT_ALLOC_PARAMS);
    train_ckpt_read(dir, m, &model.cfg, 0, model.num_params, model.params, NULL); /* any layout */
    if (gpt_is_moe(&m->model)) moe_bias_file_load(dir, &model);
    write_export(format, out, &model);
    printf("exported %s (step %ld) to %s (%s)\n", dir, m->step, out, format);
    gpt_free(&model);
    free(m);
    return 0;
}

/* ---- import ---- */

static int ckpt_import(int argc, char **argv) {
    const char *llmc = "", *out = "", *optimizer = "adamw", *batch_schedule = "constant", *data_order = "shuffled";
    const char *tokenizer = "byte", *from = "";
    int global_batch = 0, heads = 0;
    long long seed = 1337;
    const OptionSpec specs[] = {
        {"from", OPT_STRING, &from, OPT_NO_RANGE, "PATH", "the model to read: an llm.c file, a .safetensors file or "
         "a Hugging Face directory holding model.safetensors", NULL, NULL},
        {"llmc", OPT_STRING, &llmc, OPT_NO_RANGE, "FILE", "the same as --from FILE", NULL, NULL},
        {"heads", OPT_INT, &heads, 1, 1 << 16, "N", "attention heads, where a safetensors file does not say", NULL, NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "DIR", "checkpoint directory to create step_00000000 in", NULL, NULL},
        {"global-batch", OPT_INT, &global_batch, 1, 1 << 30, "SEQS",
         "the --global-batch of the run that resumes it (required)", NULL, NULL},
        {"optimizer", OPT_STRING, &optimizer, OPT_NO_RANGE, "NAME", "the --optimizer of that run", NULL, NULL},
        {"batch-schedule", OPT_STRING, &batch_schedule, OPT_NO_RANGE, "SPEC", "the --batch-schedule of that run", NULL, NULL},
        {"seed", OPT_LONG, &seed, 0, 9.2e18, "N", "the --seed of that run (data order and sampling)", NULL, NULL},
        {"data-order", OPT_STRING, &data_order, OPT_NO_RANGE, "ORDER", "the --data-order of that run", NULL, NULL},
        {"tokenizer", OPT_STRING, &tokenizer, OPT_NO_RANGE, "SPEC", "tokenizer recorded for sample: byte, gpt2 or a file", NULL, NULL},
    };
    if (!options_parse(specs, OPTION_COUNT(specs), argc, argv,
                       "usage: batchscale ckpt import --from PATH --out DIR --global-batch N\n\nMakes a step-0 "
                       "checkpoint (zero optimizer state) from a model file; `train --resume` continues\nfrom "
                       "it as `train --init-from PATH` would start. The run's flags below must match the resuming "
                       "run's."))
        return 0;
    if (*llmc) from = llmc;
    if (!*from || !*out) bs_die("ckpt import: --from PATH and --out DIR are required");
    if (global_batch == 0) bs_die("ckpt import: --global-batch is required (train --resume checks it)");
    char unwritable[4400];
    if (!bs_check_writable(out, true, unwritable, sizeof unwritable)) bs_die("ckpt import: --out %s: %s", out, unwritable);
    OptimizerKind kind;
    char why[256];
    if (!optimizer_kind_parse(optimizer, &kind, why, sizeof why)) bs_die("%s", why);
    if (strcmp(data_order, "shuffled") != 0 && strcmp(data_order, "sequential") != 0)
        bs_die("--data-order must be 'shuffled' or 'sequential' (got '%s')", data_order);
    GPTConfig cfg = {.num_heads = heads};
    model_file_read_config(from, &cfg);
    if (heads > 0 && cfg.num_heads != heads)
        bs_die("ckpt import: --heads %d contradicts %s, whose n_head is %d", heads, from, cfg.num_heads);
    GPT model;
    gpt_create_with(&model, &cfg, GPT_ALLOC_PARAMS);
    model_file_read_params(from, &model);

    CkptManifest *m = bs_calloc(1, sizeof *m);
    if (strlen(batch_schedule) >= sizeof m->batch_schedule || strlen(tokenizer) >= sizeof m->tokenizer)
        bs_die("--batch-schedule or --tokenizer is too long for a checkpoint manifest");
    char tmp[4096];
    ckpt_tmp_dir(tmp, sizeof tmp, out, 0);
    bs_remove_tree(tmp);
    bs_mkdir_p(tmp);
    ckpt_write_rank_file(tmp, 0, 0, model.num_params, model.params, NULL, &m->files[0]);
    if (gpt_is_moe(&model.cfg)) moe_bias_file_write(tmp, cfg.num_layers, cfg.experts, model.moe_bias);
    m->num_files = 1;
    m->model = model.cfg;
    rng_seed(&m->sample_rng, (uint64_t)seed ^ 0x5ca1ab1eULL); /* as train seeds its sampler (train/trainer.c) */
    m->data_seed = (uint64_t)seed;
    m->data_shuffle = strcmp(data_order, "shuffled") == 0;
    m->world = m->dp = m->tp = m->pp = m->virtual_stages = m->cp = 1;
    snprintf(m->optimizer, sizeof m->optimizer, "%s", optimizer_kind_name(kind));
    snprintf(m->batch_schedule, sizeof m->batch_schedule, "%s", batch_schedule);
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s", tokenizer);
    m->final_batch = global_batch;
    NoiseScale fresh;
    noise_scale_init(&fresh, 0.99);
    double noise[4] = {fresh.ema_decay, fresh.grad_sq_ema, fresh.trace_ema, fresh.ema_weight};
    memcpy(m->noise_scale, noise, sizeof noise);
    ckpt_commit(out, tmp, m, 0);
    char dir[4096];
    ckpt_step_dir(dir, sizeof dir, out, 0);
    printf("imported %s to %s (%zu floats, zero optimizer state, step 0)\n", from, dir, model.num_params);
    free(m);
    gpt_free(&model);
    return 0;
}

/* ---- dispatch ---- */

int cmd_ckpt(int argc, char **argv) {
    static const char *const usage =
        "usage: batchscale ckpt <inspect|export|import> [options]   (batchscale ckpt <sub> --help)\n\n"
        "  inspect DIR                  print a checkpoint's manifest and verify every checksum\n"
        "  export [--format llmc|safetensors] --out PATH DIR\n"
        "                               write a checkpoint's parameters as an llm.c file or a Hugging Face directory\n"
        "  import --from PATH --out DIR --global-batch N\n"
        "                               make a step-0 checkpoint that train --resume accepts\n";
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "inspect") == 0) return ckpt_inspect(argc - 1, argv + 1);
    if (strcmp(argv[1], "export") == 0) return ckpt_export(argc - 1, argv + 1);
    if (strcmp(argv[1], "import") == 0) return ckpt_import(argc - 1, argv + 1);
    bs_die("ckpt: unknown subcommand '%s' (inspect, export or import)", argv[1]);
}
