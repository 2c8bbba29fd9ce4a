/* presets.c: the model and accelerator tables.
 *
 * Models: GPT-2 (Radford et al. 2019; llm.c pads the vocabulary to a
 * multiple of 128), GPT-3 175B (Brown et al. 2020, Table 2.1), Llama 3
 * 8B/70B/405B (Llama 3 paper, Table 3), Mixtral 8x7B (Jiang et al. 2024) as
 * the mixture-of-experts example, and this project's demo (`make demo`).
 * Dropout is off in every preset (modern pre-training does not use it).
 *
 * Accelerators: NVIDIA datasheets (dense, no sparsity): A100 SXM 312 TFLOP/s
 * BF16, 156 TF32, 1.555 / 2.039 TB/s HBM, NVLink3 600 GB/s both directions,
 * HDR InfiniBand 200 Gb/s per GPU (DGX A100); H100 SXM 989 BF16 / 1979 FP8,
 * 3.35 TB/s, NVLink4 900 GB/s both directions, NDR 400 Gb/s per GPU (DGX
 * H100); H200 the same chip with 141 GB at 4.8 TB/s; B200 2.25 PF BF16 /
 * 4.5 PF FP8, 180 GB at 8 TB/s, NVLink5 1.8 TB/s both directions. The GEMM
 * H100 and H200 reduce in the NVSwitch (NVLink SHARP, comms.h); the B200's
 * rate is not known here (0: not modelled). Streaming multiprocessors:
 * 108 (A100), 132 (H100, H200). Matmul efficiencies are Stas
 * Bekman's measured MAMF (ml-engineering, "Maximum Achievable Matmul FLOPS
 * comparison table", BF16 and FP8 e4m3, with the best shape M x N x K each
 * was found at: A100 SXM 86.9% at 1024x10240x5120; H100 SXM 80.3% at
 * 2048x2048x13312 BF16, 70.9% at 1024x9216x14336 FP8; H200 BF16 as H100,
 * 73.4% at 1280x4096x12032 FP8; B200 77.6% at 1792x16128x3072, 76.3% at
 * 15360x4096x3072). The attention efficiencies and the latencies are the
 * planner's assumptions (docs/PLANNER.md says where they come from);
 * calibration replaces them. The B200 has 148 SMs but no tile model
 * (gemm_model.h says why): sms = 0. */
#include "plan/presets.h"

#include "plan/comms.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define GIB 1073741824.0

/* Batch and training tokens: GPT-2 512 x 1024 tokens (its paper), GPT-3
 * 175B 3.2M and 300B (Brown et al. Table 2.1), Llama 3 16M final batch and
 * 15T+ tokens, Mixtral unpublished (4M, 1T assumed), the demo's 16 x 128
 * tokens for 300 steps. */
