/* plan.h: one training job on one fleet, and what a layout of it costs:
 * per-GPU memory against capacity, the step time broken into compute and
 * exposed communication, bubble, optimizer and stragglers, MFU and HFU,
 * tokens/s and the time to train.
 *
 * A fleet is one GPU kind or two (a mixed fleet): each pipeline then has
 * stages of both kinds, every TP group on one kind, and layers are given to
 * stages in proportion to their speed within what fits in their memory.
 * Pure arithmetic: no I/O, no allocation. */
#ifndef BS_PLAN_PLAN_H
#define BS_PLAN_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/batch.h"
#include "plan/hardware.h"
#include "plan/layer_split.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/model.h"
#include "plan/pipeline_engine.h"

#define PLAN_MAX_KINDS 2

typedef struct {
    int kinds;
    Hardware hw[PLAN_MAX_KINDS];
    int count[PLAN_MAX_KINDS];
} Fleet;

typedef struct {
    ModelShape model;
    Fleet fleet;
    Precision precision;
    AttentionImpl attention;
    PlanBatch batch;   /* global batch in tokens over training */
    double total_tokens;   /* tokens to train */
    double jitter;         /* coefficient of variation of one GPU's step time */
    double reserve_bytes;  /* per GPU, not usable by the job (< 0: 1 GiB + 5%) */
    bool grad_reduce_fp32; /* gradients reduced in FP32 whatever the weights' precision (PyTorch FSDP's
                            * reduce_dtype float32: Composer's DEFAULT mixed precision, torchtitan's default) */
    PipelineEngine pipe_engine; /* whose pipeline runs the sends (pipeline_engine.h) */
    bool zero1_allreduce;       /* ZeRO-1 reduces the gradients with a full all-reduce before the weights'
                                 * all-gather (DeepSpeed's BF16_Optimizer), not a reduce-scatter */
    LayerSplit split;           /* layers per pipeline stage: the planner's balance or a framework's rule */
} PlanInput;

/* Seconds per optimizer step, exposed (not hidden behind compute). */
typedef struct {
    double compute, tp_comm, cp_comm, ep_comm, pp_comm, bubble, dp_comm, optimizer, straggler;
    double step;
} StepTime;

typedef struct {
    int stages;          /* stages of this kind in each pipeline */
    int layers;          /* blocks on its fullest stage */
    double stage_time;   /* seconds per micro-batch on its slowest stage */
} KindStages;

typedef struct {
    Layout layout;
    bool fits;
    MemoryBreakdown memory;    /* the fullest GPU */
    int memory_kind;           /* which fleet kind that GPU is */
    KindStages kind[PLAN_MAX_KINDS];
    int last_stage_layers;     /* blocks on the stage that holds the output layer */
    StepTime time;             /* at the final global batch */
    int micro_batches;         /* per pipeline per step, at the final batch */
    double batch_tokens;       /* the final global batch */
    double tokens_per_s, mfu, hfu;
    double compute_fraction;   /* compute / step: the share of time doing math */
    double train_seconds;      /* whole run, without failures */
    double gpu_hours;
    CollectiveAlgo dp_algo;
    double dp_bytes;           /* gradient bytes per GPU per step (fullest stage) */
} PlanResult;

int fleet_gpus(const Fleet *f);
/* Memory a job may use on one GPU of this kind (capacity minus reserve). */
double usable_memory(const PlanInput *in, const Hardware *hw);
double plan_reserve(const PlanInput *in, const Hardware *hw);

/* Checks that the layout can run this job at all (products, divisibility,
 * batch split); false with a one-line reason naming the flag to change. */
bool layout_check(const PlanInput *in, const Layout *l, char *why, size_t n);
/* Evaluates a layout that passed layout_check. */
void plan_evaluate(const PlanInput *in, const Layout *l, PlanResult *out);

#endif
