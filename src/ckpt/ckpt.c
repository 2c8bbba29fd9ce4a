/* ckpt.c: checkpoint files, manifest, verification and range reads (see ckpt.h). */
#define _GNU_SOURCE
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"
#include "core/range.h"
#include "kernels/vecmath.h"

#define RANK_MAGIC "BSCKPT01"

/* Fault injection for tests (SQLite style): BATCHSCALE_CKPT_FAULT=STAGE kills
 * this process with SIGKILL when a checkpoint write reaches STAGE, and
 * STAGE:RANK only the process writing rank RANK's file (so one rank of a
 * job dies while the others write; the manifest stages are reached by the
 * committing rank, 0):
 *   rank-file-half    half of a rank file's parameters written
 *   rank-file-done    a rank file complete and synced, manifest not started
 *   manifest-half     the manifest partly written
 *   before-rename     everything synced, directory not yet renamed
 *   after-rename      renamed, older checkpoints not yet pruned
 * Unset in normal runs. */
static void fault_point(const char *stage, int rank) {
    const char *want = getenv("BATCHSCALE_CKPT_FAULT");
    size_t n = strlen(stage);
    if (!want || strncmp(want, stage, n) != 0 || (want[n] != '\0' && want[n] != ':')) return;
    char *end = NULL;
    long only = want[n] == ':' ? strtol(want + n + 1, &end, 10) : -1;
    if (end && (end == want + n + 1 || *end != '\0' || only < 0))
        bs_die("BATCHSCALE_CKPT_FAULT must be STAGE or STAGE:RANK (got '%s')", want);
    if (only < 0 || only == rank) raise(SIGKILL);
}
#define RANK_HEADER_BYTES 64

void ckpt_step_dir(char *out, size_t n, const char *ckpt_dir, long step) {
    snprintf(out, n, "%s/step_%08ld", ckpt_dir, step);
}

void ckpt_tmp_dir(char *out, size_t n, const char *ckpt_dir, long step) {
    snprintf(out, n, "%s/.tmp-step_%08ld", ckpt_dir, step);
}

/* Writes and hashes at once. */
typedef struct {
    FILE *f;
    const char *path;
    XXH64_state_t *hash;
    uint64_t bytes;
} HashedWriter;

static void hw_write(HashedWriter *w, const void *data, size_t n) {
    bs_fwrite_all(data, n, w->f, w->path);
    XXH64_update(w->hash, data, n);
    w->bytes += n;
}

void ckpt_write_rank_file(const char *tmp_dir, int rank, size_t offset, size_t count, const float *params,
                          const float *const *state, CkptFile *info) {
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "rank_%05d.bin", rank);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, info->name);
    HashedWriter w = {bs_fopen(path, "wb"), path, XXH64_createState(), 0};
    XXH64_reset(w.hash, 0);
    unsigned char header[RANK_HEADER_BYTES] = {0};
    memcpy(header, RANK_MAGIC, 8);
    uint64_t fields[3] = {offset, count, CKPT_STATE_ARRAYS};
    memcpy(header + 8, fields, sizeof fields);
    hw_write(&w, header, sizeof header);
    hw_write(&w, params, count / 2 * sizeof(float));
    fflush(w.f);
    fault_point("rank-file-half", rank);
    hw_write(&w, params + count / 2, (count - count / 2) * sizeof(float));
    float zeros[1024] = {0};
    for (int a = 0; a < CKPT_STATE_ARRAYS; a++) {
        if (state && state[a]) {
            hw_write(&w, state[a], count * sizeof(float));
        } else {
            for (size_t done = 0; done < count; done += 1024)
                hw_write(&w, zeros, (count - done < 1024 ? count - done : 1024) * sizeof(float));
        }
    }
    bs_fclose_synced(w.f, path);
    fault_point("rank-file-done", rank);
    info->offset = offset;
    info->count = count;
    info->bytes = w.bytes;
    info->xxh64 = XXH64_digest(w.hash);
    XXH64_freeState(w.hash);
}

