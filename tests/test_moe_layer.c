/* test_moe_layer.c: the driver test_moe.py checks the MoE layer with
 * (src/model/moe.h): one forward and backward of random inputs, every input
 * and result written as float64 for a PyTorch reference.
 *
 * usage: test_moe_layer OUT ROUTER GATES SCALE CAPACITY N C F E K AUX Z BIAS SEED
 *   ROUTER softmax|sigmoid, GATES normalized|unnormalized|pre-softmax, SCALE
 *   the routed scale, CAPACITY the capacity factor (0: dropless), AUX
 *   and Z the loss coefficients, BIAS the scale of the selection bias.
 * The last quarter of the rows repeat the first ones, so equal scores occur
 * and capacity ties are broken by position. The gradient buffers start at
 * random values (written too), so the reference sees that backward adds.
 * OUT: x, router_w, experts, bias, dout, dx0, drouter0, dexperts0, out, dx,
 * drouter, dexperts, then aux, z, routed (E), kept (E); shapes from the
 * arguments.
 * usage: test_moe_layer check: the config and EP checks' one-line reasons,
 * the bias update and the metrics on loads given here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli/subject_flags.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/moe.h"

static float *random_floats(Rng *rng, size_t n, double scale) {
    float *v = bs_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * rng_normal(rng));
    return v;
}

static void write_doubles(FILE *f, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double d = v[i];
        fwrite(&d, sizeof d, 1, f);
    }
}

/* Each bad value gives one line naming the quantity, and its flag where cli/ names the subjects. */
static int check_configs(void) {
    cli_name_subjects();
    const MoeConfig good = {.channels = 8, .hidden = 16, .experts = 4, .top_k = 2, .routed_scale = 1, .aux_coef = 0.01};
    char why[256];
    CHECK(moe_config_check(&good, false, why, sizeof why), "a good config refused");
    struct { MoeConfig c; bool given; const char *words, *flag; } bad[] = {
        {good, false, "experts per token must be 1..4", "--moe-top-k"},
        {good, false, "number of experts must be 1..", "--experts"},
        {good, true, "capacity factor must be a number > 0", "--capacity-factor"},
        {good, true, "capacity factor must be a number > 0", "--capacity-factor"},
        {good, false, "experts' hidden width must be >= 1", "--moe-ffn"},
        {good, false, "load-balancing loss coefficient must be", "--moe-aux-loss"},
        {good, false, "routed experts' scale must be a number > 0", "--moe-routed-scale"},
        {good, false, "routed experts' scale must be a number > 0", "--moe-routed-scale"},
        {good, false, "pre-softmax gates are the softmax router's", "--moe-gates, --router"}};
    bad[0].c.top_k = 5, bad[1].c.experts = 0, bad[2].c.capacity_factor = 0, bad[3].c.capacity_factor = -1.5;
    bad[4].c.hidden = 0, bad[5].c.aux_coef = -1, bad[6].c.routed_scale = 0, bad[7].c.routed_scale = NAN;
    bad[8].c.gates = MOE_GATES_PRE_SOFTMAX, bad[8].c.router = MOE_ROUTER_SIGMOID;
    MoeConfig sigmoid = good;
    sigmoid.router = MOE_ROUTER_SIGMOID, sigmoid.gates = MOE_GATES_UNNORMALIZED;
    CHECK(moe_config_check(&sigmoid, false, why, sizeof why), "sigmoid scores with unnormalized gates refused");
    MoeGates parsed;
    for (int g = 0; g <= MOE_GATES_PRE_SOFTMAX; g++)
        CHECK(moe_parse_gates(moe_gates_name((MoeGates)g), &parsed) && parsed == (MoeGates)g, "gates %d's name", g);
    CHECK(!moe_parse_gates("renormalized", &parsed), "an unknown gates name parsed");
    CHECK(moe_default_gates(1) == MOE_GATES_UNNORMALIZED && moe_default_gates(2) == MOE_GATES_NORMALIZED,
          "the default gates: unnormalized at top-1, normalized above");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        bool ok = moe_config_check(&bad[i].c, bad[i].given, why, sizeof why);
        printf("%s\n", why);
        CHECK(!ok && strstr(why, bad[i].words) && strstr(why, bad[i].flag) && !strchr(why, '\n'),
              "case %zu: '%s' should say '%s' and name %s", i, why, bad[i].words, bad[i].flag);
    }
    CHECK(moe_ep_check(8, 4, 8, why, sizeof why), "ep 4 of 8 experts, dp 8 refused");
    const int ep_bad[][3] = {{8, 3, 6}, {8, 4, 6}, {8, 0, 8}};
    for (int i = 0; i < 3; i++) {
        why[0] = '\0';
        bool ok = moe_ep_check(ep_bad[i][0], ep_bad[i][1], ep_bad[i][2], why, sizeof why);
        printf("%s\n", why);
        CHECK(!ok && strstr(why, "expert-parallel degree") && strstr(why, "(flags: --ep, --") && !strchr(why, '\n'),
              "ep case %d: '%s'", i, why);
    }
    return failures ? 1 : 0;
}

