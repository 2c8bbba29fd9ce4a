/* plan_entry.h: `batchscale plan` as a library call, for the Python package
 * (python/): the command runs on an argv in a child of the calling process
 * (fork without exec: the planner's own code, in a copy of the caller), so
 * its one-line errors and exit statuses stay exactly the command's and a
 * failure cannot take the caller down; what it printed comes back. */
#ifndef BS_CLI_PLAN_ENTRY_H
#define BS_CLI_PLAN_ENTRY_H

/* argv as `batchscale plan` takes it after "plan" (argv[0] is a name).
 * *out and *err get what the command wrote to stdout and stderr (free them
 * with bs_plan_free). Returns the command's exit status, or -1 with errno
 * set if the child could not be started. */
int bs_plan_run(int argc, const char *const *argv, char **out, char **err);
void bs_plan_free(char *text);

#endif
