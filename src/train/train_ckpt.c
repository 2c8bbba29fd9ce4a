/* train_ckpt.c: checkpoints of the trainer (see train_ckpt.h).
 *
 * Every rank writes one file per model chunk: its data-parallel shard of the
 * chunk's flat layout (parameters and optimizer state), tagged with the
 * model shard (tp_index + model stage x tp; a chunk is a model stage of its
 * own). Under expert parallelism a file holds the rank's part of its ep
 * shard's layout under the expert-data-parallel group's partition; at ZeRO
 * 1-2 the optimizer state of that part is gathered from the ranks owning
 * its pieces first (dense ones over the data group, expert ones over the
 * expert group), so the files look alike at every ZeRO stage. On resume
 * each rank needs values for its own local ranges: with the same model
 * split, it reads its shard's ranges
 * directly (whatever the data-parallel size or ZeRO stage was); with another
 * split (tensor or pipeline), each local run is mapped to the whole model's
 * layout and from there to whichever old shard holds it. */
#include "train/train_ckpt.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_extra.h"
#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"
#include "core/range.h"
#include "core/timer.h"

/* The manifest of the state as it is now (rank 0 fills in the files at
 * commit). Its pipeline split counts model stages: pipeline ranks x
 * virtual stages, each a model shard of its own. */
static CkptManifest *snapshot_manifest(const Trainer *tr) {
    const Grid *g = engine_grid(tr->engine);
    const int v = engine_num_chunks(tr->engine), stages = engine_virtual_stages(tr->engine);
    CkptManifest *m = bs_calloc(1, sizeof *m);
    m->num_files = comm_size(tr->world) * v;
    m->step = tr->step;
    m->seqs_consumed = tr->seqs_consumed;
    m->tokens_consumed = tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len;
    m->model = tr->model;
    m->lora_base_hash = engine_base_hash(tr->engine);
    m->sample_rng = tr->sample_rng;
    m->data_seed = (uint64_t)tr->cfg.model.seed;
    m->data_shuffle = tr->train_data.shuffle;
    m->world = comm_size(tr->world);
    m->dp = g->dp;
    m->cp = g->cp;
    m->ep = g->ep;
    m->tp = g->tp;
    m->pp = stages;
    m->virtual_stages = v;
    int *layers = bs_malloc(sizeof(int) * (size_t)stages);
    for (int vs = 0, first; vs < stages; vs++) engine_stage_layers(tr->engine, vs, &first, &layers[vs]);
    grid_format_split(layers, stages, m->pp_split, sizeof m->pp_split);
    free(layers);
    m->zero = tr->cfg.parallel.zero;
    snprintf(m->optimizer, sizeof m->optimizer, "%s", optimizer_kind_name(tr->cfg.optim.kind));
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s", tr->tok ? tokenizer_spec(tr->tok) : "");
    m->optimizer_step = engine_optimizer_step(tr->engine);
    snprintf(m->batch_schedule, sizeof m->batch_schedule, "%s", tr->cfg.batch.schedule);
    m->final_batch = tr->cfg.batch.global_batch;
    m->current_batch = tr->batch.adaptive ? tr->batch.adaptive_batch : 0;
    FEATURES_CALL(&tr->features, pack, &tr->cx, m);
    return m;
}

/* bs_die while a checkpoint is being written (a full disk): its temporary
 * directory goes, so that it does not hold the space a resumed job needs. */
static void remove_unfinished_write(void *tmp_dir) { bs_remove_tree(tmp_dir); }

/* After every rank's files are complete: rank 0 writes the manifest and
 * makes the checkpoint visible. Collective. */
static void commit(Trainer *tr, const char *tmp, const AsyncCkpt *a, CkptManifest *m) {
    CkptFile mine[TRAIN_MAX_CHUNKS];
    for (int c = 0; c < a->num_pieces; c++) mine[c] = a->pieces[c].file;
    comm_gather_bytes(tr->world, mine, sizeof(CkptFile) * (size_t)a->num_pieces, m ? m->files : NULL, 0);
    if (m) {
        ckpt_commit(tr->ckpt_dir, tmp, m, tr->cfg.output.keep_last);
        if (!tr->cfg.output.quiet) {
            char dir[4096];
            ckpt_step_dir(dir, sizeof dir, tr->ckpt_dir, m->step);
            progress_line(&tr->progress, "checkpoint written: %s", dir);
        }
    }
    comm_barrier(tr->world);
    bs_set_fatal_cleanup(NULL, NULL);
}

