/* subject_flags.h: the command-line flags that set the quantities a library's
 * reason names (core/reason.h). Libraries never name a flag; this table is
 * where a quantity meets the flag the user typed. */
#ifndef BS_CLI_SUBJECT_FLAGS_H
#define BS_CLI_SUBJECT_FLAGS_H

/* Installs core/reason.h's namer for the train-style commands (train,
 * prepare, sample, tokenizer, ckpt, bench, run): main does, for every command. */
void cli_name_subjects(void);
/* Installs `batchscale plan`'s names instead (its flags for the planner's quantities: --hidden, --ffn, --zero). */
void cli_name_plan_subjects(void);

#endif
