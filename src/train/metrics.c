/* metrics.c: the metrics file (see metrics.h). */
#include "train/metrics.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/io.h"

FILE *metrics_open(const char *path, long step) {
    if (step == 0 || !bs_path_exists(path)) return bs_fopen(path, "wb");
    size_t len;
    char *text = bs_read_file(path, &len);
    FILE *f = bs_fopen(path, "wb");
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *s = j ? json_object_get(j, "step") : NULL;
        if (json_is_integer(s) && json_integer_value(s) <= step) fprintf(f, "%s\n", line);
        json_decref(j);
    }
    free(text);
    fflush(f);
    return f;
}

void metrics_close(Metrics *m) {
    if (m->file) fclose(m->file);
    m->file = NULL;
}

json_t *metrics_number(double x) { return isfinite(x) ? json_real(x) : json_null(); }



static void set(json_t *j, const char *key, json_t *value) { json_object_set_new(j, key, value); }

/* fp8: "fp8_underflow" and "fp8_overflow", each {input, weight, grad}: shares (step_result.h). */
static void set_fp8(json_t *j, const StepResult *r) {
    static const char *const kinds[3] = {"input", "weight", "grad"};
    json_t *under = json_object(), *over = json_object();
    for (int k = 0; k < 3; k++) {
        set(under, kinds[k], metrics_number(r->fp8_underflow[k]));
        set(over, kinds[k], metrics_number(r->fp8_overflow[k]));
    }
    set(j, "fp8_underflow", under);
    set(j, "fp8_overflow", over);
}

/* Time, throughput and communication. */
static void set_timing(json_t *j, const Metrics *m, const StepResult *r, double tokens_per_s) {
    set(j, "ms", metrics_number(r->seconds * 1e3));
    set(j, "tokens_per_s", metrics_number(tokens_per_s));
    set(j, "compute_ms", metrics_number((r->seconds - r->comm_exposed - r->cp_exposed - r->moe_a2a_exposed) * 1e3));
    set(j, "comm_exposed_ms", metrics_number(r->comm_exposed * 1e3));
    set(j, "comm_busy_ms", metrics_number(r->comm_busy * 1e3));
    set(j, "comm_bytes", json_integer((json_int_t)r->comm_bytes));
    set(j, "comm_bytes_fp32", json_integer((json_int_t)r->comm_bytes_fp32));
    if (r->comm_bytes > 0) set(j, "compression_ratio", metrics_number((double)r->comm_bytes_fp32 / (double)r->comm_bytes));
    if (r->moe_a2a_bytes > 0) {
        set(j, "moe_a2a_bytes", json_integer((json_int_t)r->moe_a2a_bytes));
        set(j, "moe_a2a_exposed_ms", metrics_number(r->moe_a2a_exposed * 1e3));
    }
    if (r->cp_bytes > 0) {
        set(j, "cp_bytes", json_integer((json_int_t)r->cp_bytes));
        set(j, "cp_exposed_ms", metrics_number(r->cp_exposed * 1e3));
    }
    if (r->fp8) set_fp8(j, r);
    set(j, "step_ms_max", metrics_number(r->slowest * 1e3));
    set(j, "step_ms_min", metrics_number(r->fastest * 1e3));
    set(j, "ranks", json_integer(m->ranks));
    if (m->pp > 1) {
        set(j, "bubble", metrics_number(r->bubble));
        /* theory, two conventions: idle over busy time (Megatron's (p-1)/m), and the idle share of the step,
         * the measured bubble's convention ((p-1)/(m+p-1)) */
        set(j, "bubble_theory", metrics_number(r->bubble_theory / (1 - r->bubble_theory)));
        set(j, "bubble_theory_share", metrics_number(r->bubble_theory));
        set(j, "bubble_simulated", metrics_number(r->bubble_simulated));
        set(j, "pipe_busy_ms", metrics_number(r->pipe_busy * 1e3));
        set(j, "pipe_idle_ms", metrics_number(r->pipe_idle * 1e3));
    }
}

