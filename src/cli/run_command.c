/* run_command.c: editing the launched command line (see run_command.h). */
#include "cli/run_command.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static char *copy(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = bs_malloc(n);
    memcpy(c, s, n);
    return c;
}

static bool names_batchscale(const char *word) {
    const char *base = strrchr(word, '/');
    base = base ? base + 1 : word;
    return strncmp(base, "batchscale", 10) == 0;
}

void run_command_init(RunCommand *cmd, int argc, char *const *argv) {
    cmd->words = bs_calloc((size_t)argc + 1, sizeof(char *));
    cmd->count = argc;
    cmd->train_at = -1;
    for (int i = 0; i < argc; i++) {
        cmd->words[i] = copy(argv[i]);
        if (cmd->train_at < 0 && i > 0 && strcmp(argv[i], "train") == 0 && names_batchscale(argv[i - 1]))
            cmd->train_at = i;
    }
}

void run_command_free(RunCommand *cmd) {
    for (int i = 0; i < cmd->count; i++) free(cmd->words[i]);
    free(cmd->words);
    cmd->words = NULL;
    cmd->count = 0;
}

/* 1: the word is `--name` (value in the next word); 2: `--name=VALUE`; 0: neither. */
static int option_form(const char *word, const char *name) {
    size_t n = strlen(name);
    if (strncmp(word, "--", 2) != 0 || strncmp(word + 2, name, n) != 0) return 0;
    if (word[2 + n] == '\0') return 1;
    return word[2 + n] == '=' ? 2 : 0;
}

const char *run_command_get(const RunCommand *cmd, const char *name) {
    const char *value = NULL;
    for (int i = cmd->train_at + 1; cmd->train_at >= 0 && i < cmd->count; i++) {
        int form = option_form(cmd->words[i], name);
        if (form == 1 && i + 1 < cmd->count) value = cmd->words[++i];
        else if (form == 2) value = cmd->words[i] + strlen(name) + 3;
    }
    return value;
}

static void append(RunCommand *cmd, const char *word) {
    cmd->words = realloc(cmd->words, sizeof(char *) * ((size_t)cmd->count + 2));
    if (!cmd->words) bs_die("out of memory");
    cmd->words[cmd->count++] = copy(word);
    cmd->words[cmd->count] = NULL;
}

void run_command_set(RunCommand *cmd, const char *name, const char *value) {
    bool found = false;
    for (int i = cmd->train_at + 1; cmd->train_at >= 0 && i < cmd->count; i++) {
        int form = option_form(cmd->words[i], name);
        if (form == 1 && i + 1 < cmd->count) {
            free(cmd->words[++i]);
            cmd->words[i] = copy(value);
            found = true;
        } else if (form == 2) {
            size_t n = strlen(name) + strlen(value) + 4;
            free(cmd->words[i]);
            cmd->words[i] = bs_malloc(n);
            snprintf(cmd->words[i], n, "--%s=%s", name, value);
            found = true;
        }
    }
    if (found) return;
    char option[256];
    snprintf(option, sizeof option, "--%s", name);
    append(cmd, option);
    append(cmd, value);
}

void run_command_remove(RunCommand *cmd, const char *name) {
    int kept = cmd->train_at + 1;
    for (int i = kept; cmd->train_at >= 0 && i < cmd->count; i++) {
        int form = option_form(cmd->words[i], name);
        if (form == 0) {
            cmd->words[kept++] = cmd->words[i];
            continue;
        }
        free(cmd->words[i]);
        if (form == 1 && i + 1 < cmd->count) free(cmd->words[++i]);
    }
    if (cmd->train_at >= 0) cmd->count = kept;
    cmd->words[cmd->count] = NULL;
}

/* Index of the word holding mpirun's process count, or -1. */
static int ranks_word(const RunCommand *cmd) {
    static const char *const flags[] = {"-np", "-n", "--np", "--n", "-c"};
    int end = cmd->train_at > 0 ? cmd->train_at - 1 : cmd->count;
    for (int i = 1; i + 1 < end; i++)
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++)
            if (strcmp(cmd->words[i], flags[f]) == 0) return i + 1;
    return -1;
}

int run_command_ranks(const RunCommand *cmd) {
    int at = ranks_word(cmd);
    return at < 0 ? 0 : atoi(cmd->words[at]);
}

void run_command_set_ranks(RunCommand *cmd, int ranks) {
    int at = ranks_word(cmd);
    if (at < 0) bs_die("the command gives mpirun no process count (-np N) to change");
    char buf[32];
    snprintf(buf, sizeof buf, "%d", ranks);
    free(cmd->words[at]);
    cmd->words[at] = copy(buf);
}

char *run_command_text(const RunCommand *cmd) {
    size_t n = 1;
    for (int i = 0; i < cmd->count; i++) n += strlen(cmd->words[i]) + 1;
    char *text = bs_malloc(n), *at = text;
    for (int i = 0; i < cmd->count; i++) at += sprintf(at, "%s%s", i ? " " : "", cmd->words[i]);
    *at = '\0';
    return text;
}
