/* op_checkpoint.c: what torchtitan's per-op checkpointing keeps and
 * recomputes (see op_checkpoint.h). */
#include "plan/op_checkpoint.h"

int block_matmuls(const ModelShape *m, const Layout *l, BlockMatmul out[OP_MAX_MATMULS]) {
    double t = l->tp, h = m->hidden, q = model_q_dim(m), kv = model_kv_dim(m), f = m->ffn;
    int n = 0;
    out[n++] = (BlockMatmul){q / t, h, false};  /* wq */
    out[n++] = (BlockMatmul){kv / t, h, false}; /* wk */
    out[n++] = (BlockMatmul){kv / t, h, false}; /* wv */
    out[n++] = (BlockMatmul){h, q / t, true};   /* wo */
    out[n++] = (BlockMatmul){f / t, h, false};  /* w1 (GELU: up) */
    if (m->act == ACT_SWIGLU) out[n++] = (BlockMatmul){f / t, h, false}; /* w3 */
    out[n++] = (BlockMatmul){h, f / t, true};   /* w2 (GELU: down) */
    return n;
}

bool op_checkpoint_saves(int index, Precision p) { return p != PREC_FP8 && index % 2 == 0; }

double op_checkpoint_kept_bytes(const ModelShape *m, const Layout *l, Precision p) {
    double e = precision_activation_bytes(p), t = l->tp;
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    double input = e * T * m->hidden / (l->sequence_parallel ? t : 1.0);
    double attention = e * T * model_q_dim(m) / t + 4.0 * T * m->heads / t; /* output, fp32 log-sum-exp */
    BlockMatmul mm[OP_MAX_MATMULS];
    int n = block_matmuls(m, l, mm);
    double saved = 0.0;
    for (int i = 0; i < n; i++)
        if (op_checkpoint_saves(i, p)) saved += e * T * (mm[i].row_parallel ? mm[i].n / t : mm[i].n);
    return input + attention + saved;
}

double op_checkpoint_recomputed_flops(const ModelShape *m, Precision p) {
    Layout one = layout_default();
    BlockMatmul mm[OP_MAX_MATMULS];
    int n = block_matmuls(m, &one, mm);
    double flops = 0.0;
    for (int i = 0; i < n; i++)
        if (!op_checkpoint_saves(i, p)) flops += 2.0 * mm[i].n * mm[i].k;
    return flops;
}
