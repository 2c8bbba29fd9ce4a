/* fuzz_util.h: what the libFuzzer harnesses share: a scratch directory per
 * harness process (under $FUZZ_SCRATCH, a tmpfs when run_fuzz.sh can get
 * one, so fsync costs nothing), writing a file, and a failed property that
 * aborts (libFuzzer saves the input as a crash). */
#ifndef BS_FUZZ_UTIL_H
#define BS_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void fuzz_scratch_dir(char *out, size_t n, const char *name) {
    const char *root = getenv("FUZZ_SCRATCH");
    snprintf(out, n, "%s/%s-%d", root && *root ? root : "/tmp", name, (int)getpid());
    mkdir(out, 0700);
}

static inline void fuzz_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

#define FUZZ_CHECK(cond, ...)                                                                                        \
    do {                                                                                                             \
        if (!(cond)) {                                                                                               \
            fprintf(stderr, "property failed: " __VA_ARGS__);                                                        \
            fprintf(stderr, "\n");                                                                                   \
            abort();                                                                                                 \
        }                                                                                                            \
    } while (0)

#endif