static json_t *u64_hex(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return json_string(buf);
}

/* model.moe: the MoE shape, the router and capacity factor (left out where unrecorded). */
static json_t *moe_json(const GPTConfig *g) {
    json_t *moe = json_pack("{s:i, s:i, s:i, s:i}", "experts", g->experts, "top_k", g->moe_top_k, "ffn", g->moe_ffn,
                            "every", g->moe_every > 1 ? g->moe_every : 1);
    json_object_set_new(moe, "gates", json_string(moe_gates_name((MoeGates)g->moe_gates)));
    json_object_set_new(moe, "routed_scale", json_real(g->moe_routed_scale != 0 ? g->moe_routed_scale : 1));
    if (g->moe_router != CKPT_UNRECORDED)
        json_object_set_new(moe, "router", json_string(moe_router_name((MoeRouter)g->moe_router)));
    if (g->capacity_factor != CKPT_UNRECORDED)
        json_object_set_new(moe, "capacity_factor", json_real(g->capacity_factor));
    return moe;
}

static json_t *manifest_to_json(const CkptManifest *m) {
    json_t *files = json_array();
    for (int i = 0; i < m->num_files; i++) {
        const CkptFile *f = &m->files[i];
        json_array_append_new(files, json_pack("{s:s, s:i, s:I, s:I, s:I, s:o}", "name", f->name, "shard", f->shard,
                                               "offset", (json_int_t)f->offset, "count", (json_int_t)f->count,
                                               "bytes", (json_int_t)f->bytes, "xxh64", u64_hex(f->xxh64)));
    }
    json_t *rng = json_array(), *noise = json_array(), *estimators = json_array();
    for (int i = 0; i < 4; i++) json_array_append_new(rng, u64_hex(m->sample_rng.s[i]));
    for (int i = 0; i < 4; i++) {
        uint64_t bits;
        memcpy(&bits, &m->noise_scale[i], sizeof bits);
        json_array_append_new(noise, u64_hex(bits));
    }
    for (int i = 0; i < m->num_estimator_words; i++) {
        uint64_t bits;
        memcpy(&bits, &m->estimators[i], sizeof bits);
        json_array_append_new(estimators, u64_hex(bits));
    }
    json_t *j = json_pack(
        "{s:s, s:i, s:I, s:I, s:I, s:{s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i, s:i}, s:{s:s, s:I},"
        " s:o, s:{s:o, s:b}, s:o}",
        "format", "batchscale-checkpoint", "version", CKPT_FORMAT_VERSION, "step", (json_int_t)m->step,
        "seqs_consumed", (json_int_t)m->seqs_consumed, "tokens_consumed", (json_int_t)m->tokens_consumed, "model",
        "layers", m->model.num_layers, "heads", m->model.num_heads, "channels", m->model.channels, "seq_len",
        m->model.max_seq_len, "vocab", m->model.vocab_size, "layout", "world", m->world, "dp", m->dp, "tp", m->tp,
        "pp", m->pp, "zero", m->zero, "optimizer", "name", m->optimizer, "step", (json_int_t)m->optimizer_step,
        "sample_rng", rng, "data", "seed", u64_hex(m->data_seed), "shuffle", m->data_shuffle, "files", files);
    json_object_set_new(json_object_get(j, "layout"), "pp_split", json_string(m->pp_split));
    if (m->virtual_stages > 1)
        json_object_set_new(json_object_get(j, "layout"), "virtual_stages", json_integer(m->virtual_stages));
    if (m->cp > 1) json_object_set_new(json_object_get(j, "layout"), "cp", json_integer(m->cp));
    if (m->ep > 1) json_object_set_new(json_object_get(j, "layout"), "ep", json_integer(m->ep));
    if (gpt_is_moe(&m->model)) /* the layer blocks hold the router and the experts */
        json_object_set_new(json_object_get(j, "model"), "moe",
                            moe_json(&m->model));
    if (m->model.lora_rank > 0) /* the shards hold the adapters only; the base is identified by its hash */
        json_object_set_new(json_object_get(j, "model"), "lora",
                            json_pack("{s:i, s:i, s:o}", "rank", m->model.lora_rank, "targets", m->model.lora_targets,
                                      "base_xxh64", u64_hex(m->lora_base_hash)));
    json_object_set_new(j, "tokenizer", json_string(m->tokenizer[0] ? m->tokenizer : "byte"));
    json_object_set_new(j, "schedule", json_pack("{s:s, s:I, s:I, s:o}", "batch", m->batch_schedule, "global_batch",
                                                 (json_int_t)m->final_batch, "current_batch",
                                                 (json_int_t)m->current_batch, "noise_scale", noise));
    if (m->num_estimator_words > 0) json_object_set_new(json_object_get(j, "schedule"), "estimators", estimators);
    else json_decref(estimators);
    return j;
}

