/* subject_flags.h: the command-line flags that set the quantities a library's
 * reason names (core/reason.h). Libraries never name a flag; this table is
 * where a quantity meets the flag the user typed. */
#ifndef BS_CLI_SUBJECT_FLAGS_H
#define BS_CLI_SUBJECT_FLAGS_H

/* core/reason.h's namer for the train-style commands (train, prepare, sample,
 * tokenizer, ckpt, bench, run): ctx unused; NULL for a key no flag sets. */
const char *cli_subject_flag(const char *key, void *ctx);

/* Installs cli_subject_flag for this process. */
void cli_name_subjects(void);

#endif
