/* reliability.c: checkpoint interval and goodput (see reliability.h). */
#include "plan/reliability.h"

#include <math.h>

double young_interval(double checkpoint_s, double mtbf_s) { return sqrt(2.0 * checkpoint_s * mtbf_s); }

double daly_interval(double checkpoint_s, double mtbf_s) {
    double d = checkpoint_s, M = mtbf_s;
    if (d >= 2.0 * M) return M;
    return sqrt(2.0 * d * M) * (1.0 + sqrt(d / (2.0 * M)) / 3.0 + d / (18.0 * M)) - d;
}

double daly_wall_time(double work_s, double tau, double checkpoint_s, double restart_s, double mtbf_s) {
    double M = mtbf_s;
    return M * exp(restart_s / M) * expm1((tau + checkpoint_s) / M) * work_s / tau;
}

Reliability reliability_estimate(const ReliabilityInput *in, int gpus, double train_seconds) {
    Reliability r = {0};
    r.job_mtbf_s = in->mtbf_gpu_hours * 3600.0 / (gpus > 0 ? gpus : 1);
    r.young_s = young_interval(in->checkpoint_seconds, r.job_mtbf_s);
    r.daly_s = daly_interval(in->checkpoint_seconds, r.job_mtbf_s);
    if (r.daly_s <= 0) r.daly_s = r.young_s;
    r.wall_s = daly_wall_time(train_seconds, r.daly_s, in->checkpoint_seconds, in->restart_seconds, r.job_mtbf_s);
    r.goodput = r.wall_s > 0 ? train_seconds / r.wall_s : 1.0;
    r.interruptions = r.wall_s / r.job_mtbf_s;
    return r;
}