void ckpt_remove_unfinished(const char *ckpt_dir) {
    for (;;) { /* batches of 64 names, read again after each: removing while reading skips names */
        DIR *d = opendir(ckpt_dir);
        if (!d) return;
        struct dirent *e;
        char stale[64][300];
        int nstale = 0;
        while ((e = readdir(d)) && nstale < 64)
            if (strncmp(e->d_name, ".tmp-step_", 10) == 0) /* left by a crash or a failed write: never complete */
                snprintf(stale[nstale++], sizeof stale[0], "%s/%.250s", ckpt_dir, e->d_name);
        closedir(d);
        for (int i = 0; i < nstale; i++) bs_remove_tree(stale[i]);
        if (nstale < 64) return;
    }
}

static void prune_old(const char *ckpt_dir, int keep_last) {
    ckpt_remove_unfinished(ckpt_dir);
    if (keep_last <= 0) return;
    DIR *d = opendir(ckpt_dir);
    if (!d) return;
    long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1) steps[n++] = s;
    }
    closedir(d);
    /* sort descending, drop everything past keep_last */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (steps[j] > steps[i]) {
                long t = steps[i];
                steps[i] = steps[j];
                steps[j] = t;
            }
    for (int i = keep_last; i < n; i++) {
        char path[4096];
        ckpt_step_dir(path, sizeof path, ckpt_dir, steps[i]);
        bs_remove_tree(path);
    }
}

void ckpt_commit(const char *ckpt_dir, const char *tmp_dir, const CkptManifest *m, int keep_last) {
    json_t *j = manifest_to_json(m);
    char *text = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", tmp_dir);
    FILE *f = bs_fopen(path, "wb");
    size_t len = strlen(text);
    bs_fwrite_all(text, len / 2, f, path);
    fflush(f);
    fault_point("manifest-half", 0);
    bs_fwrite_all(text + len / 2, len - len / 2, f, path);
    bs_fwrite_all("\n", 1, f, path);
    bs_fclose_synced(f, path);
    free(text);
    bs_fsync_dir(tmp_dir);
    fault_point("before-rename", 0);
    char final_dir[4096], old_dir[4200];
    ckpt_step_dir(final_dir, sizeof final_dir, ckpt_dir, m->step);
    snprintf(old_dir, sizeof old_dir, "%s.old", final_dir);
    bool replaced = bs_path_exists(final_dir);
    if (replaced && rename(final_dir, old_dir) != 0)
        bs_die("cannot move old checkpoint %s aside: %s", final_dir, strerror(errno));
    if (rename(tmp_dir, final_dir) != 0) bs_die("cannot rename %s to %s: %s", tmp_dir, final_dir, strerror(errno));
    bs_fsync_dir(ckpt_dir);
    fault_point("after-rename", 0);
    if (replaced) bs_remove_tree(old_dir);
    prune_old(ckpt_dir, keep_last); /* also removes directories left by crashed writes */
}

#define FAIL(...)                                                                                           \
    do {                                                                                                    \
        snprintf(why, why_size, __VA_ARGS__);                                                               \
        json_decref(j);                                                                                     \
        return false;                                                                                       \
    } while (0)