/* One file per chunk (named by rank x chunks + chunk), and the rank's error-feedback residuals. */
static void write_pieces(AsyncCkpt *a) {
    for (int c = 0; c < a->num_pieces; c++) {
        CkptPiece *p = &a->pieces[c];
        const float *state[CKPT_STATE_ARRAYS] = {p->state[0], p->state[1]};
        ckpt_write_rank_file(a->tmp, a->rank * a->num_pieces + c, p->offset, p->count, p->params, state, &p->file);
        p->file.shard = p->shard;
    }
    if (a->num_extra > 0) ckpt_write_extra(a->tmp, a->rank, a->extra_label, a->extra, a->num_extra);
}

static void *async_writer(void *arg) {
    AsyncCkpt *a = arg;
    write_pieces(a);
    atomic_store(&a->done, 1);
    return NULL;
}

/* Waits for a background write (if any) and commits it. Collective. */
void train_save_finish(Trainer *tr) {
    AsyncCkpt *a = &tr->async;
    if (!a->pending) return;
    pthread_join(a->thread, NULL);
    commit(tr, a->tmp, a, a->manifest);
    free(a->manifest);
    a->manifest = NULL;
    a->pending = false;
}

void train_save_poll(Trainer *tr) {
    AsyncCkpt *a = &tr->async;
    if (!a->pending) return;
    double not_done = atomic_load(&a->done) ? 0 : 1;
    comm_allreduce_max_double(tr->world, &not_done, 1); /* every rank agrees on when to commit */
    if (not_done == 0) train_save_finish(tr);
}

/* This rank's extra state (the features' arrays: error-feedback residuals, DiLoCo's worker state) and the
 * label it is valid for with `workers` data-parallel ranks. */
static int rank_arrays(Trainer *tr, int workers, CkptExtraArray *arrays, char *label, size_t label_size) {
    return features_arrays(&tr->features, &tr->cx, workers, arrays, label, label_size);
}

/* Expert parallelism at ZeRO 1-2: the file's range holds dense state that
 * other ranks of the data group own and expert state of this rank's expert
 * group; gathered from the owners (collective), kept until written. */
static void gather_piece_state(EngineChunk *ch, CkptPiece *p) {
    for (int k = 0; k < CKPT_STATE_ARRAYS; k++) {
        p->state[k] = NULL;
        if (k >= OPTIMIZER_MAX_STATE || !ch->state[k]) continue;
        p->gathered[k] = bs_malloc((p->count ? p->count : 1) * sizeof(float));
        engine_chunk_gather_state(ch, ch->state[k], p->offset, p->count, p->gathered[k]);
        p->state[k] = p->gathered[k];
    }
}

static void release_gathered(AsyncCkpt *a) {
    for (int c = 0; c < a->num_pieces; c++)
        for (int k = 0; k < CKPT_STATE_ARRAYS; k++) {
            free(a->pieces[c].gathered[k]);
            a->pieces[c].gathered[k] = NULL;
        }
}

/* Chunk c's file: its data-parallel shard of parameters and optimizer state
 * (stage 0 updates everything; its file holds the shard). */
static void describe_piece(Trainer *tr, int c, CkptPiece *p) {
    const Grid *g = engine_grid(tr->engine);
    EngineChunk *ch = engine_chunk(tr->engine, c);
    engine_chunk_shard_range(ch, &p->offset, &p->count);
    if (g->ep > 1) /* each ep rank's layout (its experts) split over its expert-data-parallel group */
        comm_partition(g->edp_group, ch->model.num_params, comm_rank(g->edp_group), &p->offset, &p->count);
    p->params = engine_chunk_params_at(ch, p->offset, p->count);
    p->shard = g->tp_index + ch->virtual_stage * g->tp + g->ep_index * g->tp * engine_virtual_stages(tr->engine);
    if (engine_chunk_experts_sharded_apart(ch)) {
        gather_piece_state(ch, p);
        return;
    }
    size_t at = p->offset - ch->update_offset;
    for (int k = 0; k < CKPT_STATE_ARRAYS; k++)
        p->state[k] = k < OPTIMIZER_MAX_STATE && ch->state[k] ? ch->state[k] + at : NULL;
}

