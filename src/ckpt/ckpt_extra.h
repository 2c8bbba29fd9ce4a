/* ckpt_extra.h: per-rank state of a checkpoint that is not a range of the
 * flat parameter layout: the error-feedback residuals of compressed
 * communication (what this rank has not yet sent), which belong to one rank
 * of one layout and cannot be resharded.
 *
 * File extra_RRRRR.bin beside the rank files, written into the same
 * temporary directory (so it appears atomically with the checkpoint):
 *   "BSXTRA01"  8 bytes
 *   label       128 bytes, NUL-padded: what the state is valid for (the
 *               writer's codec, data-parallel size and index, ...)
 *   count       u32 arrays, then per array: name (32 bytes), floats (u64)
 *   data        the arrays' floats, in order
 *   xxh64       u64 of everything before it
 * Reading compares the label and every array's name and length: state of
 * another layout is refused (the caller starts from zero and says so);
 * a damaged file is an error naming it. */
#ifndef BS_CKPT_CKPT_EXTRA_H
#define BS_CKPT_CKPT_EXTRA_H

#include <stdbool.h>
#include <stddef.h>

#define CKPT_EXTRA_LABEL 128

typedef struct {
    const char *name;
    float *data;
    size_t count;
} CkptExtraArray;

void ckpt_extra_path(char *out, size_t n, const char *dir, int rank);
void ckpt_write_extra(const char *dir, int rank, const char *label, const CkptExtraArray *arrays, int num_arrays);
/* Fills the arrays from DIR's file of `rank`. False, with the reason in why,
 * when there is no such file or it was written for another label or shapes;
 * dies naming the file when it is damaged. */
bool ckpt_read_extra(const char *dir, int rank, const char *label, const CkptExtraArray *arrays, int num_arrays,
                     char *why, size_t why_size);

#endif
