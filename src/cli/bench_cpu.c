/* bench_cpu.c: `batchscale bench cpu`: prints one JSON object saying which
 * kernels this process runs on this CPU, for the benchmarks to record beside
 * their numbers and to apply batchscale's OpenBLAS rule to the other
 * processes that load Debian's OpenBLAS (see kernels/blas_cpu.h):
 *
 *   cpu_vendor, cpu_model, cpu_family, cpu_model_number   /proc/cpuinfo
 *   cpu_flags              the ISA extensions among a fixed list the CPU shows
 *   openblas_config        openblas_get_config()
 *   openblas_detected      the core OpenBLAS picks with no OPENBLAS_CORETYPE
 *   openblas_core_to_set   what batchscale sets then (null: detection is right)
 *   openblas_coretype_env  OPENBLAS_CORETYPE as given from outside (null: unset,
 *                          or set by batchscale's own re-exec)
 *   openblas_l2_size_env   OPENBLAS_L2_SIZE as given (null: unset)
 *   openblas_core          the core in effect in this process
 *   onednn_version, onednn_isa, onednn_max_cpu_isa_env   oneDNN's effective ISA
 *   omp_threads            omp_get_max_threads()
 *
 * When OPENBLAS_CORETYPE comes from outside, the detected core is asked of
 * a copy of this program started without it (`--openblas-detected`).
 * It measures nothing and changes nothing. */
#include "cli/bench_cpu.h"

#include <cblas.h>
#include <jansson.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/options.h"
#include "core/error.h"
#include "kernels/blas_cpu.h"

extern char **environ;

/* The value of "key\t: value" for the first processor in /proc/cpuinfo, in a
 * malloc'd string; NULL where the file or the key is missing. */
static char *cpuinfo_field(const char *key) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    char *line = NULL, *value = NULL;
    size_t cap = 0, key_len = strlen(key);
    while (!value && getline(&line, &cap, f) > 0) {
        if (strncmp(line, key, key_len) != 0 || !strchr(" \t:", line[key_len])) continue;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + strspn(colon + 1, " \t");
        v[strcspn(v, "\n")] = 0;
        value = strdup(v);
    }
    free(line);
    fclose(f);
    return value;
}

/* The ISA extensions that decide which kernels run, as /proc/cpuinfo names them. */
static json_t *cpu_flags(void) {
    static const char *const wanted[] = {"sse4_2",      "avx",        "fma",      "avx2",     "avx_vnni",
                                         "avx512f",     "avx512bw",   "avx512vl", "avx512_vnni",
                                         "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"};
    json_t *out = json_array();
    char *flags = cpuinfo_field("flags");
    if (!flags) return out;
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        size_t n = strlen(wanted[i]);
        for (const char *p = flags; (p = strstr(p, wanted[i])) != NULL; p += n)
            if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) {
                json_array_append_new(out, json_string(wanted[i]));
                break;
            }
    }
    free(flags);
    return out;
}

static json_t *cpuinfo_int(const char *key) {
    char *v = cpuinfo_field(key);
    json_t *out = v ? json_integer(strtol(v, NULL, 10)) : json_null();
    free(v);
    return out;
}

static json_t *cpuinfo_string(const char *key) {
    char *v = cpuinfo_field(key);
    json_t *out = v ? json_string(v) : json_null();
    free(v);
    return out;
}

static const char *onednn_isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

/* The core OpenBLAS detects when OPENBLAS_CORETYPE is unset, asked of this
 * program started without it; a malloc'd string, NULL if that failed. */
static char *detected_core_without_env(void) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = bs_malloc((n + 1) * sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) != 0 &&
            strncmp(environ[i], BLAS_DETECTED_ENV "=", strlen(BLAS_DETECTED_ENV) + 1) != 0)
            env[k++] = environ[i];
    env[k] = NULL;
    int fds[2];
    char *core = NULL;
    if (pipe(fds) == 0) {
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&actions, fds[0]);
        char *args[] = {"batchscale", "bench", "cpu", "--openblas-detected", NULL};
        pid_t pid;
        int spawned = posix_spawn(&pid, "/proc/self/exe", &actions, NULL, args, env);
        posix_spawn_file_actions_destroy(&actions);
        close(fds[1]);
        char buf[128] = {0};
        ssize_t got = spawned == 0 ? read(fds[0], buf, sizeof buf - 1) : -1;
        close(fds[0]);
        int status = 0;
        if (spawned == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
            got > 0) {
            buf[strcspn(buf, "\n")] = 0;
            core = strdup(buf);
        }
    }
    free(env);
    return core;
}

static json_t *string_or_null(const char *s) { return s ? json_string(s) : json_null(); }

int bench_cpu(int argc, char **argv) {
    bool detected_only = false;
    const OptionSpec specs[] = {
        {"openblas-detected", OPT_FLAG, &detected_only, OPT_NO_RANGE, "",
         "print only the core OpenBLAS detects when OPENBLAS_CORETYPE is unset", NULL, NULL},
    };
    if (!options_parse(specs, 1, argc, argv,
                       "usage: batchscale bench cpu [options]\n\n"
                       "Prints one JSON object: the CPU, the OpenBLAS core detected, set by batchscale and in\n"
                       "effect, oneDNN's effective ISA and the OpenMP threads."))
        return 0;
    if (detected_only) {
        const char *core = blas_detected_core();
        printf("%s\n", core ? core : "unknown");
        return 0;
    }
    char *probed = NULL;
    const char *detected = blas_detected_core(); /* NULL: OPENBLAS_CORETYPE given from outside */
    const char *outside = detected ? NULL : getenv("OPENBLAS_CORETYPE");
    if (!detected) detected = probed = detected_core_without_env();
    const dnnl_version_t *dv = dnnl_version();
    char onednn_version[32];
    snprintf(onednn_version, sizeof onednn_version, "%d.%d.%d", dv->major, dv->minor, dv->patch);
    json_t *j = json_object();
    json_object_set_new(j, "cpu_vendor", cpuinfo_string("vendor_id"));
    json_object_set_new(j, "cpu_model", cpuinfo_string("model name"));
    json_object_set_new(j, "cpu_family", cpuinfo_int("cpu family"));
    json_object_set_new(j, "cpu_model_number", cpuinfo_int("model"));
    json_object_set_new(j, "cpu_flags", cpu_flags());
    json_object_set_new(j, "openblas_config", string_or_null(openblas_get_config()));
    json_object_set_new(j, "openblas_detected", string_or_null(detected));
    json_object_set_new(j, "openblas_core_to_set", string_or_null(blas_core_to_set(detected)));
    json_object_set_new(j, "openblas_coretype_env", string_or_null(outside));
    json_object_set_new(j, "openblas_l2_size_env", string_or_null(getenv("OPENBLAS_L2_SIZE")));
    json_object_set_new(j, "openblas_core", string_or_null(openblas_get_corename()));
    json_object_set_new(j, "onednn_version", json_string(onednn_version));
    json_object_set_new(j, "onednn_isa", json_string(onednn_isa_name(dnnl_get_effective_cpu_isa())));
    json_object_set_new(j, "onednn_max_cpu_isa_env", string_or_null(getenv("ONEDNN_MAX_CPU_ISA")));
    json_object_set_new(j, "omp_threads", json_integer(omp_get_max_threads()));
    char *text = json_dumps(j, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(j);
    free(probed);
    return 0;
}