/* --async-ckpt: the pieces and residuals copied aside (the only stall). */
static void copy_aside(AsyncCkpt *a) {
    for (int c = 0; c < a->num_pieces; c++) {
        CkptPiece *p = &a->pieces[c];
        if (p->capacity < p->count) {
            for (int k = 0; k < 1 + CKPT_STATE_ARRAYS; k++) free(p->buffers[k]);
            for (int k = 0; k < 1 + CKPT_STATE_ARRAYS; k++)
                p->buffers[k] = bs_malloc((p->count ? p->count : 1) * sizeof(float));
            p->capacity = p->count;
        }
        memcpy(p->buffers[0], p->params, p->count * sizeof(float));
        p->params = p->buffers[0];
        for (int k = 0; k < CKPT_STATE_ARRAYS; k++)
            if (p->state[k]) p->state[k] = memcpy(p->buffers[1 + k], p->state[k], p->count * sizeof(float));
    }
    size_t extra_floats = 0;
    for (int i = 0; i < a->num_extra; i++) extra_floats += a->extra[i].count;
    if (a->extra_capacity < extra_floats) {
        free(a->extra_buffer);
        a->extra_buffer = bs_malloc(extra_floats * sizeof(float));
        a->extra_capacity = extra_floats;
    }
    for (int i = 0, at = 0; i < a->num_extra; at += (int)a->extra[i].count, i++) {
        memcpy(a->extra_buffer + at, a->extra[i].data, a->extra[i].count * sizeof(float));
        a->extra[i].data = a->extra_buffer + at;
    }
}

double train_save(Trainer *tr) {
    double t0 = bs_now();
    train_save_finish(tr); /* one checkpoint in flight at a time */
    AsyncCkpt *a = &tr->async;
    ckpt_tmp_dir(a->tmp, sizeof a->tmp, tr->ckpt_dir, tr->step);
    if (tr->rank == 0) {
        ckpt_remove_unfinished(tr->ckpt_dir); /* a failed or crashed write's space is needed now */
        bs_mkdir_p(a->tmp);
    }
    bs_set_fatal_cleanup(remove_unfinished_write, a->tmp); /* until committed (commit) */
    comm_barrier(tr->world);
    FEATURES_CALL(&tr->features, save_files, &tr->cx, a->tmp);
    a->rank = tr->rank;
    a->num_pieces = engine_num_chunks(tr->engine);
    FEATURES_CALL(&tr->features, before_save, &tr->cx); /* DiLoCo: the global weights in the parameters */
    for (int c = 0; c < a->num_pieces; c++) describe_piece(tr, c, &a->pieces[c]);
    a->num_extra = rank_arrays(tr, tr->dp_size, a->extra, a->extra_label, sizeof a->extra_label);
    a->manifest = tr->rank == 0 ? snapshot_manifest(tr) : NULL;
    if (!tr->cfg.output.async_ckpt) {
        write_pieces(a);
        release_gathered(a);
        commit(tr, a->tmp, a, a->manifest);
        FEATURES_CALL(&tr->features, after_save, &tr->cx);
        free(a->manifest);
        a->manifest = NULL;
        return bs_now() - t0;
    }
    copy_aside(a); /* written from a thread while training goes on */
    release_gathered(a);
    FEATURES_CALL(&tr->features, after_save, &tr->cx);
    atomic_store(&a->done, 0);
    if (pthread_create(&a->thread, NULL, async_writer, a) != 0) bs_die("cannot start the checkpoint writer thread");
    a->pending = true;
    return bs_now() - t0;
}

void train_save_free(Trainer *tr) {
    for (int c = 0; c < TRAIN_MAX_CHUNKS; c++)
        for (int k = 0; k < 1 + CKPT_STATE_ARRAYS; k++) free(tr->async.pieces[c].buffers[k]);
    free(tr->async.extra_buffer);
}

