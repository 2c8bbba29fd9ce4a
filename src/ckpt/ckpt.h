/* ckpt.h: sharded, atomic, verified checkpoints.
 *
 * A checkpoint is a directory DIR/step_NNNNNNNN holding manifest.json and
 * one file per writing rank, rank_RRRRR.bin. Each rank file holds one
 * contiguous range of the model's flat parameter layout: the parameters and
 * the optimizer's per-parameter state for that range. The manifest records
 * the format version, the layout that wrote it, the model shape, the step,
 * the data position, RNG and schedule state, and each file's range, size and
 * XXH64 checksum. Because files are ranges of one logical layout, any other
 * layout can read back whatever ranges it owns (resharding).
 *
 * Writing: every rank writes its file into DIR/.tmp-step_NNNNNNNN (fsynced);
 * then one rank writes the manifest, fsyncs, and renames the directory into
 * place. A crash at any moment leaves earlier checkpoints untouched and
 * valid; a leftover .tmp directory is ignored and cleaned up later. */
#ifndef BS_CKPT_CKPT_H
#define BS_CKPT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "model/gpt.h"

#define CKPT_FORMAT_VERSION 1
#define CKPT_MAX_FILES 4096
#define CKPT_STATE_ARRAYS 2 /* optimizer arrays per parameter (Adam's m and v) */
#define CKPT_ESTIMATOR_WORDS 128 /* the trainer's further estimator state (train/estimators.h) */

typedef struct {
    char name[32];
    int shard;              /* model shard: tp_index + model stage * tp (0 without model parallelism) */
    uint64_t offset, count; /* range of that shard's flat layout */
    uint64_t bytes;
    uint64_t xxh64;
} CkptFile;

enum { CKPT_UNRECORDED = -1 };

typedef struct CkptManifest {
    long step;                /* optimizer steps completed */
    uint64_t seqs_consumed;   /* data position: sequences consumed by all ranks */
    uint64_t tokens_consumed;
    GPTConfig model; /* an MoE model's moe_router, capacity_factor: CKPT_UNRECORDED where the manifest predates them */
    Rng sample_rng;
    uint64_t data_seed;
    bool data_shuffle;
    int world, dp, tp, pp, zero; /* layout that wrote it; pp counts model stages: pipeline ranks x virtual stages */
    int virtual_stages;          /* model stages per pipeline rank (1 unless interleaved) */
    int cp;                      /* context-parallel ranks per replica (1: none; they hold no parameter shard of their own) */
    int ep;                      /* expert-parallel ranks inside dp (1: none); shard tp + stage tp + ep_index tp pp */
    char pp_split[256];          /* layers per model stage, comma-separated */
    char optimizer[32];
    long optimizer_step;
    char tokenizer[1024];     /* tokenizer_spec() of the run ("" means byte) */
    char batch_schedule[256]; /* the --batch-schedule the run was started with */
    long final_batch;         /* its --global-batch */
    long current_batch;       /* adaptive schedule: the batch reached (0 otherwise) */
    double noise_scale[4];    /* gradient noise scale estimator state (optim/noise_scale.h) */
    int num_estimator_words;  /* 0: none saved (older checkpoints) */
    double estimators[CKPT_ESTIMATOR_WORDS]; /* the other estimators and goodput's table (train/estimators.h) */
    uint64_t lora_base_hash;  /* LoRA: the frozen base's lora_base_hash (0: not recorded, older checkpoints) */
    int num_files;
    CkptFile files[CKPT_MAX_FILES];
} CkptManifest;

/* Names used inside a checkpoint directory. */
void ckpt_step_dir(char *out, size_t n, const char *ckpt_dir, long step);
void ckpt_tmp_dir(char *out, size_t n, const char *ckpt_dir, long step);

/* Removes every temporary directory in ckpt_dir (a write that crashed or
 * failed: never complete, and holding disk space the next write needs). Only
 * the one job that writes ckpt_dir may call it, before it writes. */
void ckpt_remove_unfinished(const char *ckpt_dir);

/* Every writing rank: writes its range of params and state into tmp_dir
 * (state: CKPT_STATE_ARRAYS arrays of count floats, or NULL for zeros) and
 * fills *info. */
void ckpt_write_rank_file(const char *tmp_dir, int rank, size_t offset, size_t count, const float *params,
                          const float *const *state, CkptFile *info);
/* One rank, after every rank file is complete: writes the manifest, makes the
 * checkpoint visible atomically, and keeps only the newest keep_last (0: all). */
void ckpt_commit(const char *ckpt_dir, const char *tmp_dir, const CkptManifest *m, int keep_last);

/* Reads DIR/manifest.json; false with a reason naming the file on any problem. */
bool ckpt_try_read_manifest(const char *dir, CkptManifest *m, char *why, size_t why_size);
/* The same, dying with that reason. */
void ckpt_read_manifest(const char *dir, CkptManifest *m);
/* Checks sizes and checksums of every file; returns false and a reason. */
bool ckpt_verify(const char *dir, const CkptManifest *m, char *why, size_t why_size);
/* Reads range [offset, offset+count) of model shard `shard`'s params and
 * state from whichever files hold it (params or state may be NULL to skip). */
void ckpt_read_shard_range(const char *dir, const CkptManifest *m, int shard, size_t offset, size_t count,
                           float *params, float *const *state);
/* The same for a checkpoint of the whole model (one shard). */
void ckpt_read_range(const char *dir, const CkptManifest *m, size_t offset, size_t count, float *params,
                     float *const *state);
/* "latest" -> newest checkpoint in ckpt_dir that verifies (older complete
 * ones are fallbacks, with a warning naming what was skipped); anything else
 * is taken as a checkpoint directory. Dies if none is usable. */
void ckpt_resolve(const char *arg, const char *ckpt_dir, char *out, size_t n);

#endif
