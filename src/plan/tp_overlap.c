/* tp_overlap.c: tensor-parallel collectives beside their GEMMs (see
 * tp_overlap.h). */
#include "plan/tp_overlap.h"

#include <math.h>

#include "plan/comms.h"

/* all-gather by ring exchange: t - 1 hops, each beside one chunk's GEMM */
static double ring_exchange(int t, double half, double gemm) { return pipelined_cost(t, half / (t - 1), gemm / t); }

/* GEMM in chunks on the SMs the communication leaves, each chunk's
 * reduce-scatter beside the next chunk; the last exposed */
static double pipelined_reduce_scatter(double half, double gemm, int sms) {
    double n = TP_OVERLAP_SPLITS;
    if (sms <= TP_OVERLAP_RS_SMS) return half / n + pipelined_cost(TP_OVERLAP_SPLITS, half / n, gemm / n);
    double slowed = gemm * sms / (sms - TP_OVERLAP_RS_SMS);
    return half / n + (n - 1) * fmax(0.0, (half - slowed) / n) + (slowed - gemm);
}

double tp_exposed(const Layout *l, double half, const LinearTimes *g, int sms) {
    double forwards = l->recompute == RECOMPUTE_FULL ? 2.0 : 1.0;
    if (l->tp < 2) return 0.0;
    if (!l->tp_overlap) return forwards * 4.0 * half + 4.0 * half;
    int t = l->tp;
    double forward = ring_exchange(t, half, g->qkv) + pipelined_reduce_scatter(half, g->proj, sms) +
                     ring_exchange(t, half, g->up) + pipelined_reduce_scatter(half, g->down, sms);
    double backward = ring_exchange(t, half, g->proj) + ring_exchange(t, half, g->down) +
                      2.0 * overlapped_cost(half, g->qkv) + 2.0 * overlapped_cost(half, g->up);
    return forwards * forward + backward;
}