/* The checkpoint's model split: the shard config of old coordinates. */
static GPTConfig old_shard(const CkptManifest *m, const GPTConfig *whole, int tp_index, int pp_index, int ep_index) {
    int *layers = bs_malloc(sizeof(int) * (size_t)m->pp);
    char why[768];
    if (!grid_parse_split(m->pp_split, whole->num_layers, m->pp, layers, why, sizeof why)) /* as written, "" = even */
        bs_die("checkpoint manifest's pp_split %s", why);
    int first = 0;
    for (int s = 0; s < pp_index; s++) first += layers[s];
    int stage_layers = layers[pp_index];
    free(layers);
    GPTConfig c = gpt_logical_config(whole);
    if (!gpt_set_shard(&c, m->tp, tp_index, m->pp, pp_index, first, stage_layers, why, sizeof why))
        bs_die("checkpoint layout cannot be read: %s", why);
    if (m->ep > 1) c.ep_size = m->ep, c.ep_rank = ep_index;
    return c;
}

typedef struct {
    size_t logical, count, local;
    int shard;
} OldRun;

static int by_logical(const void *a, const void *b) {
    size_t x = ((const OldRun *)a)->logical, y = ((const OldRun *)b)->logical;
    return x < y ? -1 : x > y;
}

/* Every logical element's primary home in the checkpoint, sorted by logical offset. */
static OldRun *old_runs(const CkptManifest *m, const GPTConfig *whole, int *count) {
    int n = 0, cap = 0;
    OldRun *all = NULL;
    for (int shard = 0; shard < m->tp * m->pp * m->ep; shard++) { /* shard = tp + pp tp + ep tp pp */
        GPTConfig c = old_shard(m, whole, shard % m->tp, shard / m->tp % m->pp, shard / (m->tp * m->pp));
        int k;
        ShardRun *runs = gpt_shard_runs_alloc(&c, &k);
        for (int i = 0; i < k; i++) {
            if (!runs[i].primary) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                all = realloc(all, sizeof(OldRun) * (size_t)cap);
                if (!all) bs_die("out of memory reading a checkpoint");
            }
            all[n++] = (OldRun){runs[i].logical, runs[i].count, runs[i].local, shard};
        }
        free(runs);
    }
    qsort(all, (size_t)n, sizeof(OldRun), by_logical);
    *count = n;
    return all;
}

/* The old run holding logical element `logical` (old sorted by logical
 * offset), or NULL if none does. */
static const OldRun *old_run_holding(const OldRun *old, int nold, size_t logical) {
    if (nold == 0) return NULL;
    int lo = 0, hi = nold - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (old[mid].logical <= logical) lo = mid;
        else hi = mid - 1;
    }
    return range_has(range_make(old[lo].logical, old[lo].count), logical) ? &old[lo] : NULL;
}

void train_ckpt_read(const char *dir, const CkptManifest *m, const GPTConfig *cfg, size_t offset, size_t count,
                     float *params, float *const *state) {
    const GPTConfig whole = gpt_logical_config(cfg);
    const int tp = gpt_tp_size(cfg), pp = cfg->pp_size > 0 ? cfg->pp_size : 1;
    const int tp_index = gpt_tp_rank(cfg), pp_index = cfg->pp_size > 0 ? cfg->pp_rank : 0;
    const int ep = gpt_ep_size(cfg), ep_index = ep > 1 ? cfg->ep_rank : 0;
    bool same_split = m->tp == tp && m->pp == pp && m->ep == ep;
    if (same_split) {
        GPTConfig old = old_shard(m, &whole, tp_index, pp_index, ep_index);
        same_split = gpt_first_layer(&old) == gpt_first_layer(cfg) && gpt_stage_layers(&old) == gpt_stage_layers(cfg);
    }
    if (same_split) { /* the same model shard: its files hold these local ranges as they are */
        ckpt_read_shard_range(dir, m, tp_index + pp_index * tp + ep_index * tp * pp, offset, count, params, state);
        return;
    }
    int nold;
    OldRun *old = old_runs(m, &whole, &nold);
    int n;
    ShardRun *runs = gpt_shard_runs_alloc(cfg, &n);
    const Range wanted = range_make(offset, count);
    float *dst_state[CKPT_STATE_ARRAYS];
    for (int i = 0; i < n; i++) {
        const Range run = range_make(runs[i].local, runs[i].count), part = range_intersect(run, wanted);
        for (size_t a = part.offset; a < range_end(part);) {
            size_t logical = runs[i].logical + (a - run.offset);
            const OldRun *o = old_run_holding(old, nold, logical);
            if (!o) bs_die("checkpoint %s does not hold parameter %zu of the model", dir, logical);
            size_t take = o->logical + o->count - logical;
            if (take > range_end(part) - a) take = range_end(part) - a;
            size_t at = a - wanted.offset;
            for (int k = 0; k < CKPT_STATE_ARRAYS; k++) dst_state[k] = state && state[k] ? state[k] + at : NULL;
            ckpt_read_shard_range(dir, m, o->shard, o->local + (logical - o->logical), take, params ? params + at : NULL,
                                  state ? dst_state : NULL);
            a += take;
        }
    }
    free(runs);
    free(old);
}

