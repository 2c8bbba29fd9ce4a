/* fuzz_manifest.c: libFuzzer harness of the checkpoint manifest reader. The
 * input is manifest.json. ckpt_try_read_manifest must refuse it with a
 * reason or accept a manifest that keeps the promises readers rely on:
 * 1 to CKPT_MAX_FILES files, each a range inside the model with the size its
 * count implies, a plain name and a model shard the layout has, no two ranges
 * of one shard overlapping, and a model whose parameter count does not
 * overflow. */
#include <stdint.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parameters of the model in 128-bit arithmetic (the layout of gpt_layout.c). */
static unsigned __int128 exact_params(const GPTConfig *g) {
    unsigned __int128 C = (unsigned)g->channels, L = (unsigned)g->num_layers;
    unsigned __int128 layer = 12 * C * C + 13 * C;
    return (unsigned)g->padded_vocab_size * C + (unsigned)g->max_seq_len * C + L * layer + 2 * C;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[256], path[300];
    fuzz_scratch_dir(dir, sizeof dir, "manifest");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    fuzz_write_file(path, data, size);
    CkptManifest *m = malloc(sizeof *m);
    char why[600] = "";
    if (ckpt_try_read_manifest(dir, m, why, sizeof why)) {
        unsigned __int128 params = exact_params(&m->model);
        FUZZ_CHECK(params == gpt_num_params(&m->model), "accepted a model whose parameter count overflows");
        FUZZ_CHECK(m->num_files >= 1 && m->num_files <= CKPT_MAX_FILES, "accepted %d files", m->num_files);
        for (int i = 0; i < m->num_files; i++) {
            const CkptFile *f = &m->files[i];
            FUZZ_CHECK(memchr(f->name, '\0', sizeof f->name) && !strchr(f->name, '/'), "bad file name accepted");
            FUZZ_CHECK(f->shard >= 0 && f->shard < m->tp * m->pp, "file %d: shard %d accepted", i, f->shard);
            FUZZ_CHECK((unsigned __int128)f->offset + f->count <= params, "file %d outside the model", i);
            unsigned __int128 floats = (unsigned __int128)(1 + CKPT_STATE_ARRAYS) * f->count;
            FUZZ_CHECK(f->bytes == 64 + 4 * floats, "file %d: size does not match its count", i);
            for (int j = 0; j < i; j++) {
                const CkptFile *g = &m->files[j];
                bool apart = f->offset + f->count <= g->offset || g->offset + g->count <= f->offset;
                FUZZ_CHECK(apart || f->shard != g->shard || f->count == 0 || g->count == 0,
                           "files %d and %d of shard %d overlap", j, i, f->shard);
            }
        }
    } else {
        FUZZ_CHECK(why[0] != '\0', "a refused manifest needs a reason");
    }
    free(m);
    return 0;
}
