/* check.h: the C tests' one check API: CHECK(cond, printf-args) counts a
 * failure and prints where and why, without stopping the test, so one run
 * reports every failing case; main returns non-zero when failures > 0.
 * Tests that print their own "FAIL ..." line (a rank's view, a figure beside
 * its tolerance) count into the same `failures`. Include once per test
 * program (it defines the counter). A test that cannot run here prints why
 * and returns 77 (CTest's skip). */
#ifndef BS_TESTS_CHECK_H
#define BS_TESTS_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            failures++;                                                                                               \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            fprintf(stderr, __VA_ARGS__);                                                                             \
            fprintf(stderr, "\n");                                                                                    \
        }                                                                                                             \
    } while (0)

#endif