/* The features' arrays (error-feedback residuals, DiLoCo's worker state) belong to one rank of one layout and
 * codec: read back when the layout and codec are the same, else they start afresh (the run continues
 * correctly, losing what was not yet sent) and the lowest failing rank says so once. */

/* After an elastic shrink (DiLoCo): each rank from the checkpoint rank a feature names. True if all did. */
static bool resume_survivor(Trainer *tr, const char *dir, const CkptManifest *m) {
    int source = features_survivor_source(&tr->features, &tr->cx, m);
    double failed = source < 0;
    comm_allreduce_max_double(tr->world, &failed, 1);
    if (failed > 0) return false;
    CkptExtraArray extra[FEATURE_ARRAYS_MAX];
    char label[CKPT_EXTRA_LABEL], why[512] = "";
    int n = rank_arrays(tr, m->dp, extra, label, sizeof label);
    failed = ckpt_read_extra(dir, source, label, extra, n, why, sizeof why) ? 0 : 1;
    comm_allreduce_max_double(tr->world, &failed, 1);
    if (failed > 0) return false;
    FEATURES_CALL(&tr->features, after_resume, &tr->cx, true);
    return true;
}

static void resume_arrays(Trainer *tr, const char *dir, const CkptManifest *m) {
    CkptExtraArray extra[FEATURE_ARRAYS_MAX];
    char label[CKPT_EXTRA_LABEL], why[512] = "";
    int n = rank_arrays(tr, tr->dp_size, extra, label, sizeof label);
    bool ok = n == 0 || ckpt_read_extra(dir, tr->rank, label, extra, n, why, sizeof why);
    int world = comm_size(tr->world);
    double first_failed = ok ? 0 : world - tr->rank; /* max: the lowest failing rank */
    comm_allreduce_max_double(tr->world, &first_failed, 1); /* all ranks restore, or none (so all start equal) */
    if (first_failed > 0) FEATURES_CALL(&tr->features, reset_arrays, &tr->cx);
    if (first_failed > 0 && resume_survivor(tr, dir, m)) return;
    if (first_failed > 0 && world - (int)first_failed == tr->rank)
        bs_warn("%s: %s", features_fresh_arrays_note(&tr->features), why);
    FEATURES_CALL(&tr->features, after_resume, &tr->cx, first_failed == 0);
}

/* A chunk's parameters (all it holds, or its ZeRO-3 shard) and optimizer state. */
static void read_chunk(EngineChunk *ch, const char *dir, const CkptManifest *m) {
    size_t total = ch->model.num_params, off, count;
    float *params = engine_chunk_params_at(ch, 0, total);
    if (params) {
        train_ckpt_read(dir, m, &ch->model.cfg, 0, total, params, NULL);
    } else {
        engine_chunk_shard_range(ch, &off, &count);
        train_ckpt_read(dir, m, &ch->model.cfg, off, count, engine_chunk_params_at(ch, off, count), NULL);
    }
    for (int k = 0; k < engine_chunk_num_pieces(ch); k++) { /* the optimizer state of each piece this rank updates */
        const DPPiece piece = engine_chunk_piece(ch, k);
        float *state[CKPT_STATE_ARRAYS];
        for (int a = 0; a < CKPT_STATE_ARRAYS; a++)
            state[a] = a < OPTIMIZER_MAX_STATE && ch->state[a] ? ch->state[a] + piece.packed : NULL;
        train_ckpt_read(dir, m, &ch->model.cfg, piece.offset, piece.count, NULL, state);
    }
}

