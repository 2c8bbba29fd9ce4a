/* loader.c: sequence number -> window of tokens (see loader.h). */
#include "data/loader.h"

#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "core/rng.h"

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expands the source into a sorted list of paths (caller frees). */
static char **list_sources(const char *source, int *count) {
    glob_t g;
    char pattern[4096];
    if (bs_is_dir(source)) snprintf(pattern, sizeof pattern, "%s/*.bin", source);
    else snprintf(pattern, sizeof pattern, "%s", source);
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        if (bs_is_dir(source)) bs_die("no token shards (*.bin) in directory %s; run `batchscale prepare` first", source);
        bs_die("token shard %s does not exist; run `batchscale prepare` or check --data/--val-data", source);
    }
    if (rc != 0) bs_die("cannot list token shards for %s", source);
    char **paths = bs_malloc(g.gl_pathc * sizeof(char *));
    for (size_t i = 0; i < g.gl_pathc; i++) paths[i] = strdup(g.gl_pathv[i]);
    *count = (int)g.gl_pathc;
    globfree(&g);
    qsort(paths, (size_t)*count, sizeof(char *), compare_strings);
    return paths;
}

void loader_open(DataLoader *loader, const char *source, int T, int vocab_size, uint64_t seed, bool shuffle) {
    memset(loader, 0, sizeof *loader);
    char **paths = list_sources(source, &loader->num_shards);
    loader->shards = bs_calloc((size_t)loader->num_shards, sizeof(TokenShard));
    loader->first_window = bs_calloc((size_t)loader->num_shards + 1, sizeof(size_t));
    for (int i = 0; i < loader->num_shards; i++) {
        shard_open(&loader->shards[i], paths[i], vocab_size);
        size_t n = loader->shards[i].num_tokens;
        loader->first_window[i + 1] = loader->first_window[i] + (n > (size_t)T ? (n - 1) / (size_t)T : 0);
        loader->num_tokens += n;
        free(paths[i]);
    }
    free(paths);
    loader->num_windows = loader->first_window[loader->num_shards];
    if (loader->num_windows == 0)
        bs_die("%s holds %zu tokens, too few for one sequence of --seq-len %d (+1)", source, loader->num_tokens, T);
    if (loader->num_windows > UINT32_MAX) bs_die("%s has more than 2^32 sequences; use a longer --seq-len", source);
    loader->T = T;
    loader->seed = seed;
    loader->shuffle = shuffle;
    loader->perm_epoch = UINT64_MAX;
    if (shuffle) loader->perm = bs_malloc(loader->num_windows * sizeof(uint32_t));
}

void loader_close(DataLoader *loader) {
    for (int i = 0; i < loader->num_shards; i++) shard_close(&loader->shards[i]);
    free(loader->shards);
    free(loader->first_window);
    free(loader->perm);
    memset(loader, 0, sizeof *loader);
}

static void make_permutation(DataLoader *loader, uint64_t epoch) {
    Rng rng;
    rng_seed(&rng, loader->seed * 0x9e3779b97f4a7c15ULL + epoch + 1);
    uint32_t *p = loader->perm;
    for (size_t i = 0; i < loader->num_windows; i++) p[i] = (uint32_t)i;
    for (size_t i = loader->num_windows - 1; i > 0; i--) {
        size_t j = (size_t)rng_below(&rng, i + 1);
        uint32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    loader->perm_epoch = epoch;
}

void loader_sequence(DataLoader *loader, uint64_t seq, int32_t *inputs, int32_t *targets) {
    uint64_t epoch = seq / loader->num_windows;
    size_t window = (size_t)(seq % loader->num_windows);
    if (loader->shuffle) {
        if (epoch != loader->perm_epoch) make_permutation(loader, epoch);
        window = loader->perm[window];
    }
    int lo = 0, hi = loader->num_shards - 1; /* shard holding the window */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (loader->first_window[mid] <= window) lo = mid;
        else hi = mid - 1;
    }
    const uint16_t *src = loader->shards[lo].tokens + (window - loader->first_window[lo]) * (size_t)loader->T;
    for (int t = 0; t < loader->T; t++) {
        inputs[t] = src[t];
        targets[t] = src[t + 1];
    }
}
