/* train_ckpt.c: checkpoints of the trainer (see train_ckpt.h). */
#include "train/train_ckpt.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/error.h"
#include "core/io.h"

void train_save(Trainer *tr) {
    char tmp[4096];
    ckpt_tmp_dir(tmp, sizeof tmp, tr->ckpt_dir, tr->step);
    if (tr->rank == 0) {
        bs_remove_tree(tmp);
        bs_mkdir_p(tmp);
    }
    comm_barrier(tr->dpc);
    size_t off, count;
    dp_shard_range(tr->dp, &off, &count);
    size_t at = off - tr->update_offset; /* stage 0 updates everything; its file holds the shard */
    const float *state[CKPT_STATE_ARRAYS] = {NULL, NULL};
    for (int k = 0; k < CKPT_STATE_ARRAYS && k < OPTIMIZER_MAX_STATE; k++)
        if (tr->state[k]) state[k] = tr->state[k] + at;
    CkptFile mine;
    ckpt_write_rank_file(tmp, tr->rank, off, count, dp_params_at(tr->dp, off, count), state, &mine);
    CkptManifest *m = tr->rank == 0 ? bs_calloc(1, sizeof *m) : NULL;
    comm_gather_bytes(tr->dpc, &mine, sizeof mine, m ? m->files : NULL, 0);
    if (m) {
        m->num_files = tr->dp_size;
        m->step = tr->step;
        m->seqs_consumed = tr->seqs_consumed;
        m->tokens_consumed = tr->seqs_consumed * (uint64_t)tr->cfg.seq_len;
        m->model = tr->model.cfg;
        m->sample_rng = tr->sample_rng;
        m->data_seed = (uint64_t)tr->cfg.seed;
        m->data_shuffle = tr->train_data.shuffle;
        m->world = m->dp = tr->dp_size;
        m->tp = m->pp = 1;
        m->zero = tr->cfg.zero;
        snprintf(m->optimizer, sizeof m->optimizer, "%s", optimizer_kind_name(tr->opt.cfg.kind));
        m->optimizer_step = tr->optimizer_step;
        snprintf(m->batch_schedule, sizeof m->batch_schedule, "%s", tr->cfg.batch_schedule);
        m->final_batch = tr->cfg.global_batch;
        m->current_batch = tr->adaptive ? tr->adaptive_batch : 0;
        const NoiseScale *ns = &tr->noise;
        double noise[4] = {ns->ema_decay, ns->grad_sq_ema, ns->trace_ema, ns->ema_weight};
        memcpy(m->noise_scale, noise, sizeof noise);
        ckpt_commit(tr->ckpt_dir, tmp, m, tr->cfg.keep_last);
        free(m);
        if (!tr->cfg.quiet) {
            char dir[4096];
            ckpt_step_dir(dir, sizeof dir, tr->ckpt_dir, tr->step);
            progress_line(&tr->progress, "checkpoint written: %s", dir);
        }
    }
    comm_barrier(tr->dpc);
}

void train_resume(Trainer *tr) {
    char dir[4096] = "";
    if (tr->rank == 0) ckpt_resolve(tr->cfg.resume, tr->ckpt_dir, dir, sizeof dir);
    comm_broadcast_bytes(tr->dpc, dir, sizeof dir, 0);
    CkptManifest *m = bs_malloc(sizeof *m);
    ckpt_read_manifest(dir, m);
    char why[600];
    if (tr->rank == 0 && !ckpt_verify(dir, m, why, sizeof why)) bs_die("cannot resume: %s", why);
    const GPTConfig *a = &m->model, *b = &tr->model.cfg;
    if (a->num_layers != b->num_layers || a->num_heads != b->num_heads || a->channels != b->channels ||
        a->max_seq_len != b->max_seq_len || a->vocab_size != b->vocab_size)
        bs_die("checkpoint %s holds a model of shape L=%d H=%d C=%d T=%d V=%d but the flags ask for L=%d H=%d C=%d "
               "T=%d V=%d; pass the checkpoint's shape", dir, a->num_layers, a->num_heads, a->channels,
               a->max_seq_len, a->vocab_size, b->num_layers, b->num_heads, b->channels, b->max_seq_len, b->vocab_size);
    const char *opt = optimizer_kind_name(tr->opt.cfg.kind);
    if (strcmp(m->optimizer, opt) != 0)
        bs_die("checkpoint %s was written with --optimizer %s, not %s; its optimizer state does not carry over", dir,
               m->optimizer, opt);
    if (strcmp(m->batch_schedule, tr->cfg.batch_schedule) != 0 || m->final_batch != tr->cfg.global_batch)
        bs_die("checkpoint %s was written with --batch-schedule %s --global-batch %ld; resume with the same "
               "(got %s, %d)", dir, m->batch_schedule, m->final_batch, tr->cfg.batch_schedule, tr->cfg.global_batch);
    size_t total = tr->model.num_params, off, count;
    float *params = dp_params_at(tr->dp, 0, total);
    if (params) {
        ckpt_read_range(dir, m, 0, total, params, NULL);
    } else {
        dp_shard_range(tr->dp, &off, &count);
        ckpt_read_range(dir, m, off, count, dp_params_at(tr->dp, off, count), NULL);
    }
    float *state[CKPT_STATE_ARRAYS] = {tr->state[0], tr->state[1]};
    ckpt_read_range(dir, m, tr->update_offset, tr->update_count, NULL, state);
    tr->step = m->step;
    tr->seqs_consumed = m->seqs_consumed;
    tr->optimizer_step = m->optimizer_step;
    tr->sample_rng = m->sample_rng;
    if (tr->adaptive) tr->adaptive_batch = m->current_batch;
    tr->noise.grad_sq_ema = m->noise_scale[1];
    tr->noise.trace_ema = m->noise_scale[2];
    tr->noise.ema_weight = m->noise_scale[3];
    if (tr->rank == 0 && (m->data_seed != (uint64_t)tr->cfg.seed || m->data_shuffle != tr->train_data.shuffle))
        bs_warn("resuming %s with another --seed or --data-order than it was written with: the data order changes",
                dir);
    if (tr->rank == 0 && !tr->cfg.quiet)
        printf("resumed from %s at step %ld (written by %d ranks, ZeRO %d)\n", dir, tr->step, m->world, m->zero);
    free(m);
}
