/* moe_sim.c: sim's MoE kernels (DK_MOE_*): moe_math.h's row functions,
 * one row after another. */
#include "device/moe_math.h"
#include "device/sim_kernels.h"

void sim_moe(const DeviceCall *call) {
    const MoeArgs *a = &call->a.moe;
    const size_t slots = (size_t)a->N * a->K;
    switch (call->kernel) {
    case DK_MOE_ROUTE:
        for (int t = 0; t < a->N; t++) km_moe_route_row(a, t);
        break;
    case DK_MOE_DISPATCH:
        km_moe_dispatch(a);
        for (size_t p = 0; p < slots; p++)
            for (int c = 0; c < a->C; c++) km_moe_gather(a, p, c);
        break;
    case DK_MOE_COMBINE:
        for (int t = 0; t < a->N; t++)
            for (int c = 0; c < a->C; c++) km_moe_combine(a, t, c);
        break;
    case DK_MOE_COMBINE_BACKWARD:
        for (size_t j = 0; j < slots; j++) km_moe_combine_backward(a, j);
        break;
    case DK_MOE_ROUTER_BACKWARD:
        for (int t = 0; t < a->N; t++) km_moe_router_backward_row(a, t);
        break;
    case DK_MOE_SCATTER_BACKWARD:
        for (int t = 0; t < a->N; t++)
            for (int c = 0; c < a->C; c++) km_moe_scatter_backward(a, t, c);
        break;
    default: break;
    }
}
