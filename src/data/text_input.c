/* text_input.c: input listing and the streaming span reader (see text_input.h). */
#include "data/text_input.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void append(char ***paths, int *count, int *cap, const char *path) {
    if (*count == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        char **grown = realloc(*paths, (size_t)*cap * sizeof(char *));
        if (!grown) bs_die("out of memory listing input files");
        *paths = grown;
    }
    (*paths)[(*count)++] = strdup(path);
}

char **text_inputs_list(const char *spec, const char *flag, int *count) {
    char **paths = NULL;
    int n = 0, cap = 0;
    if (bs_is_dir(spec)) {
        DIR *d = opendir(spec);
        if (!d) bs_die("%s %s: cannot open the directory: %s", flag, spec, strerror(errno));
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", spec, e->d_name);
            if (!bs_is_dir(path)) append(&paths, &n, &cap, path);
        }
        closedir(d);
        if (n == 0) bs_die("%s %s: the directory holds no files", flag, spec);
    } else if (bs_path_exists(spec)) {
        append(&paths, &n, &cap, spec);
    } else {
        glob_t g;
        int rc = glob(spec, 0, NULL, &g);
        if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0))
            bs_die("%s %s: no such file, directory or matching files", flag, spec);
        if (rc != 0) bs_die("%s %s: cannot expand the pattern", flag, spec);
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (!bs_is_dir(g.gl_pathv[i])) append(&paths, &n, &cap, g.gl_pathv[i]);
        globfree(&g);
        if (n == 0) bs_die("%s %s: the pattern matches only directories", flag, spec);
    }
    qsort(paths, (size_t)n, sizeof(char *), compare_names);
    *count = n;
    return paths;
}

void text_inputs_free(char **paths, int count) {
    for (int i = 0; i < count; i++) free(paths[i]);
    free(paths);
}

void text_reader_open(TextReader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->file = bs_fopen(path, "rb");
    r->path = strdup(path);
    r->size = bs_file_size(path);
    r->cap = 1 << 16;
    r->buf = bs_malloc(r->cap);
}

void text_reader_close(TextReader *r) {
    if (r->file) fclose(r->file);
    free(r->path);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Reads until buf holds at least `bytes` (or the file ends). */
static void fill(TextReader *r, size_t bytes) {
    if (bytes > r->cap) {
        while (bytes > r->cap) r->cap *= 2;
        unsigned char *grown = realloc(r->buf, r->cap);
        if (!grown) bs_die("out of memory reading %s (%zu bytes without a place to split)", r->path, r->cap);
        r->buf = grown;
    }
    while (!r->eof && r->len < bytes) {
        size_t got = fread(r->buf + r->len, 1, bytes - r->len, r->file);
        if (got == 0) {
            if (ferror(r->file)) bs_die("read error in %s: %s", r->path, strerror(errno));
            r->eof = true;
        }
        r->len += got;
    }
}

bool text_reader_next(TextReader *r, size_t want, long long boundary, TextSpan *span, long long *offset) {
    memmove(r->buf, r->buf + r->consumed, r->len - r->consumed);
    r->len -= r->consumed;
    r->offset += (long long)r->consumed;
    r->consumed = 0;
    size_t target = want > 0 ? want : 1;
    if (boundary > r->offset && (unsigned long long)(boundary - r->offset) < target)
        target = (size_t)(boundary - r->offset);
    size_t slack = 4096, cut = 0;
    for (;;) {
        fill(r, target + slack);
        if (r->len == 0) return false;
        if (r->eof && r->len <= target) break;
        cut = pretok_find_cut(r->buf, r->len, target);
        if (cut || r->eof) break;
        slack *= 2; /* no place to cut yet: read further */
    }
    r->consumed = cut ? cut : r->len;
    *span = (TextSpan){r->buf, r->consumed};
    *offset = r->offset;
    return true;
}
