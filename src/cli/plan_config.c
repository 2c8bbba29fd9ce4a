/* plan_config.c: JSON config and calibration files (jansson). */
#include "cli/plan_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "plan/calibration.h"
#include "plan/compute.h"

static json_t *load_json(const char *path, const char *what) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        if (strstr(err.text, "unable to open"))
            bs_die("%s %s: cannot be read (%s)", what, path, err.text);
        bs_die("%s %s: not valid JSON at line %d: %s", what, path, err.line, err.text);
    }
    if (!json_is_object(root)) bs_die("%s %s: expected a JSON object at the top", what, path);
    return root;
}

static double number_at(json_t *obj, const char *key, const char *path, const char *where) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_number(v) || json_number_value(v) <= 0)
        bs_die("calibration %s: %s needs a positive number '%s' (rerun `batchscale bench --calibrate`)", path, where, key);
    return json_number_value(v);
}

static void read_collectives(json_t *coll, Hardware *hw, const char *path) {
    const char *name;
    json_t *fit;
    json_object_foreach(coll, name, fit) {
        if (strcmp(name, "ranks") == 0 || strcmp(name, "path") == 0) continue; /* not fits */
        CollectiveAlgo a;
        if (!algo_parse(name, &a)) bs_die("calibration %s: unknown collective algorithm '%s' (ring, tree, hierarchical, mpi)", path, name);
        if (!json_is_object(fit)) bs_die("calibration %s: collectives.%s must be an object", path, name);
        hw->coll[a].present = true;
        hw->coll[a].alpha = number_at(fit, "alpha_s", path, "a collective");
        hw->coll[a].busbw = number_at(fit, "busbw_bytes_per_s", path, "a collective");
    }
}

void calibration_read(const char *path, Hardware *hw, char *note, size_t note_size) {
    json_t *root = load_json(path, "calibration");
    json_t *format = json_object_get(root, "format"), *version = json_object_get(root, "version");
    if (!json_is_string(format) || strcmp(json_string_value(format), CALIBRATION_FORMAT) != 0)
        bs_die("calibration %s: not a batchscale calibration file (write one with `batchscale bench --calibrate FILE`)", path);
    if (!json_is_integer(version) || json_integer_value(version) != CALIBRATION_VERSION)
        bs_die("calibration %s: version %lld is not %d: rerun `batchscale bench --calibrate`", path,
               json_is_integer(version) ? (long long)json_integer_value(version) : -1LL, CALIBRATION_VERSION);
    memset(hw, 0, sizeof *hw);
    json_t *machine = json_object_get(root, "machine");
    if (!json_is_object(machine)) bs_die("calibration %s: missing 'machine'", path);
    json_t *host = json_object_get(machine, "name");
    snprintf(hw->name, sizeof hw->name, "%s", json_is_string(host) ? json_string_value(host) : "this machine");
    hw->gpus_per_node = (int)number_at(machine, "ranks_per_node", path, "machine");
    json_t *device = json_object_get(machine, "device");
    if (!json_is_string(device) || strcmp(json_string_value(device), "sim") == 0) { /* the host's cores are shared */
        hw->cpu_cores = (int)number_at(machine, "cores", path, "machine");
        hw->threads_per_gpu = (int)number_at(machine, "threads_per_rank", path, "machine");
    }
    hw->hbm_bytes = number_at(machine, "memory_bytes", path, "machine") / hw->gpus_per_node;
    hw->hbm_bw = number_at(json_object_get(root, "memory_bandwidth"), "bytes_per_s", path, "memory_bandwidth");
    hw->elementwise_bw = number_at(json_object_get(root, "elementwise"), "bytes_per_s", path, "elementwise");
    json_t *points = json_object_get(root, "matmul");
    if (!json_is_array(points) || json_array_size(points) == 0)
        bs_die("calibration %s: 'matmul' must be a non-empty array of measured sizes", path);
    size_t i;
    json_t *p;
    json_array_foreach(points, i, p) {
        if (hw->n_gemm == HW_MAX_GEMM_POINTS) break;
        GemmPoint *g = &hw->gemm[hw->n_gemm++];
        g->m = number_at(p, "m", path, "a matmul point");
        g->n = number_at(p, "n", path, "a matmul point");
        g->k = number_at(p, "k", path, "a matmul point");
        g->flops_per_s = number_at(p, "flops_per_s", path, "a matmul point");
        if (g->flops_per_s > hw->peak_fp32) hw->peak_fp32 = g->flops_per_s;
    }
    json_t *precision = json_object_get(root, "precision");
    hw->peak_bf16 = hw->peak_fp8 = 0; /* the products measured are the engine's at one precision */
    if (json_is_string(precision) && strcmp(json_string_value(precision), "bf16") == 0)
        hw->peak_bf16 = hw->peak_fp32, hw->peak_fp32 = 0;
    hw->gemm_efficiency = 1.0;
    hw->attention_efficiency = 1.0;
    json_t *attention = json_object_get(root, "attention"); /* a device's fused attention */
    if (attention) {
        hw->attention_flops = number_at(attention, "forward_flops_per_s", path, "attention");
        hw->attention_backward_ratio =
            FLASH_BACKWARD_FLOPS * hw->attention_flops / number_at(attention, "backward_flops_per_s", path, "attention");
    }
    note[0] = '\0';
    json_t *coll = json_object_get(root, "collectives");
    if (json_is_object(coll)) {
        read_collectives(coll, hw, path);
    } else {
        hw->coll[ALGO_RING] = assumed_shared_memory_fit(hw->hbm_bw);
        snprintf(note, note_size, "calibration has no collectives: assumed a ring all-reduce at %.1f GB/s bus bandwidth, %.0f us per step",
                 hw->coll[ALGO_RING].busbw / 1e9, hw->coll[ALGO_RING].alpha * 1e6);
    }
    /* one machine: "inter-node" links are the same shared memory */
    hw->nvlink_bw = hw->net_bw = hw->coll[ALGO_RING].present ? hw->coll[ALGO_RING].busbw : hw->hbm_bw / 4.0;
    hw->nvlink_latency = hw->net_latency = SHARED_MEMORY_ALPHA;
    json_decref(root);
}