/* The batch, the guard, stragglers and the noise scale. */
static void set_policy(json_t *j, const Metrics *m, const StepResult *r, const MetricsStep *s) {
    set(j, "max_live_microbatches", json_integer(r->max_live));
    set(j, "batch", json_integer(r->batch));
    set(j, "accumulation", json_integer(r->accum_steps));
    if (r->skipped) set(j, "skipped", json_string(r->skip_reason));
    if (s->ckpt_stall > 0) set(j, "ckpt_stall_ms", metrics_number(s->ckpt_stall * 1e3));
    set(j, "compute_ms_median", metrics_number(r->median_compute * 1e3));
    if (r->straggler >= 0) set(j, "straggler", json_integer(r->straggler));
    if (m->noise_scale && !isnan(r->noise_scale)) {
        set(j, "noise_scale", metrics_number(r->noise_scale));
        set(j, "noise_scale_tokens", metrics_number(r->noise_scale * m->seq_len));
    }
    if (m->noise_scale && !isnan(r->noise_precond)) set(j, "noise_scale_precond", metrics_number(r->noise_precond));
    if (m->curvature && !isnan(r->noise_curvature)) set(j, "noise_scale_curvature", metrics_number(r->noise_curvature));
    if (m->curvature && !isnan(r->noise_curvature_precond))
        set(j, "noise_scale_curvature_precond", metrics_number(r->noise_curvature_precond));
    if (m->curvature) set(j, "noise_extra_passes", json_integer(r->extra_passes));
    if (m->probe && !isnan(r->noise_probe_trace)) {
        set(j, "noise_scale_probe", metrics_number(r->noise_probe));
        set(j, "noise_probe_grad_sq", metrics_number(r->noise_probe_grad_sq));
        set(j, "noise_probe_trace", metrics_number(r->noise_probe_trace));
    }
    if (m->probe && !isnan(r->noise_probe_precond_trace)) {
        set(j, "noise_scale_probe_precond", metrics_number(r->noise_probe_precond));
        set(j, "noise_probe_precond_grad_sq", metrics_number(r->noise_probe_precond_grad_sq));
        set(j, "noise_probe_precond_trace", metrics_number(r->noise_probe_precond_trace));
    }
    if (m->probe) set(j, "noise_probe_micro_batches", json_integer(r->probe_micro_batches));
    if (m->goodput && !isnan(r->goodput)) set(j, "goodput", metrics_number(r->goodput));
    if (m->goodput && !isnan(r->efficiency)) set(j, "efficiency", metrics_number(r->efficiency));
    if (m->goodput && r->next_batch > 0) set(j, "goodput_batch", json_integer(r->next_batch));
}

void metrics_write(const Metrics *m, const StepResult *r, const MetricsStep *s) {
    if (!m->file) return;
    const double tokens_per_s = step_tokens_per_s(r, m->seq_len);
    json_t *j = json_object();
    set(j, "step", json_integer(s->step));
    set(j, "loss", metrics_number(r->loss));
    set(j, "lr", metrics_number(r->lr));
    set(j, "grad_norm", metrics_number(r->grad_norm));
    set(j, "tokens", json_integer((json_int_t)s->tokens));
    set_timing(j, m, r, tokens_per_s);
    set_policy(j, m, r, s);
    set(j, "state_bytes", json_integer((json_int_t)s->state_bytes));
    set(j, "buffer_bytes", json_integer((json_int_t)s->buffer_bytes));
    set(j, "activation_bytes", json_integer((json_int_t)s->activation_bytes));
    set(j, "peak_rss_bytes", json_integer((json_int_t)r->peak_rss));
    if (m->baseline_tokens_per_s > 0)
        set(j, "scaling_efficiency", metrics_number(tokens_per_s / (m->replicas * m->baseline_tokens_per_s)));
    if (!isnan(s->val_loss)) set(j, "val_loss", metrics_number(s->val_loss));
    if (s->add) s->add(s->add_ctx, j);
    char *line = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fprintf(m->file, "%s\n", line);
    fflush(m->file);
    free(line);
    json_decref(j);
}
