/* loader.c: sequence number -> window of tokens (see loader.h). */
#include "data/loader.h"

#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/error.h"
#include "core/reason.h"
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
        bs_die_about("data", "token shard %s does not exist; run `batchscale prepare` or check the data path", source);
    }
    if (rc != 0) bs_die("cannot list token shards for %s", source);
    char **paths = bs_malloc(g.gl_pathc * sizeof(char *));
    for (size_t i = 0; i < g.gl_pathc; i++) paths[i] = strdup(g.gl_pathv[i]);
    *count = (int)g.gl_pathc;
    globfree(&g);
    qsort(paths, (size_t)*count, sizeof(char *), compare_strings);
    return paths;
}

bool loader_has_masks(const char *source) {
    int n;
    char **paths = list_sources(source, &n);
    char mask[4200];
    loss_mask_path(mask, sizeof mask, paths[0]);
    bool yes = bs_path_exists(mask);
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    return yes;
}

/* Every shard's loss mask, or none. */
static void open_masks(DataLoader *loader, const char *source) {
    LossMask *masks = bs_calloc((size_t)loader->num_shards, sizeof(LossMask));
    int found = 0;
    for (int i = 0; i < loader->num_shards; i++)
        found += loss_mask_open(&masks[i], loader->shards[i].path, loader->shards[i].num_tokens);
    if (found > 0 && found < loader->num_shards)
        bs_die("%s: %d of its %d shards have loss masks (.mask files): all or none", source, found, loader->num_shards);
    if (found == 0) {
        free(masks);
        return;
    }
    bool any = false; /* a token the loss counts: stops at the first, so a real data set costs little */
    for (int i = 0; i < loader->num_shards && !any; i++)
        for (size_t t = 0; t < loader->shards[i].num_tokens && !any; t++) any = masks[i].counted[t] != 0;
    if (!any)
        bs_die("%s: its loss masks count no token (no assistant response in the data): the loss would be 0 and "
               "nothing learned", source);
    loader->masks = masks;
}

/* Each shard keeps its file open (shard_read): a source of many shards raises the soft limit on open files
 * toward the hard one (past it, opening a shard fails with a line naming it). */
static void allow_open_files(size_t shards) {
    const rlim_t want = (rlim_t)shards + 256; /* and what else the process opens */
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= want) return;
    r.rlim_cur = r.rlim_max != RLIM_INFINITY && r.rlim_max < want ? r.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &r);
}

void loader_open(DataLoader *loader, const char *source, int T, int vocab_size, uint64_t seed, bool shuffle) {
    memset(loader, 0, sizeof *loader);
    char **paths = list_sources(source, &loader->num_shards);
    loader->shards = bs_calloc((size_t)loader->num_shards, sizeof(TokenShard));
    loader->first_window = bs_calloc((size_t)loader->num_shards + 1, sizeof(size_t));
    allow_open_files((size_t)loader->num_shards);
    for (int i = 0; i < loader->num_shards; i++) {
        shard_open(&loader->shards[i], paths[i], vocab_size);
        size_t n = loader->shards[i].num_tokens;
        loader->first_window[i + 1] = loader->first_window[i] + (n > (size_t)T ? (n - 1) / (size_t)T : 0);
        loader->num_tokens += n;
        free(paths[i]);
    }
    free(paths);
    open_masks(loader, source);
    loader->num_windows = loader->first_window[loader->num_shards];
    if (loader->num_windows == 0)
        bs_die_about("seq_len", "%s holds %zu tokens, too few for one sequence of %d tokens (+1)", source, loader->num_tokens, T);
    if (loader->num_windows > UINT32_MAX)
        bs_die_about("seq_len", "%s has more than 2^32 sequences; use a longer sequence", source);
    loader->T = T;
    loader->seed = seed;
    loader->shuffle = shuffle;
    loader->perm_epoch = UINT64_MAX;
    if (shuffle) loader->perm = bs_malloc(loader->num_windows * sizeof(uint32_t));
    loader->window = bs_malloc(((size_t)T + 1) * sizeof(uint16_t));
}

void loader_close(DataLoader *loader) {
    for (int i = 0; loader->masks && i < loader->num_shards; i++) loss_mask_free(&loader->masks[i]);
    free(loader->masks);
    for (int i = 0; i < loader->num_shards; i++) shard_close(&loader->shards[i]);
    free(loader->shards);
    free(loader->first_window);
    free(loader->perm);
    free(loader->window);
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

/* The shard and first token of sequence seq. */
static void locate(DataLoader *loader, uint64_t seq, int *shard, size_t *first) {
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
    *shard = lo;
    *first = (window - loader->first_window[lo]) * (size_t)loader->T;
}

void loader_sequence(DataLoader *loader, uint64_t seq, int32_t *inputs, int32_t *targets) {
    int shard;
    size_t first;
    locate(loader, seq, &shard, &first);
    uint16_t *src = loader->window;
    shard_read(&loader->shards[shard], first, (size_t)loader->T + 1, src);
    const uint8_t *counted = loader->masks ? loader->masks[shard].counted + first : NULL;
    for (int t = 0; t < loader->T; t++) {
        inputs[t] = src[t];
        targets[t] = !counted || counted[t + 1] ? src[t + 1] : -1;
    }
}

uint64_t loader_counted(DataLoader *loader, uint64_t first, uint64_t n) {
    if (!loader->masks) return n * (uint64_t)loader->T;
    uint64_t total = 0;
    for (uint64_t s = first; s < first + n; s++) {
        int shard;
        size_t at;
        locate(loader, s, &shard, &at);
        const uint8_t *counted = loader->masks[shard].counted + at;
        for (int t = 1; t <= loader->T; t++) total += counted[t];
    }
    return total;
}