/* The bias update and the metrics on loads 5 1 3 3 (mean 3), 10 of 12 kept. */
static int check_balance(void) {
    const MoeConfig cfg = {.channels = 8, .hidden = 16, .experts = 4, .top_k = 2, .aux_coef = 0.01};
    MoeStats s;
    memset(&s, 0, sizeof s);
    const double routed[4] = {5, 1, 3, 3}, kept[4] = {4, 1, 3, 2};
    for (int i = 0; i < 4; i++) s.routed[i] = routed[i], s.kept[i] = kept[i], s.prob[i] = 1.5;
    s.tokens = 6, s.lse_sq = 12;
    float bias[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    moe_bias_update(&cfg, bias, &s, 0.125);
    const float want[4] = {0.375f, 0.625f, 0.5f, 0.5f}; /* sign(3 - load) x 0.125 */
    for (int i = 0; i < 4; i++) CHECK(bias[i] == want[i], "bias %d: %g, want %g", i, bias[i], want[i]);
    MoeMetrics m = moe_metrics(&cfg, &s);
    CHECK(m.max_load == 5 && m.mean_load == 3, "loads max %g mean %g", m.max_load, m.mean_load);
    CHECK(fabs(m.dropped_fraction - 2.0 / 12) < 1e-15, "dropped fraction %g", m.dropped_fraction);
    /* c E sum f P = 0.01 x 4 x sum(routed / 12 x 1.5 / 6); z = 0 */
    CHECK(fabs(m.aux_loss - 0.01 * 4 * (12.0 / 12) * 0.25) < 1e-15 && m.z_loss == 0, "aux %g z %g", m.aux_loss,
          m.z_loss);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "check") == 0) return check_configs() | check_balance();
    if (argc != 15) bs_die("usage: test_moe_layer OUT ROUTER GATES SCALE CAPACITY N C F E K AUX Z BIAS SEED");
    enum { OUT = 1, ROUTER, GATES, SCALE, CAPACITY, ROWS, CHANNELS, HIDDEN, EXPERTS, TOPK, AUX, Z, BIAS, SEED };
    MoeConfig cfg = {.channels = atoi(argv[CHANNELS]), .hidden = atoi(argv[HIDDEN]), .experts = atoi(argv[EXPERTS]),
                     .top_k = atoi(argv[TOPK]), .routed_scale = atof(argv[SCALE]),
                     .capacity_factor = atof(argv[CAPACITY]), .aux_coef = atof(argv[AUX]), .z_coef = atof(argv[Z])};
    const size_t N = (size_t)atol(argv[ROWS]);
    char why[256];
    if (!moe_parse_router(argv[ROUTER], &cfg.router)) bs_die("unknown router %s", argv[ROUTER]);
    if (!moe_parse_gates(argv[GATES], &cfg.gates)) bs_die("unknown gates %s", argv[GATES]);
    if (!moe_config_check(&cfg, cfg.capacity_factor != 0, why, sizeof why)) bs_die("%s", why);
    const size_t C = (size_t)cfg.channels, E = (size_t)cfg.experts, nr = moe_router_numel(&cfg);
    const size_t ne = E * moe_expert_numel(&cfg);
    Rng rng;
    rng_seed(&rng, (uint64_t)atoll(argv[SEED]));
    float *x = random_floats(&rng, N * C, 1), *wr = random_floats(&rng, nr, 0.5);
    float *experts = random_floats(&rng, ne, 0.3), *bias = random_floats(&rng, E, atof(argv[BIAS]));
    float *dout = random_floats(&rng, N * C, 1), *dx = random_floats(&rng, N * C, 1);
    float *dwr = random_floats(&rng, nr, 1), *dexperts = random_floats(&rng, ne, 1);
    for (size_t i = N - N / 4; i < N; i++) memcpy(x + i * C, x + (i - (N - N / 4)) * C, sizeof(float) * C);
    FILE *f = fopen(argv[OUT], "wb");
    if (!f) bs_die("cannot write %s", argv[OUT]);
    const float *inputs[] = {x, wr, experts, bias, dout, dx, dwr, dexperts};
    const size_t sizes[] = {N * C, nr, ne, E, N * C, N * C, nr, ne};
    for (int i = 0; i < 8; i++) write_doubles(f, inputs[i], sizes[i]);

    MoeLayer *layer = moe_create(&cfg, N);
    MoeStats stats;
    memset(&stats, 0, sizeof stats);
    float *out = bs_malloc(sizeof(float) * N * C);
    moe_forward(layer, out, x, N, wr, experts, bias, &stats);
    moe_backward(layer, dx, dwr, dexperts, dout, x, wr, experts, &stats);
    const float *results[] = {out, dx, dwr, dexperts};
    const size_t rsizes[] = {N * C, N * C, nr, ne};
    for (int i = 0; i < 4; i++) write_doubles(f, results[i], rsizes[i]);
    double losses[2];
    moe_losses(&cfg, &stats, &stats, &losses[0], &losses[1]);
    fwrite(losses, sizeof(double), 2, f);
    fwrite(stats.routed, sizeof(double), E, f);
    fwrite(stats.kept, sizeof(double), E, f);
    fclose(f);
    MoeMetrics m = moe_metrics(&cfg, &stats);
    printf("max/mean load %.3f, dropped %.4f, aux %.6f, z %.6f\n", m.max_load / m.mean_load, m.dropped_fraction,
           m.aux_loss, m.z_loss);
    moe_free(layer);
    free(x), free(wr), free(experts), free(bias), free(dout), free(dx), free(dwr), free(dexperts), free(out);
    return 0;
}
