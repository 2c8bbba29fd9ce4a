/* fuzz_safetensors.c: libFuzzer harness of the safetensors reader. The input
 * is a file's bytes, read as a model file: the reader must either refuse it
 * with a one-line reason naming the file, or accept a valid model shape whose
 * weights it then reads (or refuses, with a reason) without reading outside
 * the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/safetensors_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[256], path[300];
    fuzz_scratch_dir(dir, sizeof dir, "safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    fuzz_write_file(path, data, size);
    GPTConfig cfg = {.num_heads = 1};
    char why[4608] = "";
    if (!safetensors_try_read_config(path, &cfg, why, sizeof why)) {
        FUZZ_CHECK(why[0] && strstr(why, path) && !strchr(why, '\n'), "a refused file needs one line naming it");
        return 0;
    }
    FUZZ_CHECK(cfg.num_layers >= 0 && cfg.channels > 0 && cfg.vocab_size > 0, "accepted an invalid shape");
    if (gpt_num_params(&cfg) > (1u << 22)) return 0; /* a valid but large model: not worth allocating here */
    GPT model = {.cfg = cfg, .num_params = gpt_num_params(&cfg)}; /* what the reader uses (gpt.c is not linked) */
    model.params = calloc(model.num_params ? model.num_params : 1, sizeof(float));
    why[0] = 0;
    if (!safetensors_try_read_params(path, &model, why, sizeof why))
        FUZZ_CHECK(why[0] && strstr(why, path), "refused weights need a reason naming the file");
    free(model.params);
    return 0;
}
