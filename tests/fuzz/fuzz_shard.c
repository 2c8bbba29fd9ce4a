/* fuzz_shard.c: libFuzzer harness of the token-shard reader. The input is a
 * file's bytes after two bytes choosing the vocabulary size (0: unchecked).
 * shard_try_open must either refuse it with a reason or accept a shard whose
 * size matches its header and whose tokens are inside the vocabulary. */
#include <stdint.h>
#include <string.h>

#include "data/shard.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int vocab = data[0] | data[1] << 8;
    char dir[256], path[300];
    fuzz_scratch_dir(dir, sizeof dir, "shard");
    snprintf(path, sizeof path, "%s/shard.bin", dir);
    fuzz_write_file(path, data + 2, size - 2);
    TokenShard shard;
    char why[4400] = "";
    if (!shard_try_open(&shard, path, vocab, why, sizeof why)) {
        FUZZ_CHECK(why[0] && strstr(why, path), "a refused shard needs a reason naming the file");
        return 0;
    }
    FUZZ_CHECK(shard.num_tokens * 2 + SHARD_HEADER_INTS * 4 == size - 2, "accepted shard of the wrong size");
    for (size_t i = 0; vocab > 0 && i < shard.num_tokens; i++)
        FUZZ_CHECK(shard.tokens[i] < vocab, "accepted token %u outside vocabulary %d", shard.tokens[i], vocab);
    shard_close(&shard);
    return 0;
}
