/* fuzz_ckpt_files.c: libFuzzer harness of the checkpoint file readers
 * (ckpt_verify and ckpt_read_range) on a checkpoint built from the input.
 *
 * The input chooses a small model, 1-4 rank files with any ranges (gaps,
 * overlaps, ranges past the model), their contents, damage to each file
 * (a flipped byte, a cut, an extra byte) and a range to read back. The
 * harness writes the files with ckpt_write_rank_file, commits the manifest
 * with ckpt_commit, and then checks:
 *   - the manifest reads back as written, or is refused with a reason;
 *   - ckpt_verify fails exactly when some file was damaged;
 *   - on an intact checkpoint whose files cover the requested range, every
 *     parameter and state value read equals the one written (bitwise).
 * ckpt_read_range dies on a range the files do not cover, by contract, so it
 * is called only on covered ranges. */
#include <stdint.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/io.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FILES 4

typedef struct {
    const uint8_t *data;
    size_t size, at;
} Input;

static unsigned take8(Input *in) { return in->at < in->size ? in->data[in->at++] : 0; }
static unsigned take16(Input *in) { return take8(in) | take8(in) << 8; }

/* Every damage changes the file: a byte xor 0x20, a cut to fewer bytes, one more byte. */
typedef enum { INTACT, FLIP, CUT, EXTEND } Damage;

typedef struct {
    size_t offset, count;
    Damage damage;
    unsigned where; /* byte flipped, or bytes kept by a cut */
} FilePlan;

/* The value written at flat index p, array a (-1: params) by file i: derived
 * from the input so that files differ, NaN bit patterns included. */