static bool parse_hex(json_t *v, uint64_t *out) {
    const char *s = json_string_value(v);
    char *end;
    if (!s || !*s) return false;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 16);
    if (*end || errno) return false;
    *out = x;
    return true;
}

/* One line into why and false, for the manifest's parts (the caller frees the JSON). */
#define REFUSE(...)                                                                                         \
    do {                                                                                                    \
        snprintf(why, why_size, __VA_ARGS__);                                                               \
        return false;                                                                                       \
    } while (0)

static bool fail_with(json_t *j) {
    json_decref(j);
    return false;
}

/* model.moe's router and capacity factor (absent in older checkpoints: CKPT_UNRECORDED). */
static bool read_moe_router(json_t *moe, const char *path, CkptManifest *m, char *why, size_t why_size) {
    const char *router = NULL;
    double factor = CKPT_UNRECORDED;
    MoeRouter kind = (MoeRouter)CKPT_UNRECORDED;
    if (json_unpack(moe, "{s?s, s?F}", "router", &router, "capacity_factor", &factor) != 0 ||
        (router && !moe_parse_router(router, &kind)) || !(factor == CKPT_UNRECORDED || (factor >= 0 && factor < 1e6)))
        REFUSE("%s is corrupt: model.moe's router must be softmax or sigmoid and its capacity_factor a number >= 0",
               path);
    m->model.moe_router = (int)kind;
    m->model.capacity_factor = factor;
    return true;
}

/* The manifest's optional model parts: LoRA adapters, MoE experts (absent: a dense model trained whole). */
static bool read_model_parts(json_t *j, const char *path, CkptManifest *m, char *why, size_t why_size) {
    json_t *lora = json_object_get(json_object_get(j, "model"), "lora"); /* absent: the whole model trained */
    if (lora && (json_unpack(lora, "{s:i, s:i}", "rank", &m->model.lora_rank, "targets", &m->model.lora_targets) != 0 ||
                 m->model.lora_rank < 1 || m->model.lora_rank > 65536 || m->model.lora_targets < 1 ||
                 m->model.lora_targets > 15))
        REFUSE("%s is corrupt: model.lora must hold a rank (1-65536) and a targets mask (1-15)", path);
    json_t *base = json_object_get(lora, "base_xxh64"); /* absent: written before the base was hashed */
    if (base && !parse_hex(base, &m->lora_base_hash)) REFUSE("%s is corrupt: model.lora.base_xxh64 is not hex", path);
    json_t *moe = json_object_get(json_object_get(j, "model"), "moe"); /* absent: a dense model */
    m->model.moe_every = 1; /* "every" absent: every layer's MLP is MoE */
    const char *gates = "normalized"; /* "gates", "routed_scale" absent: written before --moe-gates, renormalised */
    MoeGates parsed = MOE_GATES_NORMALIZED;
    m->model.moe_routed_scale = 1;
    if (moe && (json_unpack(moe, "{s:i, s:i, s:i, s?i, s?s, s?F}", "experts", &m->model.experts, "top_k",
                            &m->model.moe_top_k, "ffn", &m->model.moe_ffn, "every", &m->model.moe_every, "gates",
                            &gates, "routed_scale", &m->model.moe_routed_scale) != 0 ||
                m->model.experts < 2 || m->model.experts > MOE_MAX_EXPERTS || m->model.moe_top_k < 1 ||
                m->model.moe_top_k > m->model.experts || m->model.moe_ffn < 1 || m->model.moe_ffn > (1 << 20) ||
                m->model.moe_every < 1 || m->model.moe_every > m->model.num_layers || !moe_parse_gates(gates, &parsed) ||
                !(m->model.moe_routed_scale > 0 && m->model.moe_routed_scale <= 1e6)))
        REFUSE("%s is corrupt: model.moe must hold experts (2-%d), top_k (1-experts), ffn (1-2^20), every "
               "(1-layers), gates (normalized, unnormalized or pre-softmax) and routed_scale (0-1e6]", path,
               MOE_MAX_EXPERTS);
    m->model.moe_gates = (int)parsed;
    return !moe || read_moe_router(moe, path, m, why, why_size);
}

