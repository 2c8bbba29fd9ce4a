/* test_tok_loader.c: prints what the training loader (data/loader.h) reads
 * from token shards, so the tokenizer tests can compare shards written by
 * `batchscale prepare` with a peer's tokens. With shuffling off, window w of
 * T+1 tokens is printed as one line: its T inputs then the last target.
 * Usage: test_tok_loader SHARDS T VOCAB_SIZE */
#include <stdio.h>
#include <stdlib.h>

#include "data/loader.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_tok_loader SHARDS T VOCAB_SIZE\n");
        return 2;
    }
    int T = atoi(argv[2]);
    DataLoader loader;
    loader_open(&loader, argv[1], T, atoi(argv[3]), 0, false);
    int32_t *inputs = malloc((size_t)T * sizeof(int32_t)), *targets = malloc((size_t)T * sizeof(int32_t));
    for (size_t w = 0; w < loader.num_windows; w++) {
        loader_sequence(&loader, w, inputs, targets);
        for (int t = 0; t < T; t++) printf("%d ", inputs[t]);
        printf("%d\n", targets[T - 1]);
    }
    free(inputs);
    free(targets);
    loader_close(&loader);
    return 0;
}
