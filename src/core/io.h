/* io.h: checked file and directory helpers. Each failure dies with one line
 * naming the file and what to do next (llm.c's fopenCheck idea). Writers
 * that must be atomic write to a temporary name, fsync, then rename. */
#ifndef BS_CORE_IO_H
#define BS_CORE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

FILE *bs_fopen(const char *path, const char *mode);
void bs_fread_exact(void *dst, size_t bytes, FILE *f, const char *path);
void bs_fwrite_all(const void *src, size_t bytes, FILE *f, const char *path);
/* fflush + fsync + fclose, dying on any failure (a full disk shows up here). */
void bs_fclose_synced(FILE *f, const char *path);
void bs_fsync_dir(const char *dir);

bool bs_path_exists(const char *path);
bool bs_is_dir(const char *path);
long long bs_file_size(const char *path); /* -1 if it cannot be read */
void bs_mkdir_p(const char *path);
/* Whether a file (is_dir false) or a directory (is_dir true) could be written
 * at path, checked before any work and leaving nothing behind: a file's
 * directory must exist and be writable (files are written to PATH.tmp and
 * renamed); a directory that does not exist yet must be creatable (its
 * nearest existing ancestor a writable directory). False with the reason,
 * naming the path, in why. */
bool bs_check_writable(const char *path, bool is_dir, char *why, size_t why_size);
/* Remove a file or a directory tree; returns 0 on success. */
int bs_remove_tree(const char *path);
/* Whole file into a NUL-terminated buffer the caller frees. */
char *bs_read_file(const char *path, size_t *len_out);
/* Write a whole file atomically: PATH.tmp, fsync, rename. */
void bs_write_file_atomic(const char *path, const void *data, size_t len);

#endif