static const ModelPreset MODELS[] = {
    /*  name          L    h      a    kv   ffn    V       s    mult act        norm            bias   tied   pos    drop  E  k  hd  imbalance shared device node win wl probs  fp8 mtp  batch   tokens */
    {{"gpt2-124m", 12, 768, 12, 12, 3072, 50257, 1024, 128, ACT_GELU, NORM_LAYERNORM, true, true, true, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 524288, 10e9},
    {{"gpt2-350m", 24, 1024, 16, 16, 4096, 50257, 1024, 128, ACT_GELU, NORM_LAYERNORM, true, true, true, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 524288, 10e9},
    {{"gpt2-774m", 36, 1280, 20, 20, 5120, 50257, 1024, 128, ACT_GELU, NORM_LAYERNORM, true, true, true, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 524288, 10e9},
    {{"gpt2-1.5b", 48, 1600, 25, 25, 6400, 50257, 1024, 128, ACT_GELU, NORM_LAYERNORM, true, true, true, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 524288, 10e9},
    {{"gpt3-175b", 96, 12288, 96, 96, 49152, 50257, 2048, 128, ACT_GELU, NORM_LAYERNORM, true, true, true, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 3145728, 300e9},
    {{"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 1, ACT_SWIGLU, NORM_RMSNORM, false, false, false, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 16777216, 15e12},
    {{"llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 1, ACT_SWIGLU, NORM_RMSNORM, false, false, false, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 16777216, 15e12},
    {{"llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 1, ACT_SWIGLU, NORM_RMSNORM, false, false, false, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 16777216, 15.6e12},
    {{"mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, 1, ACT_SWIGLU, NORM_RMSNORM, false, false, false, false, 8, 2, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 4194304, 1e12},
    {{"demo", 4, 192, 4, 4, 768, 257, 128, 128, ACT_GELU, NORM_LAYERNORM, true, true, true, false, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, false, FP8_TE, 0}, 2048, 614400},
};

static const Hardware HARDWARE[] = {
    {.name = "a100-40g", .peak_bf16 = 312e12, .peak_fp8 = 0, .peak_fp32 = 156e12, .gemm_efficiency = 0.869,
     .mamf_shape = {{1024, 10240, 5120}}, .sms = 108, .attention_efficiency = 0.60, .hbm_bytes = 40 * GIB, .hbm_bw = 1.555e12, .gpus_per_node = 8,
     .nvlink_bw = 300e9, .nvlink_latency = 2e-6, .net_bw = 25e9, .net_latency = 6e-6},
    {.name = "a100-80g", .peak_bf16 = 312e12, .peak_fp8 = 0, .peak_fp32 = 156e12, .gemm_efficiency = 0.869,
     .mamf_shape = {{1024, 10240, 5120}}, .sms = 108, .attention_efficiency = 0.60, .hbm_bytes = 80 * GIB, .hbm_bw = 2.039e12, .gpus_per_node = 8,
     .nvlink_bw = 300e9, .nvlink_latency = 2e-6, .net_bw = 25e9, .net_latency = 6e-6},
    {.name = "h100-sxm", .peak_bf16 = 989e12, .peak_fp8 = 1979e12, .peak_fp32 = 494e12, .gemm_efficiency = 0.803,
     .gemm_efficiency_fp8 = 0.709, .mamf_shape = {{2048, 2048, 13312}, {1024, 9216, 14336}}, .sms = 132,
     .attention_efficiency = 0.50, .attention_fa3 = true, .hbm_bytes = 80 * GIB, .hbm_bw = 3.35e12, .gpus_per_node = 8,
     .nvlink_bw = 450e9, .nvlink_latency = 2e-6, .net_bw = 50e9, .net_latency = 6e-6, .nvls_bw = H100_NVLS_BW},
    {.name = "h200", .peak_bf16 = 989e12, .peak_fp8 = 1979e12, .peak_fp32 = 494e12, .gemm_efficiency = 0.803,
     .gemm_efficiency_fp8 = 0.734, .mamf_shape = {{2048, 2048, 13312}, {1280, 4096, 12032}}, .sms = 132,
     .attention_efficiency = 0.50, .attention_fa3 = true, .hbm_bytes = 141e9, .hbm_bw = 4.8e12, .gpus_per_node = 8,
     .nvlink_bw = 450e9, .nvlink_latency = 2e-6, .net_bw = 50e9, .net_latency = 6e-6, .nvls_bw = H100_NVLS_BW},
    {.name = "b200", .peak_bf16 = 2250e12, .peak_fp8 = 4500e12, .peak_fp32 = 1125e12, .gemm_efficiency = 0.776,
     .gemm_efficiency_fp8 = 0.763, .mamf_shape = {{1792, 16128, 3072}, {15360, 4096, 3072}}, .sms = 0,
     .attention_efficiency = 0.50, .hbm_bytes = 180e9, .hbm_bw = 8e12, .gpus_per_node = 8,
     .nvlink_bw = 900e9, .nvlink_latency = 2e-6, .net_bw = 50e9, .net_latency = 6e-6},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

bool model_preset(const char *name, ModelPreset *out) {
    for (size_t i = 0; i < COUNT(MODELS); i++)
        if (strcasecmp(name, MODELS[i].shape.name) == 0) {
            *out = MODELS[i];
            return true;
        }
    return false;
}

bool hardware_preset(const char *name, Hardware *out) {
    for (size_t i = 0; i < COUNT(HARDWARE); i++)
        if (strcasecmp(name, HARDWARE[i].name) == 0) {
            *out = HARDWARE[i];
            return true;
        }
    return false;
}

static void join_names(const char *const *names, size_t count, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < count && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

void model_preset_names(char *buf, size_t n) {
    const char *names[COUNT(MODELS)];
    for (size_t i = 0; i < COUNT(MODELS); i++) names[i] = MODELS[i].shape.name;
    join_names(names, COUNT(MODELS), buf, n);
}

void hardware_preset_names(char *buf, size_t n) {
    const char *names[COUNT(HARDWARE)];
    for (size_t i = 0; i < COUNT(HARDWARE); i++) names[i] = HARDWARE[i].name;
    join_names(names, COUNT(HARDWARE), buf, n);
}
