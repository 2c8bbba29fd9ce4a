/* subject_flags.c: which flag sets each quantity a library reason names (see subject_flags.h). */
#include "cli/subject_flags.h"

#include <string.h>

#include "core/reason.h"

typedef struct {
    const char *key, *flag;
} SubjectFlag;

/* Keys as the libraries write them (grep bs_reason and bs_die_about); a unit
 * test (reason_subjects) fails on a key missing here. */
static const SubjectFlag SUBJECT_FLAGS[] = {
    /* model */
    {"layers", "--layers"}, {"heads", "--heads"}, {"channels", "--channels"}, {"seq_len", "--seq-len"},
    {"vocab_size", "--vocab-size"}, {"tokenizer", "--tokenizer"}, {"vocab_dir", "--vocab-dir"},
    {"init_from", "--init-from"}, {"device", "--device"}, {"precision", "--precision"},
    /* batch and optimizer */
    {"micro_batch", "--micro-batch"}, {"global_batch", "--global-batch"}, {"batch_schedule", "--batch-schedule"},
    {"strict_batch", "--strict-batch"}, {"lr_scaling", "--lr-scaling"}, {"optimizer", "--optimizer"},
    /* data and checkpoints */
    {"data", "--data or --val-data"}, {"ckpt_dir", "--ckpt-dir (or --out)"}, {"resume", "--resume"},
    {"resume_new_batch", "--resume-new-batch"}, {"seed", "--seed"}, {"data_order", "--data-order"},
    {"save_model", "--save-model"}, {"out", "--out"}, {"metrics", "--metrics"}, {"trace", "--trace"},
    {"tensorboard", "--tensorboard"}, {"doc_mask", "--doc-mask"}, {"train_tokens", "--train-tokens"},
    {"steps", "--steps"},
    /* parallelism and communication */
    {"tp", "--tp"}, {"pp", "--pp"}, {"cp", "--cp"}, {"dp", "--dp"}, {"ep", "--ep"},
    {"pp_schedule", "--pp-schedule"}, {"virtual_stages", "--virtual-stages"}, {"zero_stage", "--zero"},
    {"pp_split", "--pp-split"},
    {"ranks_per_node", "--ranks-per-node"}, {"comm_timeout", "--comm-timeout"},
    {"zero_quant_grads", "--zero-quant-grads"}, {"grad_codec", "--grad-compression"},
    {"codec_block", "--compression-block"}, {"compression_scheme", "--compression-scheme"},
    {"zero_quant_weights", "--zero-quant-weights"}, {"zero_hpz", "--zero-hpz"},
    /* DiLoCo */
    {"local_steps", "--local-steps"}, {"local_steps_jitter", "--local-steps-jitter"},
    /* LoRA */
    {"lora_rank", "--lora-rank"}, {"lora_targets", "--lora-targets"}, {"lora_dropout", "--lora-dropout"},
    {"lora_alpha", "--lora-alpha"}, {"lora_init", "--lora-init"}, {"lora_merge", "--lora-merge"},
    {"save_adapters", "--save-adapters"},
    {"base_weights", "--base-weights"},
    /* MoE */
    {"experts", "--experts"}, {"top_k", "--moe-top-k"}, {"moe_ffn", "--moe-ffn"}, {"router", "--router"},
    {"moe_gates", "--moe-gates"}, {"moe_routed_scale", "--moe-routed-scale"}, {"capacity_factor", "--capacity-factor"},
    {"moe_aux_loss", "--moe-aux-loss"}, {"moe_z_loss", "--moe-z-loss"}, {"moe_every", "--moe-every"},
    {"dropless", "--dropless"}, {"moe_bias_update", "--moe-bias-update"}, {"moe_skew", "--debug-moe-skew"},
    /* guards, estimators, precision */
    {"lr", "--lr"}, {"max_skips", "--max-skips"}, {"balance", "--balance"}, {"noise_probe_every", "--noise-probe-every"},
    {"noise_scale", "--noise-scale"}, {"noise_scale_every", "--noise-scale-every"},
    {"goodput_estimator", "--goodput-estimator"}, {"goodput_noise_scale", "--goodput-noise-scale"},
    {"goodput_noise_curve", "--goodput-noise-curve"}, {"goodput_temperature", "--goodput-temperature"},
    {"goodput_time_model", "--goodput-time-model"},
    {"noise_probe_batches", "--noise-probe-batches"}, {"fp8_amax_history", "--fp8-amax-history"},
    {"fp8_param_gather", "--fp8-param-gather"}, {"fp8_recipe", "--fp8-recipe"}, {"freeze_step", "--freeze-step"},
    /* tests */
    {"outlier_scale", "--debug-outlier-scale"}, {"inject_fault", "--debug-inject-fault"},
};

/* `batchscale plan`'s flags for the planner's quantities (src/plan): its own vocabulary (--hidden, --ffn, --zero). */
static const SubjectFlag PLAN_SUBJECT_FLAGS[] = {
    {"attention", "--attention"}, {"attention_window", "--attention-window"}, {"batch_schedule", "--batch-schedule"},
    {"cp", "--cp"}, {"dp", "--dp"}, {"ep", "--ep"}, {"ep_overlap", "--ep-overlap"}, {"etp", "--etp"},
    {"experts", "--experts"}, {"ffn", "--ffn"}, {"first_stage_layers", "--first-stage-layers"}, {"gpus", "--gpus"},
    {"hardware", "--hardware"}, {"heads", "--heads"}, {"hidden", "--hidden"}, {"kv_heads", "--kv-heads"},
    {"last_stage_layers", "--last-stage-layers"}, {"layer_split", "--layer-split"}, {"layers", "--layers"},
    {"micro_batch", "--micro-batch"}, {"model", "--model"}, {"moe_device_limit", "--moe-device-limit"},
    {"moe_node_limit", "--moe-node-limit"}, {"moe_probs", "--moe-probs"}, {"mtp_layers", "--mtp-layers"},
    {"pipeline_engine", "--pipeline-engine"}, {"pp", "--pp"}, {"rank_order", "--rank-order"},
    {"recompute", "--recompute"}, {"schedule", "--schedule"}, {"seq_len", "--seq-len"},
    {"sequence_parallel", "--sequence-parallel"}, {"shared_experts", "--shared-experts"}, {"top_k", "--top-k"},
    {"tp", "--tp"}, {"tp_overlap", "--tp-overlap"}, {"virtual_stages", "--virtual-stages"}, {"vocab", "--vocab"},
    {"window_layers", "--window-layers"}, {"zero", "--zero"}, {"zero1_reduce", "--zero1-reduce"},
};

typedef struct {
    const SubjectFlag *table;
    size_t count;
} SubjectTable;

static const char *lookup(const char *key, void *ctx) {
    const SubjectTable *t = ctx;
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->table[i].key, key) == 0) return t->table[i].flag;
    return NULL;
}

static const SubjectTable TRAIN_TABLE = {SUBJECT_FLAGS, sizeof SUBJECT_FLAGS / sizeof SUBJECT_FLAGS[0]};
static const SubjectTable PLAN_TABLE = {PLAN_SUBJECT_FLAGS, sizeof PLAN_SUBJECT_FLAGS / sizeof PLAN_SUBJECT_FLAGS[0]};

void cli_name_subjects(void) { bs_set_subject_namer(lookup, (void *)&TRAIN_TABLE); }

void cli_name_plan_subjects(void) { bs_set_subject_namer(lookup, (void *)&PLAN_TABLE); }
