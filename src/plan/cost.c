/* cost.c: GPU-hour rates (see cost.h). */
#include "plan/cost.h"

#include <math.h>

double ownership_rate(const MoneyInput *m) {
    if (m->gpu_price_usd <= 0 || m->amortize_years <= 0 || m->hours_per_year <= 0) return 0.0;
    return m->gpu_price_usd / (m->amortize_years * m->hours_per_year) + m->power_usd_per_gpu_hour;
}

double break_even_utilisation(const MoneyInput *m, double cloud) {
    if (m->gpu_price_usd <= 0 || m->amortize_years <= 0 || cloud <= 0) return 0.0;
    if (cloud <= m->power_usd_per_gpu_hour) return INFINITY;
    return m->gpu_price_usd / (m->amortize_years * HOURS_PER_YEAR * (cloud - m->power_usd_per_gpu_hour));
}

double planning_rate(const MoneyInput *m) {
    return m->usd_per_gpu_hour > 0 ? m->usd_per_gpu_hour : ownership_rate(m);
}