/* The checkpoint's batch schedule must be the run's, unless --resume-new-batch continues a constant batch at
 * another constant batch (the step counter, the data position and the optimizer state carry over: the run is
 * the one a step schedule switching at the checkpoint's tokens would have made). */
static void check_resume_batch(const Trainer *tr, const char *dir, const CkptManifest *m) {
    const bool same = strcmp(m->batch_schedule, tr->cfg.batch.schedule) == 0 && m->final_batch == tr->cfg.batch.global_batch;
    if (same) return;
    if (!tr->cfg.output.resume_new_batch)
        bs_die_about("batch_schedule global_batch resume_new_batch",
                     "checkpoint %s was written with the batch schedule %s at a global batch of %ld; resume with the "
                     "same (got %s, %d)%s", dir, m->batch_schedule, m->final_batch, tr->cfg.batch.schedule,
                     tr->cfg.batch.global_batch,
                     strcmp(m->batch_schedule, "constant") == 0 && strcmp(tr->cfg.batch.schedule, "constant") == 0
                         ? ", or continue the constant batch at the new one" : "");
    if (strcmp(m->batch_schedule, "constant") != 0)
        bs_die_about("resume_new_batch batch_schedule", "continuing at a new batch: checkpoint %s was written with "
                     "the batch schedule %s; only a constant batch continues at another", dir, m->batch_schedule);
    if (tr->rank == 0 && !tr->cfg.output.quiet)
        printf("continuing checkpoint %s (batch %ld) at batch %d\n", dir, m->final_batch, tr->cfg.batch.global_batch);
}

/* One warning line: the data order of a resumed run is not the checkpoint's. */
static void warn_data_order(const char *dir) {
    char line[4400];
    bs_reason(line, sizeof line, "seed data_order", "resuming %s with another seed or data order than it was written "
              "with: the data order changes", dir);
    bs_warn("%s", line);
}

/* The combine weights are part of the model's function: a checkpoint resumes with the gates it was trained with. */
static void check_resume_gates(const char *dir, const GPTConfig *had, const GPTConfig *want) {
    const MoeConfig a = gpt_moe_config(had), b = gpt_moe_config(want);
    if (a.gates != b.gates || a.routed_scale != b.routed_scale)
        bs_die_about("moe_gates moe_routed_scale", "checkpoint %s was written with %s gates and a routed scale of %g, "
                     "not %s gates and %g; resume with the same", dir, moe_gates_name(a.gates), a.routed_scale,
                     moe_gates_name(b.gates), b.routed_scale);
}

