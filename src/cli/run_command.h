/* run_command.h: the command `batchscale run` launches (for example
 * `mpirun -np 4 ... build/batchscale train --ckpt-dir DIR ...`) as an
 * editable list of words: read, replace or drop a train option, and read or
 * rewrite mpirun's process count.
 *
 * Train options are the words after the subcommand `train` that follows a
 * word naming the batchscale executable; mpirun's options are the words
 * before that executable. Deliberately not here: any policy (which option to
 * change when) and running the command. */
#ifndef BS_CLI_RUN_COMMAND_H
#define BS_CLI_RUN_COMMAND_H

#include <stdbool.h>

typedef struct {
    char **words; /* NULL-terminated, each owned */
    int count;
    int train_at; /* index of the word "train"; -1 if there is none */
} RunCommand;

/* Copies argv[0..argc). */
void run_command_init(RunCommand *cmd, int argc, char *const *argv);
void run_command_free(RunCommand *cmd);

/* The value of the train option --name (as `--name VALUE` or `--name=VALUE`;
 * the last one counts), or NULL. */
const char *run_command_get(const RunCommand *cmd, const char *name);
/* Sets --name VALUE: replaces the value of every occurrence, or appends the
 * option at the end (the end of the command is the train options). */
void run_command_set(RunCommand *cmd, const char *name, const char *value);
/* Drops every occurrence of --name and its value. */
void run_command_remove(RunCommand *cmd, const char *name);

/* mpirun's process count (-np N, -n N, --np N, --n N or -c N before the
 * executable), or 0 if the command does not give one. */
int run_command_ranks(const RunCommand *cmd);
/* Rewrites that count (which must exist). */
void run_command_set_ranks(RunCommand *cmd, int ranks);

/* The words joined by spaces, for the log; the caller frees it. */
char *run_command_text(const RunCommand *cmd);

#endif
