/* reliability.h: failures over a long run and what they cost: expected
 * interruptions from a per-GPU mean time between failures, the checkpoint
 * interval that wastes least (Young 1974; Daly 2006), and goodput, the
 * share of wall-clock time that is useful training.
 *
 * Failures are taken as independent and exponential; one failure stops the
 * whole synchronous job, which then restarts from the last checkpoint. */
#ifndef BS_PLAN_RELIABILITY_H
#define BS_PLAN_RELIABILITY_H

/* Llama 3 405B pre-training: 419 unexpected interruptions in 54 days on
 * 16,384 H100 GPUs (Llama 3 paper, section 3.3.4), as GPU-hours per failure. */
#define LLAMA3_MTBF_GPU_HOURS (54.0 * 24.0 * 16384.0 / 419.0)

typedef struct {
    double mtbf_gpu_hours;     /* mean time between failures of one GPU (with its share of host and network) */
    double checkpoint_seconds; /* job stalled while one checkpoint is written */
    double restart_seconds;    /* detect, reschedule, reload after a failure */
} ReliabilityInput;

typedef struct {
    double job_mtbf_s;   /* the whole job's mean time between failures */
    double young_s;      /* sqrt(2 delta M) */
    double daly_s;       /* Daly's higher-order optimum (used) */
    double goodput;      /* useful time / wall time at the Daly interval */
    double wall_s;       /* wall-clock time to train, failures included */
    double interruptions;/* expected failures over wall_s */
} Reliability;

double young_interval(double checkpoint_s, double mtbf_s);
/* Daly 2006 eq. 37: for delta < 2M, sqrt(2 delta M) (1 + sqrt(delta/(2M))/3
 * + delta/(18 M)) - delta; else M. */
double daly_interval(double checkpoint_s, double mtbf_s);
/* Daly 2006 eq. 20: wall time to do `work_s` seconds of computation with
 * checkpoints every tau, checkpoint cost delta, restart R, failures of mean M:
 * M e^{R/M} (e^{(tau + delta)/M} - 1) work_s / tau. */
double daly_wall_time(double work_s, double tau, double checkpoint_s, double restart_s, double mtbf_s);
Reliability reliability_estimate(const ReliabilityInput *in, int gpus, double train_seconds);

#endif
