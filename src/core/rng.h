/* rng.h: a small seeded random number generator (xoshiro256**, seeded with
 * splitmix64). Its whole state is four words, so it is saved in checkpoints
 * and restored exactly. Not cryptographic. */
#ifndef BS_CORE_RNG_H
#define BS_CORE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} Rng;

void rng_seed(Rng *rng, uint64_t seed);
uint64_t rng_next(Rng *rng);
/* Uniform in [0, 1) with 24 random bits. */
float rng_uniform(Rng *rng);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t rng_below(Rng *rng, uint64_t n);
/* splitmix64's finaliser: a bijective mix of one word, for counter-based
 * draws (a value from a key, no state: the same on every rank and layout). */
uint64_t rng_mix64(uint64_t z);
/* Standard normal (Box-Muller, in double precision). Draws exactly two words,
 * which gpt_init_range relies on to skip values it does not keep. */
double rng_normal(Rng *rng);

#endif
