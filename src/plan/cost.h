/* cost.h: money per GPU-hour, from a cloud rate or from owning the GPU
 * (purchase amortized over its useful life, plus power and cooling).
 * A rate of 0 means "not given". */
#ifndef BS_PLAN_COST_H
#define BS_PLAN_COST_H

typedef struct {
    double usd_per_gpu_hour;       /* the rate to plan with (cloud contract or own) */
    double gpu_price_usd;          /* ownership: purchase price per GPU (its share of the server) */
    double amortize_years, hours_per_year;
    double power_usd_per_gpu_hour; /* electricity and cooling */
    double on_demand_usd_per_gpu_hour, spot_usd_per_gpu_hour;
} MoneyInput;

/* price / (years x hours per year) + power; 0 when no price is given. */
double ownership_rate(const MoneyInput *m);
/* The rate to plan with: usd_per_gpu_hour if given, else ownership. */
double planning_rate(const MoneyInput *m);

#define HOURS_PER_YEAR 8766.0 /* 365.25 days */

/* Break-even utilisation against a cloud rate: the fraction u of the year's
 * hours an owned GPU must be used for its cost per used hour, price /
 * (years x u x 8766) + power, to equal the cloud rate; so u = price /
 * (years x 8766 x (cloud - power)). Above 1: owning never pays; 0: no
 * price or no cloud rate given; infinity when power alone costs more. */
double break_even_utilisation(const MoneyInput *m, double cloud_usd_per_gpu_hour);

#endif
