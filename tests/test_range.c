/* test_range.c: core/range.h against element-by-element set arithmetic, and
 * the layer split of parallel/grid.h: the even split, parsing "n0,n1,..."
 * (each bad form's message), formatting it back, and the balanced split
 * against an exhaustive search over every contiguous split. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/range.h"
#include "parallel/grid.h"

/* The named cases: disjoint, touching, overlapping, nested, empty. */
static void test_intersect_cases(void) {
    Range a = range_make(0, 4), far = range_make(10, 2), touching = range_make(4, 4);
    CHECK(range_empty(range_intersect(a, far)), "disjoint ranges meet in %zu elements", range_intersect(a, far).count);
    Range t = range_intersect(a, touching);
    CHECK(range_empty(t) && t.offset == 4, "touching ranges: {%zu,%zu}, expected {4,0}", t.offset, t.count);
    Range o = range_intersect(range_make(0, 6), touching);
    CHECK(o.offset == 4 && o.count == 2, "overlap: {%zu,%zu}, expected {4,2}", o.offset, o.count);
    Range outer = range_make(0, 10), inner = range_make(2, 3);
    Range n1 = range_intersect(outer, inner), n2 = range_intersect(inner, outer);
    CHECK(n1.offset == 2 && n1.count == 3 && n2.offset == 2 && n2.count == 3, "nested: {%zu,%zu} and {%zu,%zu}",
          n1.offset, n1.count, n2.offset, n2.count);
    CHECK(range_empty(range_intersect(range_make(5, 0), outer)), "an empty range meets nothing");
    CHECK(range_end(range_make(7, 5)) == 12, "end of {7,5} is %zu", range_end(range_make(7, 5)));
    CHECK(range_offset_in(inner, outer) == 2, "offset of {2,3} in {0,10}: %zu", range_offset_in(inner, outer));
    CHECK(range_contains(outer, inner) && !range_contains(inner, outer), "containment of nested ranges");
    CHECK(!range_contains(a, touching) && range_contains(a, range_make(4, 0)), "containment at the end of a range");
}

/* Every pair of ranges in [0, 9): intersection, containment and membership
 * against counting the elements one by one. */
static void test_against_elements(void) {
    enum { N = 9 };
    for (size_t ao = 0; ao < N; ao++)
        for (size_t ac = 0; ao + ac <= N; ac++)
            for (size_t bo = 0; bo < N; bo++)
                for (size_t bc = 0; bo + bc <= N; bc++) {
                    Range a = range_make(ao, ac), b = range_make(bo, bc), x = range_intersect(a, b);
                    size_t both = 0, first = N, b_in_a = 0;
                    for (size_t i = 0; i < N; i++) {
                        bool in_a = i >= ao && i < ao + ac, in_b = i >= bo && i < bo + bc;
                        if (in_a != range_has(a, i)) CHECK(false, "range_has({%zu,%zu}, %zu)", ao, ac, i);
                        if (in_a && in_b && first == N) first = i;
                        both += in_a && in_b;
                        b_in_a += in_a && in_b;
                    }
                    CHECK(x.count == both, "{%zu,%zu} ^ {%zu,%zu}: %zu elements, expected %zu", ao, ac, bo, bc, x.count,
                          both);
                    if (both) CHECK(x.offset == first, "{%zu,%zu} ^ {%zu,%zu} starts at %zu, expected %zu", ao, ac,
                                    bo, bc, x.offset, first);
                    if (bc > 0) CHECK(range_contains(a, b) == (b_in_a == bc), "contains({%zu,%zu}, {%zu,%zu})", ao,
                                      ac, bo, bc);
                }
}

static bool same_ints(const int *a, const int *b, int n) { return memcmp(a, b, sizeof(int) * (size_t)n) == 0; }

