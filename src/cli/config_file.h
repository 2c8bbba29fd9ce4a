/* config_file.h: `--config FILE` of `train` and `plan`: a JSON object of options (the flags'
 * names without "--", each with a value of its type: a number, a string, an
 * enumeration's word, true/false for a flag) turned into leading flags, so
 * that every flag on the command line, coming later, overrides the file.
 * A run directory's config.json (cli/run_config.h) is such a file: its
 * "options" object is read, its other keys (revision, versions) are a
 * record. JSON only: Debian packages no C TOML library (only C++'s
 * cpptoml), and jansson is already linked. A flag set true in the file
 * cannot be turned off on the command line. */
#ifndef BS_CLI_CONFIG_FILE_H
#define BS_CLI_CONFIG_FILE_H

#include "cli/options.h"

typedef struct {
    int argc;
    char **argv;  /* argv[0], the file's flags, then the command line's flags */
    char **owned; /* the strings made for the file's flags */
    int owned_count;
} ConfigArgs;

/* The command line with the file named by --config (if any) expanded in
 * front of the flags. A file that cannot be read, is not JSON, names an
 * option `specs` lacks or gives a value of the wrong type dies with one line
 * naming the file and the key. Without --config: argv as it is. */
ConfigArgs config_file_expand(const OptionSpec *specs, int count, int argc, char **argv);
void config_args_free(ConfigArgs *a);

#endif
