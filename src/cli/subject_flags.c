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
    /* parallelism and communication */
    {"tp", "--tp"}, {"pp", "--pp"}, {"cp", "--cp"}, {"dp", "--dp"}, {"ep", "--ep"},
    {"pp_schedule", "--pp-schedule"}, {"virtual_stages", "--virtual-stages"}, {"zero_stage", "--zero"},
    {"ranks_per_node", "--ranks-per-node"}, {"comm_timeout", "--comm-timeout"},
    {"zero_quant_grads", "--zero-quant-grads"}, {"grad_codec", "--grad-compression"},
    {"codec_block", "--compression-block"},
    /* LoRA */
    {"lora_rank", "--lora-rank"}, {"lora_targets", "--lora-targets"}, {"lora_dropout", "--lora-dropout"},
    {"base_weights", "--base-weights"},
    /* MoE */
    {"experts", "--experts"}, {"top_k", "--moe-top-k"}, {"moe_ffn", "--moe-ffn"}, {"router", "--router"},
    {"moe_gates", "--moe-gates"}, {"moe_routed_scale", "--moe-routed-scale"}, {"capacity_factor", "--capacity-factor"},
    {"moe_aux_loss", "--moe-aux-loss"}, {"moe_z_loss", "--moe-z-loss"}, {"moe_every", "--moe-every"},
    /* tests */
    {"outlier_scale", "--debug-outlier-scale"},
};

const char *cli_subject_flag(const char *key, void *ctx) {
    (void)ctx;
    for (size_t i = 0; i < sizeof SUBJECT_FLAGS / sizeof SUBJECT_FLAGS[0]; i++)
        if (strcmp(SUBJECT_FLAGS[i].key, key) == 0) return SUBJECT_FLAGS[i].flag;
    return NULL;
}

void cli_name_subjects(void) { bs_set_subject_namer(cli_subject_flag, NULL); }
