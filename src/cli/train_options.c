/* train_options.c: `batchscale train`'s option table by section (see train_options.h). */
#include "cli/train_options.h"

#include <string.h>

#include "core/error.h"
#include "model/moe.h"

static int put(OptionSpec *out, const OptionSpec *s, size_t n) {
    memcpy(out, s, n * sizeof *s);
    return (int)n;
}

static int model_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"layers", OPT_INT, &c->model.layers, 1, 1000, "N", "transformer blocks", "4", NULL},
        {"heads", OPT_INT, &c->model.heads, 1, 1024, "N", "attention heads (must divide --channels)", "4", NULL},
        {"channels", OPT_INT, &c->model.channels, 1, 65536, "N", "model width", "128", NULL},
        {"seq-len", OPT_INT, &c->model.seq_len, 1, 1 << 20, "TOKENS", "sequence length (and the model's maximum)", "128", NULL},
        {"vocab-size", OPT_INT, &c->model.vocab_size, 0, 1 << 30, "N", "vocabulary size (0: the tokenizer's)", "0", NULL},
        {"tokenizer", OPT_STRING, &c->model.tokenizer, OPT_NO_RANGE, "NAME", "byte, gpt2 or a trained FILE (default: the data's)", "", NULL},
        {"vocab-dir", OPT_STRING, &c->model.vocab_dir, OPT_NO_RANGE, "DIR", "GPT-2's encoder.json and vocab.bpe, or a Hugging Face tokenizer directory (vocab.json, merges.txt) (--tokenizer gpt2)", "", NULL},
        {"init-from", OPT_STRING, &c->model.init_from, OPT_NO_RANGE, "PATH", "start from an llm.c model file, a .safetensors file or a Hugging Face GPT-2 directory (sets the shape)", "", NULL},
        {"seed", OPT_LONG, &c->model.seed, 0, 9.2e18, "N", "seed of initial weights, data order and sampling", "1337", NULL},
        {"recompute", OPT_ENUM, &c->model.recompute, OPT_NO_RANGE, "MODE", "activations recomputed in backward to save memory (Megatron's granularity): none, selective (each layer's attention probabilities) or full (all but each layer's input); bitwise the same training", "none", TRAIN_RECOMPUTE_WORDS},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int precision_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"precision", OPT_ENUM, &c->precision.mode, OPT_NO_RANGE, "P", "fp32, bf16 (matmuls in bf16, fp32 masters) or fp8 (the transformer layers' matmuls in FP8: --fp8-recipe)", "fp32", TRAIN_PRECISION_WORDS},
        {"bf16-matmul", OPT_ENUM, &c->precision.bf16_matmul, OPT_NO_RANGE, "PATH",
         "bf16 products: auto (oneDNN where the CPU has bf16 arithmetic), onednn (AVX-512 only), or widen (fp32 sgemm)", "auto", TRAIN_BF16_MATMUL_WORDS},
        {"fp8-recipe", OPT_ENUM, &c->precision.fp8_recipe, OPT_NO_RANGE, "R",
         "fp8: delayed (E4M3 forward, E5M2 gradients, per-tensor scales from an amax history) or block (E4M3, power-of-two scales per 1x128 / 128x128 block)", "delayed", TRAIN_FP8_RECIPE_WORDS},
        {"fp8-amax-history", OPT_INT, &c->precision.fp8_amax_history, 1, 1 << 20, "STEPS", "fp8 delayed: steps of amax history", "1024", NULL},
        {"fp8-amax-algo", OPT_ENUM, &c->precision.fp8_amax_algo, OPT_NO_RANGE, "A", "fp8 delayed: the history's max or its most_recent", "max", TRAIN_FP8_AMAX_ALGO_WORDS},
        {"fp8-margin", OPT_INT, &c->precision.fp8_margin, -64, 64, "M", "fp8 delayed: scales divided by 2^M", "0", NULL},
        {"fp8-high-precision", OPT_ENUM, &c->precision.fp8_high_precision, OPT_NO_RANGE, "P",
         "fp8: the precision of what is not FP8 (embedding, output head, loss; bf16 or fp32 matmuls)", "bf16", TRAIN_FP8_HIGH_PRECISION_WORDS},
        {"activations", OPT_ENUM, &c->precision.activations, OPT_NO_RANGE, "P", "--device cuda|sim with --precision bf16: what each layer keeps for backward, fp32 or bf16 (half the bytes; statistics, softmax, loss and sums in fp32)", "fp32", TRAIN_ACTIVATIONS_WORDS},
        {"fp8-param-gather", OPT_FLAG, &c->precision.fp8_param_gather, OPT_NO_RANGE, "", "fp8 delayed, ZeRO-3: gather the layers' weights as E4M3 codes (1 byte, not 4)", NULL, NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int device_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"device", OPT_ENUM, &c->device.kind, OPT_NO_RANGE, "D", "where the step runs: cpu, cuda (an NVIDIA GPU) or sim (the device seam on the host: tests)", "cpu", TRAIN_DEVICE_WORDS},
        {"sim-memory", OPT_INT, &c->device.sim_memory_mb, 0, 1 << 30, "MB", "--device sim: the simulated device's memory (0: no limit; tests of a model that does not fit)", "0", NULL},
        {"attention", OPT_ENUM, &c->device.attention, OPT_NO_RANGE, "K", "the attention kernel: auto (flash2 on a device where a head has at most 128 channels, else causal), causal (unfused: keeps the T x T probabilities) or flash2 (fused FlashAttention-2; --device cuda or sim)", "auto", TRAIN_ATTENTION_WORDS},
        {"cuda-graphs", OPT_ENUM, &c->device.cuda_graphs, OPT_NO_RANGE, "on|off", "--device cuda or sim: replay each training micro-batch and each AdamW update from a captured graph (not with fp8)", "off", TRAIN_CUDA_GRAPHS_WORDS},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int batch_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"micro-batch", OPT_INT, &c->batch.micro_batch, 1, 1 << 20, "SEQS", "sequences per micro-step per process", "8", NULL},
        {"global-batch", OPT_INT, &c->batch.global_batch, 0, 1 << 30, "SEQS", "sequences per optimizer step (0: micro-batch x dp)", "0", NULL},
        {"batch-schedule", OPT_STRING, &c->batch.schedule, OPT_NO_RANGE, "SPEC",
         "constant | ramp:START:INC:TOKENS | step:\"0:B0 T1:B1 ...\" | exp:START:TOKENS | llama3[:T1:T2] | adaptive:MIN:MAX | goodput:MIN:MAX", "constant", NULL},
        {"strict-batch", OPT_FLAG, &c->batch.strict, OPT_NO_RANGE, "", "error (not round down) on a batch that is not a multiple of micro-batch x dp", NULL, NULL},
        {"lr-scaling", OPT_ENUM, &c->batch.lr_scaling, OPT_NO_RANGE, "RULE", "learning rate vs batch: none, linear or sqrt", "none", TRAIN_LR_SCALING_WORDS},
        {"base-batch", OPT_INT, &c->batch.base_batch, 0, 1 << 30, "SEQS", "batch at which --lr applies (0: --global-batch)", "0", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int optim_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"optimizer", OPT_ENUM, &c->optim.kind, OPT_NO_RANGE, "NAME", "adamw, sgd, lamb, lars or onebit-adam (--freeze-step)", "adamw", TRAIN_OPTIMIZER_WORDS},
        {"steps", OPT_INT, &c->optim.steps, 1, 1e9, "N", "optimizer steps", "100", NULL},
        {"lr", OPT_DOUBLE, &c->optim.lr, 0, 10, "RATE", "peak learning rate", "1e-3", NULL},
        {"min-lr", OPT_DOUBLE, &c->optim.min_lr, 0, 10, "RATE", "learning rate at the end of the cosine decay", "1e-4", NULL},
        {"warmup", OPT_INT, &c->optim.warmup, 0, 1e9, "STEPS", "linear warm-up steps", "10", NULL},
        {"warmup-tokens", OPT_LONG, &c->optim.warmup_tokens, 0, 9e18, "TOKENS", "warm-up length in tokens (0: --warmup steps)", "0", NULL},
        {"train-tokens", OPT_LONG, &c->optim.train_tokens, 0, 9e18, "TOKENS", "train this many tokens (0: --steps steps)", "0", NULL},
        {"weight-decay", OPT_DOUBLE, &c->optim.weight_decay, 0, 10, "X", "AdamW decoupled weight decay (matrices, embeddings)", "0.1", NULL},
        {"grad-clip", OPT_DOUBLE, &c->optim.grad_clip, 0, 1e9, "NORM", "clip the global gradient norm (0: off)", "1.0", NULL},
        {"beta1", OPT_DOUBLE, &c->optim.beta1, 0, 0.999999, "X", "AdamW beta1", "0.9", NULL},
        {"beta2", OPT_DOUBLE, &c->optim.beta2, 0, 0.999999999, "X", "AdamW beta2", "0.95", NULL},
        {"eps", OPT_DOUBLE, &c->optim.eps, 0, 1, "X", "AdamW epsilon", "1e-8", NULL},
        {"momentum", OPT_DOUBLE, &c->optim.momentum, 0, 0.999999, "X", "SGD and LARS momentum", "0.9", NULL},
        {"dampening", OPT_DOUBLE, &c->optim.dampening, 0, 1, "X", "SGD momentum dampening", "0", NULL},
        {"nesterov", OPT_FLAG, &c->optim.nesterov, OPT_NO_RANGE, "", "Nesterov momentum (SGD)", NULL, NULL},
        {"lars-eta", OPT_DOUBLE, &c->optim.lars_eta, 1e-9, 10, "X", "LARS trust coefficient", "1e-3", NULL},
        {"lamb-clamp", OPT_FLAG, &c->optim.lamb_clamp, OPT_NO_RANGE, "", "clamp LAMB's trust ratio to [0.01, 10] (DeepSpeed)", NULL, NULL},
        {"freeze-step", OPT_INT, &c->optim.freeze_step, 0, 1e9, "S", "1-bit Adam: full-precision steps before the variance freezes", "0", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int data_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"data", OPT_STRING, &c->data.train, OPT_NO_RANGE, "PATH", "training shards: a file, a directory or a glob", "data/train", NULL},
        {"val-data", OPT_STRING, &c->data.val, OPT_NO_RANGE, "PATH", "validation shards", "", NULL},
        {"data-order", OPT_ENUM, &c->data.order, OPT_NO_RANGE, "ORDER", "shuffled or sequential", "shuffled", TRAIN_DATA_ORDER_WORDS},
        {"doc-mask", OPT_ENUM, &c->data.doc_mask, OPT_NO_RANGE, "MODE", "attention inside each packed document (documents start at end-of-text): auto (on for loss-masked SFT data), on or off", "auto", TRAIN_DOC_MASK_WORDS},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int eval_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"eval-every", OPT_INT, &c->eval.every, 0, 1e9, "STEPS", "validation loss every N steps (0: off)", "50", NULL},
        {"val-batches", OPT_INT, &c->eval.val_batches, 0, 1e9, "N", "micro-batches per validation", "8", NULL},
        {"target-val-loss", OPT_DOUBLE, &c->eval.target_val_loss, 0, 1e9, "LOSS", "stop when the validation loss reaches it (0: off)", "0", NULL},
        {"sample-every", OPT_INT, &c->eval.sample_every, 0, 1e9, "STEPS", "print a sample every N steps (0: only at the end)", "0", NULL},
        {"sample-tokens", OPT_INT, &c->eval.sample_tokens, 0, 1e6, "N", "tokens per sample (0: no samples)", "200", NULL},
        {"temperature", OPT_DOUBLE, &c->eval.temperature, 0, 100, "T", "sampling temperature (0: greedy)", "0.8", NULL},
        {"top-k", OPT_INT, &c->eval.top_k, 0, 1 << 30, "K", "sample among the K most likely tokens (0: all)", "40", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int output_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"out", OPT_STRING, &c->output.out, OPT_NO_RANGE, "DIR", "run directory: final model.bin (an MoE model: model.safetensors) and ckpt/", "", NULL},
        {"metrics", OPT_STRING, &c->output.metrics, OPT_NO_RANGE, "FILE", "JSON-lines metrics, one object per step", "", NULL},
        {"save-model", OPT_STRING, &c->output.save_model, OPT_NO_RANGE, "FILE", "write the final model: safetensors if FILE ends in .safetensors, else an llm.c file", "", NULL},
        {"ckpt-dir", OPT_STRING, &c->output.ckpt_dir, OPT_NO_RANGE, "DIR", "checkpoint directory (default OUT/ckpt)", "", NULL},
        {"ckpt-every", OPT_INT, &c->output.ckpt_every, 0, 1e9, "STEPS", "checkpoint every N steps (0: only at the end)", "0", NULL},
        {"keep-last", OPT_INT, &c->output.keep_last, 0, 1e6, "N", "checkpoints to keep (0: all)", "3", NULL},
        {"async-ckpt", OPT_FLAG, &c->output.async_ckpt, OPT_NO_RANGE, "", "copy the state and write checkpoints in the background", NULL, NULL},
        {"resume", OPT_STRING, &c->output.resume, OPT_NO_RANGE, "DIR|latest", "continue from a checkpoint", "", NULL},
        {"resume-new-batch", OPT_FLAG, &c->output.resume_new_batch, OPT_NO_RANGE, "", "with --resume: continue a constant-batch checkpoint at another constant --global-batch (optimizer state, step and data position carry over)", NULL, NULL},
        {"log-every", OPT_INT, &c->output.log_every, 1, 1e9, "STEPS", "progress line interval when not on a terminal", "10", NULL},
        {"quiet", OPT_FLAG, &c->output.quiet, OPT_NO_RANGE, "", "print nothing but errors", NULL, NULL},
        {"trace", OPT_STRING, &c->output.trace, OPT_NO_RANGE, "FILE", "write a Chrome trace-event JSON (Perfetto)", "", NULL},
        {"tensorboard", OPT_STRING, &c->output.tensorboard, OPT_NO_RANGE, "DIR", "write TensorBoard event files into DIR", "", NULL},
        {"peak-gflops", OPT_DOUBLE, &c->output.peak_gflops, 0, 1e12, "RATE", "one process's peak GFLOP/s, for the MFU (0: no MFU)", "0", NULL},
        {"baseline-tokens-per-s", OPT_DOUBLE, &c->output.baseline_tokens_per_s, 0, 1e12, "RATE", "1-process rate, for scaling efficiency", "0", NULL},
        {"config", OPT_STRING, &c->output.config, OPT_NO_RANGE, "FILE", "JSON options (e.g. a run's config.json); flags given too override it", "", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int parallel_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"tp", OPT_INT, &c->parallel.tp, 1, 1024, "N", "tensor-parallel ranks (split heads, MLP and vocabulary)", "1", NULL},
        {"pp", OPT_INT, &c->parallel.pp, 1, 1024, "N", "pipeline stages", "1", NULL},
        {"cp", OPT_INT, &c->parallel.cp, 1, 1024, "N", "context-parallel ranks (split each sequence; ring attention)", "1", NULL},
        {"cp-algo", OPT_ENUM, &c->parallel.cp_algo, OPT_NO_RANGE, "ALGO", "context-parallel keys and values: ring or allgather", "ring", TRAIN_CP_ALGO_WORDS},
        {"cp-split", OPT_ENUM, &c->parallel.cp_split, OPT_NO_RANGE, "SPLIT", "sequence chunks per cp rank: zigzag (causally balanced) or contiguous", "zigzag", TRAIN_CP_SPLIT_WORDS},
        {"dp", OPT_INT, &c->parallel.dp, 0, 1 << 20, "N", "data-parallel ranks (0: processes / (tp x cp x pp))", "0", NULL},
        {"pp-schedule", OPT_ENUM, &c->parallel.pp_schedule, OPT_NO_RANGE, "NAME", "pipeline schedule: gpipe, 1f1b, interleaved (--virtual-stages) or zbh1 (backward split into B and W)",
         "1f1b", TRAIN_PP_SCHEDULE_WORDS},
        {"virtual-stages", OPT_INT, &c->parallel.virtual_stages, 1, 8, "V", "layer groups per pipeline rank (interleaved)", "1", NULL},
        {"pp-split", OPT_STRING, &c->parallel.pp_split, OPT_NO_RANGE, "LIST",
         "layers per stage, e.g. 3,5, or auto (balanced by FLOPs, the output layer counted; default: even)", "", NULL},
        {"zero", OPT_INT, &c->parallel.zero, 0, 3, "STAGE", "ZeRO stage: 0 replicate, 1 shard optimizer, 2 +gradients, 3 +parameters", "0", NULL},
        {"bucket-mb", OPT_DOUBLE, &c->parallel.bucket_mb, 0.001, 1024, "MB", "gradient bucket size", "8", NULL},
        {"no-overlap", OPT_FLAG, &c->parallel.no_overlap, OPT_NO_RANGE, "", "reduce gradients after backward, not during it", NULL, NULL},
        {"comm-algo", OPT_ENUM, &c->parallel.comm_algo, OPT_NO_RANGE, "ALGO", "collectives: mpi, ring or hierarchical", "ring", TRAIN_COMM_ALGO_WORDS},
        {"ranks-per-node", OPT_INT, &c->parallel.ranks_per_node, 0, 1 << 20, "N", "emulate nodes of N ranks (0: detect)", "0", NULL},
        {"comm-timeout", OPT_DOUBLE, &c->parallel.comm_timeout, 0.1, 1e7, "SECONDS", "abort the job if a collective stalls this long", "300", NULL},
        {"gpu-comm", OPT_ENUM, &c->parallel.gpu_comm, OPT_NO_RANGE, "PATH", "device buffers between ranks: auto, nccl (one GPU per rank) or host (pinned memory over MPI)", "auto", TRAIN_GPU_COMM_WORDS},
        {"threads", OPT_INT, &c->parallel.threads, 0, 1024, "N", "OpenMP/BLAS threads per process (0: OMP_NUM_THREADS or all)", "0", NULL},
        {"zero-quant-weights", OPT_FLAG, &c->parallel.zero_quant_weights, OPT_NO_RANGE, "", "ZeRO-3: gather parameters in int8 (qwZ)", NULL, NULL},
        {"zero-quant-grads", OPT_FLAG, &c->parallel.zero_quant_grads, OPT_NO_RANGE, "", "ZeRO 1-3: reduce-scatter gradients in int8 (qgZ)", NULL, NULL},
        {"zero-hpz", OPT_FLAG, &c->parallel.zero_hpz, OPT_NO_RANGE, "", "ZeRO-3: node-local parameter copy for backward gathers (hpZ)", NULL, NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int compression_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"grad-compression", OPT_STRING, &c->compression.codec, OPT_NO_RANGE, "CODEC",
         "gradient reduction: none, fp16, bf16, fp8, int8, topk:FRACTION or onebit", "none", NULL},
        {"compression-block", OPT_INT, &c->compression.block, 1, 1 << 30, "N", "elements per scale (fp8, int8)", "256", NULL},
        {"compression-scheme", OPT_STRING, &c->compression.scheme, OPT_NO_RANGE, "S",
         "ring (fp16, bf16, fp8, int8) or exchange (any codec; default for top-k and 1-bit)", "", NULL},
        {"no-error-feedback", OPT_FLAG, &c->compression.no_error_feedback, OPT_NO_RANGE, "", "drop what a codec did not send", NULL, NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int guards_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"skip-spikes", OPT_DOUBLE, &c->guards.skip_spikes, 0, 1e6, "Z", "skip steps whose loss is Z standard deviations above recent ones (0: off)", "0", NULL},
        {"spike-window", OPT_INT, &c->guards.spike_window, 1, 1e6, "STEPS", "steps the spike statistics look back", "50", NULL},
        {"max-skips", OPT_INT, &c->guards.max_skips, 1, 1e9, "N", "stop after N skipped steps in a row", "10", NULL},
        {"straggler-threshold", OPT_DOUBLE, &c->guards.straggler_threshold, 0, 1e6, "X", "name ranks slower than the median by this fraction", "0.2", NULL},
        {"balance", OPT_FLAG, &c->guards.balance, OPT_NO_RANGE, "", "share micro-batches by measured speed (ZeRO 0-1; same result)", NULL, NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int estimators_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"noise-scale", OPT_FLAG, &c->estimators.noise_scale, OPT_NO_RANGE, "", "estimate the gradient noise scale (critical batch)", NULL, NULL},
        {"log-grad-norm-per-rank", OPT_FLAG, &c->estimators.log_grad_norm_per_rank, OPT_NO_RANGE, "", "each rank's local gradient norm before the reduction in the metrics (grad_norm_per_rank)", NULL, NULL},
        {"noise-ema", OPT_DOUBLE, &c->estimators.noise_ema, 0, 0.999999, "X", "smoothing of the noise-scale estimates", "0.99", NULL},
        {"noise-scale-every", OPT_INT, &c->estimators.noise_scale_every, 0, 1 << 30, "N", "also the curvature noise scale B_noise every N steps (4 extra gradient passes each; ZeRO 0; 0: off)", "0", NULL},
        {"noise-probe-every", OPT_INT, &c->estimators.noise_probe_every, 0, 1 << 30, "N", "also the noise scale at the step's weights every N steps, from extra micro-batches (0: off)", "0", NULL},
        {"noise-probe-batches", OPT_INT, &c->estimators.noise_probe_batches, 1, 1 << 20, "K", "--noise-probe-every: extra micro-batches per rank per probe (K x ranks >= 2)", "8", NULL},
        {"noise-probe-ema", OPT_DOUBLE, &c->estimators.noise_probe_ema, 0, 0.999999, "X", "--noise-probe-every: smoothing across probes (0: each probe alone)", "0", NULL},
        {"goodput-every", OPT_INT, &c->estimators.goodput_every, 1, 1 << 30, "N", "--batch-schedule goodput: steps between batch decisions (the first after step 1)", "10", NULL},
        {"goodput-estimator", OPT_ENUM, &c->estimators.goodput_estimator, OPT_NO_RANGE, "NAME", "the noise scale goodput follows: simple, precond, curvature, curvature-precond, probe or probe-precond", "precond", TRAIN_GOODPUT_ESTIMATOR_WORDS},
        {"goodput-noise-scale", OPT_DOUBLE, &c->estimators.goodput_noise_scale, 0, 1e9, "B", "--batch-schedule goodput: follow this noise scale in sequences (batch-sweep's B_crit, say) instead of --goodput-estimator (0: off)", "0", NULL},
        {"goodput-temperature", OPT_FLAG, &c->estimators.goodput_temperature, OPT_NO_RANGE, "", "--batch-schedule goodput: scale the noise scale by the lr schedule's factor (warm-up, decay) over --lr: at a lower lr a step feels less noise", NULL, NULL},
        {"goodput-noise-curve", OPT_STRING, &c->estimators.goodput_noise_curve, OPT_NO_RANGE, "TO:B,...", "--batch-schedule goodput: follow a noise scale that changes with the training loss, B sequences until the loss falls to TO (batch-sweep --along prints it)", "", NULL},
        {"goodput-time-fit", OPT_FLAG, &c->estimators.goodput_time_fit, OPT_NO_RANGE, "", "--batch-schedule goodput: step times from the line t = a + b x batch fitted over the sizes tried, for tried sizes too (one size's timing scatter does not flip a choice)", NULL, NULL},
        {"goodput-time-model", OPT_STRING, &c->estimators.goodput_time_model, OPT_NO_RANGE, "A:B", "--batch-schedule goodput: seconds per step = A + B x batch as given (a line measured once on the cluster, or the planner's) instead of measured: the same choices in every run, none explored", "", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int diloco_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"local-steps", OPT_INT, &c->diloco.local_steps, 0, 1e9, "H", "DiLoCo/FedAvg: inner steps per outer step, no gradient reduction in between (0: off)", "0", NULL},
        {"local-steps-jitter", OPT_INT, &c->diloco.local_steps_jitter, 0, 1e9, "J", "DiLoCo/FedAvg: each worker takes H - j inner steps of a window (j in [0, J] per window and worker, seeded), the average weighted by its steps", "0", NULL},
        {"outer-optimizer", OPT_ENUM, &c->diloco.outer_optimizer, OPT_NO_RANGE, "NAME", "the outer step: nesterov (DiLoCo), sgd or avg (FedAvg)", "nesterov", TRAIN_OUTER_OPTIMIZER_WORDS},
        {"outer-lr", OPT_DOUBLE, &c->diloco.outer_lr, 1e-9, 100, "LR", "outer learning rate (avg: 1)", "0.7", NULL},
        {"outer-momentum", OPT_DOUBLE, &c->diloco.outer_momentum, 0, 0.999999, "MU", "outer momentum (avg: 0)", "0.9", NULL},
        {"prox-mu", OPT_DOUBLE, &c->diloco.prox_mu, 0, 1e6, "MU", "FedProx: mu/2 |w - global|^2 added to the inner loss", "0", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int lora_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"lora-rank", OPT_INT, &c->lora.rank, 0, 65536, "R", "LoRA: train rank-R adapters over the frozen model (0: --lora-init's r, else train the whole model)", "0", NULL},
        {"lora-alpha", OPT_DOUBLE, &c->lora.alpha, 1e-9, 1e9, "A", "LoRA: the adapters' scale is A / R (not given: --lora-init's lora_alpha, else 16)", "16", NULL},
        {"lora-targets", OPT_STRING, &c->lora.targets, OPT_NO_RANGE, "LIST", "LoRA: the adapted layers, comma-separated: qkv, attproj, fc, fcproj or all (not given: --lora-init's target_modules, else all)", "all", NULL},
        {"lora-init", OPT_STRING, &c->lora.init, OPT_NO_RANGE, "PATH", "LoRA: start the adapters from a peft adapter directory or file; the LoRA flags left out take its adapter_config.json's values, and one set to another value is refused", "", NULL},
        {"lora-merge", OPT_FLAG, &c->lora.merge, OPT_NO_RANGE, "", "LoRA: --save-model and --out's model.bin get B A folded into the weights (else the base model; the adapters go to --save-adapters)", NULL, NULL},
        {"lora-dropout", OPT_DOUBLE, &c->lora.dropout, 0, 0.95, "P", "LoRA: dropout on the adapters' input in training (masks keyed by the data and the step, so every layout drops the same; not given: --lora-init's lora_dropout, else 0)", "0", NULL},
        {"base-weights", OPT_ENUM, &c->lora.base_weights, OPT_NO_RANGE, "TYPE", "LoRA: keep the frozen base's linear weights in fp32, bf16, int8 (per-row scales) or nf4 (QLoRA: 4-bit NormalFloat, blocks of 64, double-quantised scales), dequantized for each use", "fp32", TRAIN_BASE_WEIGHTS_WORDS},
        {"save-adapters", OPT_STRING, &c->lora.save_adapters, OPT_NO_RANGE, "DIR", "LoRA: write the final adapters as a peft directory (adapter_model.safetensors, adapter_config.json)", "", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int moe_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"experts", OPT_INT, &c->moe.experts, 0, MOE_MAX_EXPERTS, "E", "Mixture of Experts: every layer's MLP is E experts behind a router (0 or 1: a dense MLP)", "0", NULL},
        {"moe-top-k", OPT_INT, &c->moe.top_k, 1, MOE_MAX_EXPERTS, "K", "MoE: experts each token is routed to", "2", NULL},
        {"moe-ffn", OPT_INT, &c->moe.ffn, 0, 1 << 20, "F", "MoE: each expert's hidden width (0: 4 x channels)", "0", NULL},
        {"router", OPT_ENUM, &c->moe.router, OPT_NO_RANGE, "R", "MoE: softmax, or sigmoid scores (DeepSeek-V3)", "softmax", TRAIN_MOE_ROUTER_WORDS},
        {"moe-gates", OPT_ENUM, &c->moe.gates, OPT_NO_RANGE, "G", "MoE: the combine weights: the top-k scores renormalised to sum 1 (normalized: Mixtral, Megatron's default), as they are (unnormalized: norm_topk_prob false), or pre-softmax (Megatron's name for unnormalized, softmax router); auto: normalized for --moe-top-k > 1, unnormalized for 1 (one renormalised gate is 1 and its router would not learn)", "auto", TRAIN_MOE_GATES_WORDS},
        {"moe-routed-scale", OPT_DOUBLE, &c->moe.routed_scale, 1e-6, 1e6, "S", "MoE: every routed gate times S (DeepSeek-V3's routed_scaling_factor)", "1", NULL},
        {"capacity-factor", OPT_STRING, &c->moe.capacity_factor, OPT_NO_RANGE, "F", "MoE: each expert computes at most ceil(T K / E x F) tokens of a sequence, the lowest scores dropped (default: dropless)", "", NULL},
        {"dropless", OPT_FLAG, &c->moe.dropless, OPT_NO_RANGE, "", "MoE: never drop a token (the default)", NULL, NULL},
        {"moe-aux-loss", OPT_DOUBLE, &c->moe.aux_loss, 0, 1e6, "C", "MoE: the load-balancing loss c E sum f_i P_i (Switch)", "1e-2", NULL},
        {"moe-z-loss", OPT_DOUBLE, &c->moe.z_loss, 0, 1e6, "C", "MoE: the router z-loss c mean(logsumexp^2)", "0", NULL},
        {"moe-bias-update", OPT_DOUBLE, &c->moe.bias_update, 0, 1e6, "U", "MoE: loss-free balancing, each expert's selection bias += U sign(mean load - load) per step (0: off)", "0", NULL},
        {"moe-every", OPT_INT, &c->moe.every, 1, 1 << 20, "N", "MoE: layer l (from 0) has the MoE MLP when (l + 1) % N == 0, the others the dense MLP (2: layers 1, 3, ..)", "1", NULL},
        {"ep", OPT_INT, &c->moe.ep, 1, 1 << 20, "N", "MoE: expert-parallel ranks, inside --dp (--zero 0)", "1", NULL},
        {"upcycle-noise", OPT_DOUBLE, &c->moe.upcycle_noise, 0, 10, "S", "MoE --init-from a dense model (sparse upcycling): each expert is its MLP + S x rms(tensor) x N(0,1) per element, seeded by --seed (0: exact copies)", "0.01", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

static int debug_options(TrainConfig *c, OptionSpec *out) {
    const OptionSpec s[] = {
        {"debug-inject-fault", OPT_STRING, &c->debug.inject_fault, OPT_NO_RANGE, "SPEC", "testing: stall|exit:RANK:STEP, nan|nans:RANK:STEP[:LAYER] (a NaN in that layer's gradient) or slow:RANK:FACTOR", "", NULL},
        {"debug-outlier-scale", OPT_DOUBLE, &c->debug.outlier_scale, -1e9, 1e9, "F", "tests: LayerNorm 1's gain of channel 0 times F at initialisation (0: off)", "0", NULL},
        {"debug-skip-pipe-wait", OPT_FLAG, &c->debug.skip_pipe_wait, OPT_NO_RANGE, "", "tests: on a device, --pp's received activations and gradients are read without waiting for them (sim shows the missing wait)", NULL, NULL},
        {"debug-moe-skew", OPT_DOUBLE, &c->debug.moe_skew, 1e-6, 1e6, "F", "tests: every MoE layer's router row of expert 0 starts multiplied by F (a skewed router)", "1", NULL},
    };
    return put(out, s, sizeof s / sizeof s[0]);
}

typedef struct {
    const char *title;
    int (*fill)(TrainConfig *c, OptionSpec *out);
    bool hidden;
} SectionFill;

static const SectionFill SECTIONS[] = {
    {"Model", model_options, false},
    {"Precision", precision_options, false},
    {"Device", device_options, false},
    {"Batch size", batch_options, false},
    {"Optimizer and schedule", optim_options, false},
    {"Data", data_options, false},
    {"Evaluation and sampling", eval_options, false},
    {"Checkpoints and output", output_options, false},
    {"Parallelism", parallel_options, false},
    {"Gradient compression", compression_options, false},
    {"Guards and stragglers", guards_options, false},
    {"Noise scale and goodput", estimators_options, false},
    {"DiLoCo / FedAvg (low-communication training)", diloco_options, false},
    {"LoRA fine-tuning", lora_options, false},
    {"Mixture of Experts", moe_options, false},
    {"Debugging (tests only; --help-debug)", debug_options, true}
};

OptionTable train_options(TrainConfig *c, OptionSpec *specs, OptionSection *sections, bool *given) {
    const int n = (int)(sizeof SECTIONS / sizeof SECTIONS[0]);
    int count = 0;
    for (int k = 0; k < n && k < TRAIN_SECTIONS_MAX; k++) {
        sections[k] = (OptionSection){SECTIONS[k].title, SECTIONS[k].fill(c, specs + count), SECTIONS[k].hidden};
        count += sections[k].count;
    }
    if (n > TRAIN_SECTIONS_MAX || count > TRAIN_OPTIONS_MAX) bs_die("train_options: raise TRAIN_OPTIONS_MAX");
    return (OptionTable){specs, count, sections, n, given};
}

void train_options_record_given(const OptionTable *table, TrainConfig *c) {
    c->given.count = 0;
    for (int i = 0; i < table->count && c->given.count < TRAIN_GIVEN_MAX; i++)
        if (table->given && table->given[i])
            c->given.offset[c->given.count++] = (unsigned short)((const char *)table->specs[i].target - (const char *)c);
}
