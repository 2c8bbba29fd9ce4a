/* hardware.h: what the planner knows about one kind of accelerator and the
 * machines it sits in: peak FLOP/s per precision, memory size and
 * bandwidth, the NVLink domain (GPUs per node, per-GPU bandwidth) and the
 * inter-node network (per-GPU bandwidth and latency).
 *
 * Bandwidths are line rates per GPU per direction; comms.c applies the
 * fraction that collectives reach. A calibration file (measured on the
 * machine at hand by `batchscale bench --calibrate`) may add measured matmul
 * rates by size and measured collectives, which then replace the models. */
#ifndef BS_PLAN_HARDWARE_H
#define BS_PLAN_HARDWARE_H

#include <stdbool.h>

typedef enum { PREC_BF16, PREC_FP8, PREC_FP32 } Precision;
/* MPI: the library's own algorithm; only ever measured, never modelled. */
/* IN_NETWORK: the switches reduce (NVLink SHARP inside a node, InfiniBand
 * SHARP between nodes), so each GPU sends and receives the buffer once. */
typedef enum { ALGO_RING, ALGO_TREE, ALGO_HIERARCHICAL, ALGO_MPI, ALGO_IN_NETWORK, ALGO_COUNT } CollectiveAlgo;

#define HW_MAX_GEMM_POINTS 32

typedef struct {
    double m, n, k;   /* C (m x n) = A (m x k) B (k x n) */
    double flops_per_s;
} GemmPoint;

typedef struct {
    bool present;
    double alpha;     /* seconds per algorithm step */
    double busbw;     /* bytes/s, nccl-tests convention */
} CollectiveFit;

typedef struct {
    char name[48];
    double peak_bf16, peak_fp8, peak_fp32; /* dense FLOP/s (0: not supported) */
    double gemm_efficiency;      /* best fraction of the BF16 (FP32) peak a matmul reaches (MAMF) */
    double gemm_efficiency_fp8;  /* the same at FP8 (0: as gemm_efficiency) */
    /* the shapes (m, n, k) at which those were measured, BF16 then FP8,
     * and the GPU's streaming multiprocessors (0: no tile model, plain
     * roofline; gemm_model.h) */
    double mamf_shape[2][3];
    int sms;
    double attention_efficiency; /* fused (flash) attention, fraction of peak */
    bool attention_fa3;          /* that rate is FlashAttention-3's (Hopper; attention_kernels.h: flash2_share) */
    /* a calibrated device's fused attention (0: none measured): the
     * forward's rate (causal half counted) and backward's time over it */
    double attention_flops, attention_backward_ratio;
    double hbm_bytes, hbm_bw;    /* capacity (bytes), bandwidth (bytes/s) */
    int gpus_per_node;
    double nvlink_bw, nvlink_latency; /* per GPU per direction (bytes/s), per step (s) */
    double net_bw, net_latency;       /* inter-node, per GPU per direction */
    /* in-network reduction (--in-network-reduction on): the NVSwitch's
     * reduction bandwidth per GPU (0: the switch cannot reduce) and whether
     * the network switches reduce (InfiniBand SHARP, at the NIC's rate) */
    bool in_network;
    double nvls_bw;
    /* calibration (optional) */
    double elementwise_bw;       /* bytes/s of element-wise kernels (0: use hbm_bw) */
    int n_gemm;
    GemmPoint gemm[HW_MAX_GEMM_POINTS];
    CollectiveFit coll[ALGO_COUNT];
    /* a calibrated CPU node: its cores, shared by gpus_per_node processes of
     * threads_per_gpu threads each (0: a GPU, nothing shared) */
    int cpu_cores, threads_per_gpu;
} Hardware;

const char *precision_name(Precision p);
bool precision_parse(const char *s, Precision *out);
/* Peak FLOP/s at precision p (FP8 falls back to BF16 where absent). */
double hardware_peak(const Hardware *hw, Precision p);
/* Bytes per element of matmul operands and of stored activations. */
int precision_operand_bytes(Precision p);
int precision_activation_bytes(Precision p);
/* A calibrated CPU node given more threads (processes x threads per
 * process) than cores time-slices them: each process runs cores / threads of
 * the time, so every rate it was calibrated at alone (matmul, memory,
 * element-wise, collective bandwidth; latencies inversely) scales by that
 * share. Applies it and returns the share (1: nothing shared). */
double hardware_share_cores(Hardware *hw);
const char *algo_name(CollectiveAlgo a);
bool algo_parse(const char *s, CollectiveAlgo *out);

#endif
