/* run_config.c: a run directory's config.json (see run_config.h). */
#include "cli/run_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_version.h"
#include "core/io.h"
#include "git_revision.h" /* generated at build time by scripts/git_revision.cmake */
#include "kernels/matmul_bf16.h"

/* The option's value at `target` as JSON of its own type. */
static json_t *option_value(const OptionSpec *s, const void *target) {
    switch (s->type) {
    case OPT_INT: return json_integer(*(const int *)target);
    case OPT_LONG: return json_integer(*(const long long *)target);
    case OPT_DOUBLE: return json_real(*(const double *)target);
    case OPT_FLOAT: return json_real((double)*(const float *)target);
    case OPT_FLAG: return json_boolean(*(const bool *)target);
    case OPT_ENUM: return json_string(s->words[*(const int *)target]);
    case OPT_STRING: {
        const char *v = *(const char *const *)target;
        return json_string(v ? v : "");
    }
    }
    return json_null();
}

/* /proc/cpuinfo's first "model name" ("unknown" where there is none). */
static void cpu_model(char *buf, size_t size) {
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += strspn(colon + 1, " \t") + 1;
        snprintf(buf, size, "%.*s", (int)strcspn(colon, "\n"), colon);
        break;
    }
    fclose(f);
}

static json_t *environment_record(int argc, char **argv, int processes) {
    char cpu[256], mpi[256];
    cpu_model(cpu, sizeof cpu);
    comm_library_version(mpi, sizeof mpi);
    json_t *command = json_array();
    for (int i = 0; i < argc; i++) json_array_append_new(command, json_string(argv[i]));
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:o}", "git_revision", BS_GIT_REVISION, "cpu", cpu, "cpu_isa",
                     matmul_bf16_cpu_isa(), "mpi", mpi, "processes", processes, "command_line", command);
}

void run_config_write(const char *dir, const OptionTable *table, const void *base, const void *resolved, int argc,
                      char **argv, int processes) {
    json_t *options = json_object(), *values = json_object();
    for (int i = 0; i < table->count; i++) {
        const OptionSpec *s = &table->specs[i];
        if (strcmp(s->name, "config") == 0) continue;
        if (table->given && table->given[i]) json_object_set_new(options, s->name, option_value(s, s->target));
        const void *at = (const char *)resolved + ((const char *)s->target - (const char *)base);
        json_object_set_new(values, s->name, option_value(s, at));
    }
    json_t *root = environment_record(argc, argv, processes);
    json_object_set_new(root, "options", options);
    json_object_set_new(root, "resolved", values);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    char path[4200];
    bs_mkdir_p(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps ends without a newline; its terminator becomes one */
    bs_write_file_atomic(path, text, len + 1);
    free(text);
    json_decref(root);
}