/* The manifest's file list: names, shards, ranges, sizes and checksums, no two ranges of a shard overlapping. */
static bool read_files(json_t *files, const char *path, CkptManifest *m, char *why, size_t why_size) {
    json_error_t err;
    m->num_files = (int)json_array_size(files);
    for (int i = 0; i < m->num_files; i++) {
        CkptFile *f = &m->files[i];
        const char *name;
        json_t *hash;
        json_int_t off, cnt, bytes;
        int shard = 0;
        if (json_unpack_ex(json_array_get(files, (size_t)i), &err, 0, "{s:s, s?i, s:I, s:I, s:I, s:o}", "name",
                           &name, "shard", &shard, "offset", &off, "count", &cnt, "bytes", &bytes, "xxh64",
                           &hash) != 0)
            REFUSE("%s is corrupt: file entry %d: %s", path, i, err.text);
        if (shard < 0 || shard >= m->tp * m->pp * m->ep)
            REFUSE("%s is corrupt: file entry %d names shard %d", path, i, shard);
        f->shard = shard;
        if (strlen(name) >= sizeof f->name || strchr(name, '/') || off < 0 || cnt < 0 || bytes < 0)
            REFUSE("%s is corrupt: bad file entry %d", path, i);
        snprintf(f->name, sizeof f->name, "%s", name);
        f->offset = (uint64_t)off;
        f->count = (uint64_t)cnt;
        f->bytes = (uint64_t)bytes;
        if (!parse_hex(hash, &f->xxh64)) REFUSE("%s is corrupt: checksum of %s is not hex", path, name);
        if (f->bytes != RANK_HEADER_BYTES + (1 + CKPT_STATE_ARRAYS) * f->count * sizeof(float))
            REFUSE("%s is corrupt: file %s has an inconsistent size", path, name);
        if (f->offset + f->count > gpt_num_params(&m->model))
            REFUSE("%s is corrupt: file %s covers a range outside the model", path, name);
        for (int k = 0; k < i; k++) /* overlaps would let a read count some parameters twice and miss others */
            if (f->shard == m->files[k].shard && f->count && m->files[k].count &&
                f->offset < m->files[k].offset + m->files[k].count &&
                m->files[k].offset < f->offset + f->count)
                REFUSE("%s is corrupt: files %s and %s hold overlapping ranges", path, m->files[k].name, name);
    }
    return true;
}