static void test_even_and_parse(void) {
    int got[8];
    grid_even_split(10, 3, got);
    CHECK(same_ints(got, (int[]){4, 3, 3}, 3), "even split of 10 over 3: %d,%d,%d", got[0], got[1], got[2]);
    char why[512];
    CHECK(grid_parse_split("", 7, 2, got, why, sizeof why) && same_ints(got, (int[]){4, 3}, 2),
          "\"\" is the even split");
    CHECK(grid_parse_split(NULL, 7, 1, got, why, sizeof why) && got[0] == 7, "NULL is the even split");
    CHECK(grid_parse_split("1,5,2", 8, 3, got, why, sizeof why) && same_ints(got, (int[]){1, 5, 2}, 3),
          "\"1,5,2\" parses: %s", why);
    char text[64];
    grid_format_split(got, 3, text, sizeof text);
    CHECK(strcmp(text, "1,5,2") == 0, "formatted back as '%s'", text);

    struct {
        const char *spec;
        int layers, stages;
        const char *message;
    } bad[] = {
        {"1,2", 4, 3, "'1,2' must list 3 comma-separated layer counts (one per stage)"},
        {"1,2,1,0", 4, 3, "'1,2,1,0' must list exactly 3 layer counts (one per stage)"},
        {"0,4", 4, 2, "'0,4': stage 0 needs a layer count of at least 1"},
        {"4,-1", 4, 2, "'4,-1': stage 1 needs a layer count of at least 1"},
        {"x,2", 4, 2, "'x,2': stage 0's layer count is not a number"},
        {"2,,2", 4, 3, "'2,,2': stage 1's layer count is not a number"},
        {"2;2", 4, 2, "'2;2' must list 2 comma-separated layer counts (one per stage)"},
        {"1,1", 4, 2, "'1,1' adds up to 2 layers, but the model has 4"},
        {"99999999999999999999,1", 4, 2, "'99999999999999999999,1': stage 0 cannot hold more than the model's 4 layers"},
        {"", 2, 3, "'': 3 stages need at least 3 layers (the model has 2)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        bool ok = grid_parse_split(bad[i].spec, bad[i].layers, bad[i].stages, got, why, sizeof why);
        CHECK(!ok, "'%s' over %d stages was accepted", bad[i].spec, bad[i].stages);
        CHECK(strcmp(why, bad[i].message) == 0, "'%s': message \"%s\", expected \"%s\"", bad[i].spec, why,
              bad[i].message);
    }
}

/* The largest stage cost of a split: layers, plus last_cost on the last stage. */
static double worst_stage(const int *layers, int pp, double layer_cost, double last_cost) {
    double worst = 0;
    for (int s = 0; s < pp; s++) {
        double c = layers[s] * layer_cost + (s == pp - 1 ? last_cost : 0);
        if (c > worst) worst = c;
    }
    return worst;
}

/* The smallest worst stage over every split of `left` layers into stages s..pp-1. */
static double best_by_search(int *layers, int s, int pp, int left, double layer_cost, double last_cost) {
    if (s == pp - 1) {
        layers[s] = left;
        return worst_stage(layers, pp, layer_cost, last_cost);
    }
    double best = -1;
    for (int n = 1; n <= left - (pp - 1 - s); n++) {
        layers[s] = n;
        double w = best_by_search(layers, s + 1, pp, left - n, layer_cost, last_cost);
        if (best < 0 || w < best) best = w;
    }
    return best;
}

static void test_balanced(void) {
    const double last_costs[] = {0, 0.5, 1, 2.5, 7};
    for (int L = 1; L <= 9; L++)
        for (int pp = 1; pp <= L && pp <= 5; pp++)
            for (size_t c = 0; c < sizeof last_costs / sizeof last_costs[0]; c++) {
                int got[8], scratch[8], total = 0;
                grid_balanced_layers(L, pp, 1.0, last_costs[c], got);
                for (int s = 0; s < pp; s++) total += got[s];
                CHECK(total == L, "balanced split of %d over %d holds %d layers", L, pp, total);
                double best = best_by_search(scratch, 0, pp, L, 1.0, last_costs[c]);
                double mine = worst_stage(got, pp, 1.0, last_costs[c]);
                CHECK(mine == best, "L %d pp %d last %.1f: worst stage %.1f, the best split has %.1f", L, pp,
                      last_costs[c], mine, best);
                char text[64], why[128];
                int back[8];
                grid_format_split(got, pp, text, sizeof text);
                CHECK(grid_parse_split(text, L, pp, back, why, sizeof why) && same_ints(back, got, pp),
                      "text form '%s' does not read back", text);
            }
    int got[4];
    grid_balanced_layers(8, 4, 1.0, 0.0, got); /* a tie: as many on the last stage as costs allow */
    CHECK(same_ints(got, (int[]){2, 2, 2, 2}, 4), "8 over 4 at no head cost: %d,%d,%d,%d", got[0], got[1], got[2],
          got[3]);
    grid_balanced_layers(7, 3, 1.0, 2.0, got);
    CHECK(same_ints(got, (int[]){3, 3, 1}, 3), "7 over 3, head worth 2 layers: %d,%d,%d", got[0], got[1], got[2]);
}

int main(void) {
    test_intersect_cases();
    test_against_elements();
    test_even_and_parse();
    test_balanced();
    if (failures) fprintf(stderr, "%d range/split checks failed\n", failures);
    else printf("range and layer split: all checks passed\n");
    return failures ? 1 : 0;
}
