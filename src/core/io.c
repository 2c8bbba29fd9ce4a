/* io.c: checked file helpers (see io.h). */
#define _GNU_SOURCE
#include "core/io.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

FILE *bs_fopen(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) {
        const char *what = (mode[0] == 'r') ? "reading" : "writing";
        bs_die("cannot open %s for %s: %s", path, what, strerror(errno));
    }
    return f;
}

void bs_fread_exact(void *dst, size_t bytes, FILE *f, const char *path) {
    size_t got = fread(dst, 1, bytes, f);
    if (got != bytes) {
        if (ferror(f)) bs_die("read error in %s: %s", path, strerror(errno));
        bs_die("%s is truncated: expected %zu more bytes, found %zu", path, bytes, got);
    }
}

void bs_fwrite_all(const void *src, size_t bytes, FILE *f, const char *path) {
    if (bytes && fwrite(src, 1, bytes, f) != bytes)
        bs_die("write error in %s: %s (is the disk full?)", path, strerror(errno));
}

void bs_fclose_synced(FILE *f, const char *path) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        bs_die("cannot flush %s to disk: %s (is the disk full?)", path, strerror(errno));
    if (fclose(f) != 0) bs_die("cannot close %s: %s", path, strerror(errno));
}

void bs_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) bs_die("cannot open directory %s: %s", dir, strerror(errno));
    if (fsync(fd) != 0 && errno != EINVAL) bs_die("cannot sync directory %s: %s", dir, strerror(errno));
    close(fd);
}

bool bs_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

bool bs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

long long bs_file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (long long)st.st_size;
}

void bs_mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) bs_die("bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                bs_die("cannot create directory %s: %s", buf, strerror(errno));
            buf[i] = saved;
        }
    }
    if (!bs_is_dir(path)) bs_die("%s exists and is not a directory", path);
}

/* A directory that exists and that this process may create files in. */
static bool writable_dir(const char *dir, char *why, size_t why_size) {
    if (!bs_is_dir(dir)) {
        snprintf(why, why_size, "%s is not a directory", dir);
        return false;
    }
    char probe[4200]; /* a file made and removed at once: access() would pass root on a read-only mount */
    snprintf(probe, sizeof probe, "%s/.batchscale-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(why, why_size, "cannot write in directory %s: %s", dir, strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}

bool bs_check_writable(const char *path, bool is_dir, char *why, size_t why_size) {
    char dir[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof dir) {
        snprintf(why, why_size, "bad output path '%s'", path);
        return false;
    }
    if (bs_path_exists(path) && bs_is_dir(path) != is_dir) {
        snprintf(why, why_size, "%s exists and is %s", path, is_dir ? "not a directory" : "a directory");
        return false;
    }
    if (is_dir && bs_path_exists(path)) return writable_dir(path, why, why_size);
    memcpy(dir, path, n + 1);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
    for (;;) { /* the parent; for a directory to create, the nearest ancestor that exists */
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else slash[slash == dir] = '\0';
        if (!is_dir || bs_path_exists(dir) || strcmp(dir, ".") == 0 || strcmp(dir, "/") == 0) break;
    }
    if (!is_dir && !bs_path_exists(dir)) {
        snprintf(why, why_size, "cannot write %s: directory %s does not exist", path, dir);
        return false;
    }
    return writable_dir(dir, why, why_size);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int bs_remove_tree(const char *path) {
    if (!bs_path_exists(path)) return 0;
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *bs_read_file(const char *path, size_t *len_out) {
    FILE *f = bs_fopen(path, "rb");
    long long size = bs_file_size(path);
    if (size < 0) bs_die("cannot stat %s: %s", path, strerror(errno));
    char *buf = bs_malloc((size_t)size + 1);
    bs_fread_exact(buf, (size_t)size, f, path);
    fclose(f);
    buf[size] = '\0';
    if (len_out) *len_out = (size_t)size;
    return buf;
}

void bs_write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = bs_fopen(tmp, "wb");
    bs_fwrite_all(data, len, f, tmp);
    bs_fclose_synced(f, tmp);
    if (rename(tmp, path) != 0) bs_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}