bool ckpt_try_read_manifest(const char *dir, CkptManifest *m, char *why, size_t why_size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_t *j = NULL;
    if (!bs_is_dir(dir)) FAIL("checkpoint %s does not exist or is not a directory", dir);
    json_error_t err;
    j = json_load_file(path, 0, &err);
    if (!j) FAIL("%s is not a readable checkpoint manifest: %s (line %d)", path, err.text, err.line);
    memset(m, 0, sizeof *m);
    const char *format = NULL, *opt = NULL;
    int version = 0, shuffle = 0;
    json_int_t step = 0, seqs = 0, tokens = 0, ostep = 0;
    json_t *rng = NULL, *files = NULL, *seed = NULL;
    if (json_unpack_ex(j, &err, 0,
                       "{s:s, s:i, s:I, s:I, s:I, s:{s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i, s:i},"
                       " s:{s:s, s:I}, s:o, s:{s:o, s:b}, s:o}",
                       "format", &format, "version", &version, "step", &step, "seqs_consumed", &seqs,
                       "tokens_consumed", &tokens, "model", "layers", &m->model.num_layers, "heads",
                       &m->model.num_heads, "channels", &m->model.channels, "seq_len", &m->model.max_seq_len, "vocab",
                       &m->model.vocab_size, "layout", "world", &m->world, "dp", &m->dp, "tp", &m->tp, "pp", &m->pp,
                       "zero", &m->zero, "optimizer", "name", &opt, "step", &ostep, "sample_rng", &rng, "data",
                       "seed", &seed, "shuffle", &shuffle, "files", &files) != 0)
        FAIL("%s is corrupt: %s", path, err.text);
    if (strcmp(format, "batchscale-checkpoint") != 0) FAIL("%s is not a batchscale checkpoint manifest", path);
    if (version != CKPT_FORMAT_VERSION)
        FAIL("%s has checkpoint format version %d; this build reads version %d", path, version, CKPT_FORMAT_VERSION);
    char shape_why[256];
    if (!gpt_config_check(&m->model, shape_why, sizeof shape_why)) FAIL("%s: invalid model shape: %s", path, shape_why);
    if (m->model.num_layers > (1 << 20)) /* beyond this the parameter count could overflow */
        FAIL("%s: invalid model shape: %d layers (at most 2^20)", path, m->model.num_layers);
    if (step < 0 || seqs < 0 || tokens < 0 || ostep < 0) FAIL("%s is corrupt: negative counters", path);
    if (m->world < 1 || m->dp < 1 || m->tp < 1 || m->pp < 1 || m->zero < 0 || m->zero > 3)
        FAIL("%s is corrupt: impossible layout", path);
    m->step = (long)step;
    m->seqs_consumed = (uint64_t)seqs;
    m->tokens_consumed = (uint64_t)tokens;
    m->optimizer_step = (long)ostep;
    snprintf(m->optimizer, sizeof m->optimizer, "%s", opt);
    if (!parse_hex(seed, &m->data_seed)) FAIL("%s is corrupt: data.seed is not a hex number", path);
    m->data_shuffle = shuffle;
    if (!json_is_array(rng) || json_array_size(rng) != 4) FAIL("%s is corrupt: sample_rng must hold 4 words", path);
    for (int i = 0; i < 4; i++)
        if (!parse_hex(json_array_get(rng, (size_t)i), &m->sample_rng.s[i]))
            FAIL("%s is corrupt: sample_rng is not hex", path);
    const char *schedule = NULL;
    json_int_t final_batch = 0, current_batch = 0;
    json_t *noise = NULL;
    if (json_unpack_ex(j, &err, 0, "{s:{s:s, s:I, s:I, s:o}}", "schedule", "batch", &schedule, "global_batch",
                       &final_batch, "current_batch", &current_batch, "noise_scale", &noise) != 0)
        FAIL("%s is corrupt: %s", path, err.text);
    if (strlen(schedule) >= sizeof m->batch_schedule) FAIL("%s is corrupt: batch schedule too long", path);
    snprintf(m->batch_schedule, sizeof m->batch_schedule, "%s", schedule);
    m->final_batch = (long)final_batch;
    m->current_batch = (long)current_batch;
    if (!json_is_array(noise) || json_array_size(noise) != 4) FAIL("%s is corrupt: noise_scale must hold 4 words", path);
    for (int i = 0; i < 4; i++) {
        uint64_t bits;
        if (!parse_hex(json_array_get(noise, (size_t)i), &bits)) FAIL("%s is corrupt: noise_scale is not hex", path);
        memcpy(&m->noise_scale[i], &bits, sizeof bits);
    }
    json_t *estimators = json_object_get(json_object_get(j, "schedule"), "estimators"); /* absent: none */
    size_t words = estimators ? json_array_size(estimators) : 0;
    if (estimators && (!json_is_array(estimators) || words > CKPT_ESTIMATOR_WORDS))
        FAIL("%s is corrupt: schedule.estimators must be an array of at most %d words", path, CKPT_ESTIMATOR_WORDS);
    m->num_estimator_words = (int)words;
    for (size_t i = 0; i < words; i++) {
        uint64_t bits;
        if (!parse_hex(json_array_get(estimators, i), &bits)) FAIL("%s is corrupt: schedule.estimators is not hex", path);
        memcpy(&m->estimators[i], &bits, sizeof bits);
    }
    const char *tok = json_string_value(json_object_get(j, "tokenizer"));
    if (tok && strlen(tok) >= sizeof m->tokenizer) FAIL("%s is corrupt: tokenizer name too long", path);
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s", tok ? tok : "byte");
    const char *split = json_string_value(json_object_get(json_object_get(j, "layout"), "pp_split"));
    if (split && strlen(split) >= sizeof m->pp_split) FAIL("%s is corrupt: pp_split too long", path);
    snprintf(m->pp_split, sizeof m->pp_split, "%s", split ? split : "");
    if (!read_model_parts(j, path, m, why, why_size)) return fail_with(j);
    json_t *cp = json_object_get(json_object_get(j, "layout"), "cp"); /* absent: 1 */
    m->cp = cp ? (int)json_integer_value(cp) : 1;
    if (m->cp < 1 || m->world % ((long)m->cp * m->tp) != 0) FAIL("%s is corrupt: cp must be at least 1 and divide world / tp", path);
    json_t *ep = json_object_get(json_object_get(j, "layout"), "ep"); /* absent: 1 */
    m->ep = ep ? (int)json_integer_value(ep) : 1;
    if (m->ep < 1 || m->dp % m->ep != 0) FAIL("%s is corrupt: ep must be at least 1 and divide dp", path);
    json_t *virtual_stages = json_object_get(json_object_get(j, "layout"), "virtual_stages");
    m->virtual_stages = virtual_stages ? (int)json_integer_value(virtual_stages) : 1;
    if (m->virtual_stages < 1 || m->pp % m->virtual_stages != 0)
        FAIL("%s is corrupt: virtual_stages must be at least 1 and divide pp", path);
    if (!json_is_array(files) || json_array_size(files) == 0 || json_array_size(files) > CKPT_MAX_FILES)
        FAIL("%s is corrupt: 'files' must list 1 to %d files", path, CKPT_MAX_FILES);
    if (!read_files(files, path, m, why, why_size)) return fail_with(j);
    json_decref(j);
    return true;
}