void train_resume(Trainer *tr) {
    char dir[4096] = "";
    if (tr->rank == 0) ckpt_resolve(tr->cfg.output.resume, tr->ckpt_dir, dir, sizeof dir);
    comm_broadcast_bytes(tr->world, dir, sizeof dir, 0);
    CkptManifest *m = bs_malloc(sizeof *m);
    ckpt_read_manifest(dir, m);
    char why[600];
    if (tr->rank == 0 && !ckpt_verify(dir, m, why, sizeof why)) bs_die("cannot resume: %s", why);
    const GPTConfig *a = &m->model, *b = &tr->model;
    if (a->num_layers != b->num_layers || a->num_heads != b->num_heads || a->channels != b->channels ||
        a->max_seq_len != b->max_seq_len || a->vocab_size != b->vocab_size)
        bs_die("checkpoint %s holds a model of shape L=%d H=%d C=%d T=%d V=%d but the flags ask for L=%d H=%d C=%d "
               "T=%d V=%d; pass the checkpoint's shape", dir, a->num_layers, a->num_heads, a->channels,
               a->max_seq_len, a->vocab_size, b->num_layers, b->num_heads, b->channels, b->max_seq_len, b->vocab_size);
    if (a->lora_rank != b->lora_rank || (a->lora_rank > 0 && a->lora_targets != b->lora_targets)) {
        char had[64] = "none", want[64] = "none";
        if (a->lora_rank) lora_format_targets(a->lora_targets, had, sizeof had);
        if (b->lora_rank) lora_format_targets(b->lora_targets, want, sizeof want);
        bs_die_about("lora_rank lora_targets", "checkpoint %s was written with LoRA rank %d on %s, not rank %d on %s; "
                     "resume with the same (a LoRA checkpoint holds the adapters, the base comes from the initial "
                     "model)", dir, a->lora_rank, had, b->lora_rank, want);
    }
    if (a->lora_rank > 0 && m->lora_base_hash != 0 && m->lora_base_hash != engine_base_hash(tr->engine))
        bs_die_about("init_from", "checkpoint %s trained its adapters over a frozen base of hash %016" PRIx64 ", but "
                     "the initial model %s gives %016" PRIx64 "; resume over the same base", dir, m->lora_base_hash,
               tr->cfg.model.init_from && *tr->cfg.model.init_from ? tr->cfg.model.init_from : "(none: seeded)", engine_base_hash(tr->engine));
    const int every_a = a->moe_every > 1 ? a->moe_every : 1, every_b = b->moe_every > 1 ? b->moe_every : 1;
    if (a->experts != b->experts ||
        (gpt_is_moe(a) && (a->moe_top_k != b->moe_top_k || a->moe_ffn != b->moe_ffn || every_a != every_b)))
        bs_die_about("experts top_k moe_ffn moe_every", "checkpoint %s holds a model of %d experts (top-%d, hidden "
                     "width %d, every %d-th layer), not %d experts (top-%d, hidden width %d, every %d-th layer); resume "
                     "with the same", dir, a->experts, a->moe_top_k, a->moe_ffn, every_a, b->experts, b->moe_top_k,
                     b->moe_ffn, every_b);
    if (gpt_is_moe(a)) check_resume_gates(dir, a, b);
    if (gpt_is_moe(a) && a->moe_router != CKPT_UNRECORDED && a->moe_router != b->moe_router)
        bs_die_about("router", "checkpoint %s was trained with the %s router, not %s; resume with the same", dir,
                     moe_router_name((MoeRouter)a->moe_router), moe_router_name((MoeRouter)b->moe_router));
    const char *opt = optimizer_kind_name(tr->cfg.optim.kind);
    if (strcmp(m->optimizer, opt) != 0)
        bs_die_about("optimizer", "checkpoint %s was written with the %s optimizer, not %s; its optimizer state does "
                     "not carry over", dir, m->optimizer, opt);
    check_resume_batch(tr, dir, m);
    for (int c = 0; c < engine_num_chunks(tr->engine); c++) read_chunk(engine_chunk(tr->engine, c), dir, m);
    engine_share_output_weights(tr->engine);
    resume_arrays(tr, dir, m);
    FEATURES_CALL(&tr->features, resume_files, &tr->cx, dir);
    const Grid *g = engine_grid(tr->engine);
    tr->resharded = m->tp != g->tp || m->pp != engine_virtual_stages(tr->engine) || m->dp != g->dp || m->cp != g->cp ||
                    m->ep != g->ep ||
                    m->zero != tr->cfg.parallel.zero;
    tr->step = m->step;
    tr->seqs_consumed = m->seqs_consumed;
    engine_set_optimizer_step(tr->engine, m->optimizer_step);
    tr->sample_rng = m->sample_rng;
    if (tr->batch.adaptive) tr->batch.adaptive_batch = m->current_batch;
    FEATURES_CALL(&tr->features, unpack, &tr->cx, m);
    if (tr->rank == 0 && !tr->cfg.output.resume_new_batch && (m->data_seed != (uint64_t)tr->cfg.model.seed || m->data_shuffle != tr->train_data.shuffle))
        warn_data_order(dir);
    if (tr->rank == 0 && !tr->cfg.output.quiet)
        printf("resumed from %s at step %ld (written by %d ranks: tp %d x cp %d x pp %d x dp %d%s, ZeRO %d)\n", dir,
               tr->step, m->world, m->tp, m->cp, m->pp / m->virtual_stages, m->dp,
               m->virtual_stages > 1 ? " with virtual stages" : "", m->zero);
    free(m);
}
