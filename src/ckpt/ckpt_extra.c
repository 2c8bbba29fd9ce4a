/* ckpt_extra.c: per-rank extra state files of a checkpoint (see ckpt_extra.h). */
#include "ckpt/ckpt_extra.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/io.h"

#define EXTRA_MAGIC "BSXTRA01"
#define NAME_BYTES 32

void ckpt_extra_path(char *out, size_t n, const char *dir, int rank) {
    snprintf(out, n, "%s/extra_%05d.bin", dir, rank);
}

static void put(XXH64_state_t *h, FILE *f, const char *path, const void *data, size_t n) {
    bs_fwrite_all(data, n, f, path);
    XXH64_update(h, data, n);
}

void ckpt_write_extra(const char *dir, int rank, const char *label, const CkptExtraArray *arrays, int num_arrays) {
    char path[4200];
    ckpt_extra_path(path, sizeof path, dir, rank);
    FILE *f = bs_fopen(path, "wb");
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    char text[CKPT_EXTRA_LABEL] = {0};
    put(h, f, path, EXTRA_MAGIC, 8);
    snprintf(text, sizeof text, "%s", label);
    put(h, f, path, text, sizeof text);
    uint32_t count = (uint32_t)num_arrays;
    put(h, f, path, &count, sizeof count);
    for (int i = 0; i < num_arrays; i++) {
        char name[NAME_BYTES] = {0};
        snprintf(name, sizeof name, "%s", arrays[i].name);
        uint64_t floats = arrays[i].count;
        put(h, f, path, name, sizeof name);
        put(h, f, path, &floats, sizeof floats);
    }
    for (int i = 0; i < num_arrays; i++) put(h, f, path, arrays[i].data, arrays[i].count * sizeof(float));
    uint64_t digest = XXH64_digest(h);
    XXH64_freeState(h);
    bs_fwrite_all(&digest, sizeof digest, f, path);
    bs_fclose_synced(f, path);
}

/* The header is small; the data is read straight into the arrays. */
bool ckpt_read_extra(const char *dir, int rank, const char *label, const CkptExtraArray *arrays, int num_arrays,
                     char *why, size_t why_size) {
    char path[4200];
    ckpt_extra_path(path, sizeof path, dir, rank);
    if (!bs_path_exists(path)) {
        snprintf(why, why_size, "%s does not exist", path);
        return false;
    }
    size_t len;
    unsigned char *bytes = (unsigned char *)bs_read_file(path, &len);
    size_t head = 8 + CKPT_EXTRA_LABEL + sizeof(uint32_t);
    if (len < head + sizeof(uint64_t) || memcmp(bytes, EXTRA_MAGIC, 8) != 0)
        bs_die("%s is not a batchscale extra-state file (damaged checkpoint?)", path);
    uint64_t digest;
    memcpy(&digest, bytes + len - sizeof digest, sizeof digest);
    if (XXH64(bytes, len - sizeof digest, 0) != digest) bs_die("%s is damaged (checksum mismatch)", path);
    char text[CKPT_EXTRA_LABEL + 1] = {0};
    memcpy(text, bytes + 8, CKPT_EXTRA_LABEL);
    uint32_t count;
    memcpy(&count, bytes + 8 + CKPT_EXTRA_LABEL, sizeof count);
    bool ok = strcmp(text, label) == 0 && count == (uint32_t)num_arrays;
    if (!ok) snprintf(why, why_size, "it was written for '%s', this run is '%s'", text, label);
    size_t at = head, data = head + (size_t)count * (NAME_BYTES + sizeof(uint64_t));
    for (int i = 0; ok && i < num_arrays; i++, at += NAME_BYTES + sizeof(uint64_t)) {
        char name[NAME_BYTES + 1] = {0};
        uint64_t floats;
        memcpy(name, bytes + at, NAME_BYTES);
        memcpy(&floats, bytes + at + NAME_BYTES, sizeof floats);
        if (strcmp(name, arrays[i].name) != 0 || floats != arrays[i].count) {
            snprintf(why, why_size, "its array %d is %s of %llu floats, this run needs %s of %zu", i, name,
                     (unsigned long long)floats, arrays[i].name, arrays[i].count);
            ok = false;
        }
    }
    size_t need = data;
    for (int i = 0; ok && i < num_arrays; i++) need += arrays[i].count * sizeof(float);
    if (ok && need + sizeof digest != len) bs_die("%s has %zu bytes where %zu were expected", path, len, need + 8);
    for (int i = 0; ok && i < num_arrays; i++) {
        memcpy(arrays[i].data, bytes + data, arrays[i].count * sizeof(float));
        data += arrays[i].count * sizeof(float);
    }
    free(bytes);
    return ok;
}
