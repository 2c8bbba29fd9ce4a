/* nf4_driver.c: model/nf4.c on one tensor for tests/test_nf4.py: reads n
 * float32 values from stdin and writes to stdout, in order, the packed codes
 * ((n + 1) / 2 bytes), the 8-bit absmax codes (one per block of 64), the
 * absmax2 values (float32, one per 256 blocks), the offset (float32), the
 * dequantized values (n float32) and the 256 values of the dynamic map. */
#include <stdio.h>
#include <stdlib.h>

#include "model/nf4.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: nf4_driver N < floats > quantized\n");
        return 2;
    }
    const size_t n = (size_t)strtoull(argv[1], NULL, 10);
    const Nf4Sizes s = nf4_sizes(n);
    float *x = malloc((n + 1) * sizeof(float)), *back = malloc((n + 1) * sizeof(float));
    float *scratch = malloc((s.blocks + 1) * sizeof(float)), *absmax2 = malloc((s.groups + 1) * sizeof(float));
    unsigned char *codes = malloc(s.code_bytes + 1), *absmax_codes = malloc(s.blocks + 1);
    float offset, map[256];
    if (fread(x, sizeof(float), n, stdin) != n) {
        fprintf(stderr, "nf4_driver: expected %zu floats on stdin\n", n);
        return 1;
    }
    const Nf4Tensor t = {codes, absmax_codes, absmax2, &offset};
    nf4_quantize(x, n, t, scratch);
    nf4_dequantize(t, n, back);
    nf4_dynamic_map(map);
    fwrite(codes, 1, s.code_bytes, stdout);
    fwrite(absmax_codes, 1, s.blocks, stdout);
    fwrite(absmax2, sizeof(float), s.groups, stdout);
    fwrite(&offset, sizeof(float), 1, stdout);
    fwrite(back, sizeof(float), n, stdout);
    fwrite(map, sizeof(float), 256, stdout);
    free(x), free(back), free(scratch), free(absmax2), free(codes), free(absmax_codes);
    return 0;
}
