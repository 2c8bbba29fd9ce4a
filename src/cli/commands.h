/* commands.h: the subcommands of the batchscale executable. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the exit
 * status. */
#ifndef BS_CLI_COMMANDS_H
#define BS_CLI_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_batch_sweep(int argc, char **argv);

#endif