static float value_at(const Input *in, int file, int a, size_t p) {
    uint32_t bits = (uint32_t)(p * 2654435761u) ^ (uint32_t)(file * 40503 + (a + 1) * 977);
    if (in->size) bits ^= (uint32_t)in->data[(p + (size_t)file) % in->size] << ((a + 1) * 8);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void damage_file(const char *path, const FilePlan *plan) {
    long long size = bs_file_size(path);
    if (plan->damage == FLIP) {
        FILE *f = fopen(path, "r+b");
        long at = (long)(plan->where % (unsigned long long)size);
        fseek(f, at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x20, f);
        fclose(f);
    } else if (plan->damage == CUT) {
        FUZZ_CHECK(truncate(path, (off_t)(plan->where % (unsigned long long)size)) == 0, "truncate");
    } else if (plan->damage == EXTEND) {
        FILE *f = fopen(path, "ab");
        fputc(0, f);
        fclose(f);
    }
}

/* Writes the planned files and commits the manifest; returns the checkpoint. */
static void build_checkpoint(const Input *in, const char *root, const GPTConfig *model, const FilePlan *plans,
                             int nfiles, CkptManifest *m, char *dir, size_t n) {
    char tmp[300];
    ckpt_tmp_dir(tmp, sizeof tmp, root, 0);
    bs_remove_tree(tmp);
    bs_mkdir_p(tmp);
    memset(m, 0, sizeof *m);
    for (int i = 0; i < nfiles; i++) {
        size_t count = plans[i].count;
        float *arrays[1 + CKPT_STATE_ARRAYS];
        for (int a = 0; a <= CKPT_STATE_ARRAYS; a++) {
            arrays[a] = malloc((count ? count : 1) * sizeof(float));
            for (size_t p = 0; p < count; p++) arrays[a][p] = value_at(in, i, a - 1, plans[i].offset + p);
        }
        const float *state[CKPT_STATE_ARRAYS] = {arrays[1], arrays[2]};
        ckpt_write_rank_file(tmp, i, plans[i].offset, count, arrays[0], state, &m->files[i]);
        for (int a = 0; a <= CKPT_STATE_ARRAYS; a++) free(arrays[a]);
        char path[400];
        snprintf(path, sizeof path, "%s/%s", tmp, m->files[i].name);
        damage_file(path, &plans[i]);
    }
    m->num_files = nfiles;
    m->step = 7;
    m->seqs_consumed = 56;
    m->tokens_consumed = 56 * (uint64_t)model->max_seq_len;
    m->model = *model;
    m->world = m->dp = nfiles;
    m->tp = m->pp = 1;
    snprintf(m->optimizer, sizeof m->optimizer, "adamw");
    snprintf(m->batch_schedule, sizeof m->batch_schedule, "constant");
    ckpt_commit(root, tmp, m, 1);
    ckpt_step_dir(dir, n, root, 0);
}

/* True if [lo, hi) is covered by the manifest's files (which do not overlap). */
static bool covered(const CkptManifest *m, size_t lo, size_t hi) {
    size_t total = 0;
    for (int i = 0; i < m->num_files; i++) {
        size_t a = lo > m->files[i].offset ? lo : m->files[i].offset;
        size_t b = hi < m->files[i].offset + m->files[i].count ? hi : m->files[i].offset + m->files[i].count;
        if (a < b) total += b - a;
    }
    return total == hi - lo;
}

static void check_read_back(const Input *in, const char *dir, const CkptManifest *m, size_t lo, size_t hi) {
    size_t n = hi - lo;
    float *got[1 + CKPT_STATE_ARRAYS];
    for (int a = 0; a <= CKPT_STATE_ARRAYS; a++) got[a] = malloc(n * sizeof(float));
    float *state[CKPT_STATE_ARRAYS] = {got[1], got[2]};
    ckpt_read_range(dir, m, lo, n, got[0], state);
    for (int i = 0; i < m->num_files; i++) {
        const CkptFile *f = &m->files[i];
        int writer = atoi(f->name + 5); /* rank_RRRRR.bin: the index the harness wrote it as */
        for (size_t p = f->offset; p < f->offset + f->count; p++) {
            if (p < lo || p >= hi) continue;
            for (int a = 0; a <= CKPT_STATE_ARRAYS; a++) {
                float want = value_at(in, writer, a - 1, p);
                FUZZ_CHECK(memcmp(&got[a][p - lo], &want, sizeof want) == 0, "array %d, parameter %zu read wrong",
                           a - 1, p);
            }
        }
    }
    for (int a = 0; a <= CKPT_STATE_ARRAYS; a++) free(got[a]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Input in = {data, size, 0};
    GPTConfig model = {.num_layers = 1, .num_heads = 1, .channels = 4 * (1 + (int)(take8(&in) % 2)),
                       .max_seq_len = 2 + (int)(take8(&in) % 3), .vocab_size = 2 + (int)(take8(&in) % 200)};
    char why[600];
    FUZZ_CHECK(gpt_config_check(&model, why, sizeof why), "%s", why);
    size_t params = gpt_num_params(&model);
    int nfiles = 1 + (int)(take8(&in) % MAX_FILES);
    FilePlan plans[MAX_FILES];
    bool damaged = false;
    for (int i = 0; i < nfiles; i++) {
        plans[i].offset = take16(&in) % (params + 2);
        plans[i].count = take16(&in) % (params + 2);
        unsigned d = take8(&in);
        plans[i].damage = d < 200 ? INTACT : (Damage)(1 + d % 3);
        plans[i].where = take16(&in);
        damaged = damaged || plans[i].damage != INTACT;
    }
    size_t lo = take16(&in) % params, hi = lo + 1 + take16(&in) % (params - lo);

    char root[256], dir[300];
    fuzz_scratch_dir(root, sizeof root, "ckpt");
    CkptManifest *written = malloc(sizeof *written), *m = malloc(sizeof *m);
    build_checkpoint(&in, root, &model, plans, nfiles, written, dir, sizeof dir);
    if (ckpt_try_read_manifest(dir, m, why, sizeof why)) {
        FUZZ_CHECK(m->num_files == nfiles && m->step == 7 && m->model.channels == model.channels,
                   "manifest did not read back as written");
        for (int i = 0; i < nfiles; i++)
            FUZZ_CHECK(memcmp(&m->files[i], &written->files[i], sizeof m->files[i]) == 0, "file entry %d changed", i);
        bool verified = ckpt_verify(dir, m, why, sizeof why);
        FUZZ_CHECK(verified == !damaged, "ckpt_verify says %s on a %s checkpoint", verified ? "valid" : why,
                   damaged ? "damaged" : "intact");
        if (verified && covered(m, lo, hi)) check_read_back(&in, dir, m, lo, hi);
    } else {
        FUZZ_CHECK(why[0] != '\0', "a refused manifest needs a reason");
    }
    free(written);
    free(m);
    return 0;
}