void ckpt_read_manifest(const char *dir, CkptManifest *m) {
    char why[600];
    if (!ckpt_try_read_manifest(dir, m, why, sizeof why)) bs_die("%s", why);
}

bool ckpt_verify(const char *dir, const CkptManifest *m, char *why, size_t why_size) {
    char *buf = bs_malloc(1 << 20);
    bool ok = true;
    for (int i = 0; i < m->num_files && ok; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, m->files[i].name);
        long long size = bs_file_size(path);
        if (size < 0) {
            snprintf(why, why_size, "%s is missing", path);
            ok = false;
            break;
        }
        if ((uint64_t)size != m->files[i].bytes) {
            snprintf(why, why_size, "%s is truncated or corrupt: %lld bytes, the manifest says %" PRIu64, path, size,
                     m->files[i].bytes);
            ok = false;
            break;
        }
        FILE *f = fopen(path, "rb");
        if (!f) {
            snprintf(why, why_size, "cannot open %s: %s", path, strerror(errno));
            ok = false;
            break;
        }
        XXH64_state_t *h = XXH64_createState();
        XXH64_reset(h, 0);
        size_t got;
        while ((got = fread(buf, 1, 1 << 20, f)) > 0) XXH64_update(h, buf, got);
        fclose(f);
        uint64_t digest = XXH64_digest(h);
        XXH64_freeState(h);
        if (digest != m->files[i].xxh64) {
            snprintf(why, why_size, "%s is corrupt: checksum %016" PRIx64 " does not match the manifest's %016" PRIx64,
                     path, digest, m->files[i].xxh64);
            ok = false;
        }
    }
    free(buf);
    return ok;
}

void ckpt_read_range(const char *dir, const CkptManifest *m, size_t offset, size_t count, float *params,
                     float *const *state) {
    if (m->tp * m->pp != 1)
        bs_die("checkpoint %s holds a model split %d x %d (tensor x pipeline); read it through the trainer", dir,
               m->tp, m->pp);
    ckpt_read_shard_range(dir, m, 0, offset, count, params, state);
}

/* One pass over values just read (array -1: the parameters, else optimizer state array a): a NaN or an infinity
 * is refused, naming the file and the parameter's index in the model shard's flat layout. */
static void check_finite(const char *path, int array, const float *x, size_t n, size_t first_index) {
    size_t bad = floats_first_nonfinite(x, n);
    if (bad == n) return;
    char what[48] = "parameter";
    if (array >= 0) snprintf(what, sizeof what, "optimizer state %d of parameter", array);
    bs_die("%s: %s %zu holds %s (the checkpoint's values are damaged)", path, what, first_index + bad,
           isnan(x[bad]) ? "a NaN" : "an infinity");
}

void ckpt_read_shard_range(const char *dir, const CkptManifest *m, int shard, size_t offset, size_t count,
                           float *params, float *const *state) {
    size_t covered = 0;
    for (int i = 0; i < m->num_files; i++) {
        const CkptFile *cf = &m->files[i];
        if (cf->shard != shard) continue;
        const Range wanted = range_make(offset, count), file = range_make(cf->offset, cf->count);
        const Range part = range_intersect(wanted, file);
        if (range_empty(part)) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, cf->name);
        FILE *f = bs_fopen(path, "rb");
        char magic[8];
        bs_fread_exact(magic, 8, f, path);
        if (memcmp(magic, RANK_MAGIC, 8) != 0) bs_die("%s is not a batchscale checkpoint file (bad magic)", path);
        for (int a = -1; a < CKPT_STATE_ARRAYS; a++) {
            float *dst = a < 0 ? params : (state ? state[a] : NULL);
            if (!dst) continue;
            long long pos = RANK_HEADER_BYTES + (long long)(a + 1) * (long long)cf->count * 4 +
                            (long long)range_offset_in(part, file) * 4;
            if (fseeko(f, pos, SEEK_SET) != 0) bs_die("cannot seek in %s", path);
            bs_fread_exact(dst + range_offset_in(part, wanted), part.count * sizeof(float), f, path);
            check_finite(path, a, dst + range_offset_in(part, wanted), part.count, part.offset);
        }
        fclose(f);
        covered += part.count;
    }
    if (covered != count)
        bs_die("checkpoint %s does not cover parameters [%zu, %zu): its files hold %zu of them", dir, offset,
               offset + count, covered);
}

void ckpt_resolve(const char *arg, const char *ckpt_dir, char *out, size_t n) {
    if (strcmp(arg, "latest") != 0) {
        snprintf(out, n, "%s", arg);
        return;
    }
    if (!ckpt_dir || !*ckpt_dir)
        bs_die_about("resume ckpt_dir", "resuming from the latest checkpoint needs a checkpoint directory to know where to look");
    DIR *d = opendir(ckpt_dir);
    if (!d) bs_die("cannot open checkpoint directory %s: %s", ckpt_dir, strerror(errno));
    struct dirent *e;
    long steps[4096];
    int count = 0;
    while ((e = readdir(d)) && count < 4096) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1) steps[count++] = s;
    }
    closedir(d);
    for (;;) {
        int top = -1;
        for (int i = 0; i < count; i++)
            if (steps[i] >= 0 && (top < 0 || steps[i] > steps[top])) top = i;
        if (top < 0) break;
        char dir[4096];
        ckpt_step_dir(dir, sizeof dir, ckpt_dir, steps[top]);
        steps[top] = -1;
        char manifest_path[4200], why[600];
        snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", dir);
        if (!bs_path_exists(manifest_path)) {
            bs_warn("skipping %s: no manifest (incomplete checkpoint)", dir);
            continue;
        }
        CkptManifest *m = bs_malloc(sizeof *m);
        bool ok = ckpt_try_read_manifest(dir, m, why, sizeof why) && ckpt_verify(dir, m, why, sizeof why);
        free(m);
        if (ok) {
            snprintf(out, n, "%s", dir);
            return;
        }
        bs_warn("skipping %s: %s; falling back to an older checkpoint", dir, why);
    }
    bs_die("no complete checkpoint in %s", ckpt_dir);
}
