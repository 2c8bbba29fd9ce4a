/* options.h: a table-driven long-option parser over getopt_long.
 *
 * A command describes its options once (name, type, target field, range,
 * unit, help, default, and for enumerations the allowed words); the same
 * table sets the defaults, drives parsing, range checks with one-line
 * errors naming the flag, and `--help`, which prints each option with its
 * default. */
#ifndef BS_CLI_OPTIONS_H
#define BS_CLI_OPTIONS_H

#include <stdbool.h>

typedef enum {
    OPT_INT,    /* int; accepts K/M/G suffixes (powers of 1000) */
    OPT_LONG,   /* long long; same suffixes */
    OPT_DOUBLE, /* double */
    OPT_FLOAT,  /* float */
    OPT_STRING, /* const char * (points into argv) */
    OPT_FLAG,   /* bool, no argument: sets true */
    OPT_ENUM,   /* int: the index of the word given among `words` (a default below 0: not given) */
} OptionType;

typedef struct {
    const char *name;
    OptionType type;
    void *target;
    double min, max; /* inclusive range for numbers; ignored if min > max */
    const char *unit; /* shown in --help, may be "" */
    const char *help;
    const char *def;          /* the default, written as on the command line (NULL: the target as it is) */
    const char *const *words; /* OPT_ENUM: the allowed words, NULL-terminated, in the enum's order */
} OptionSpec;

#define OPT_NO_RANGE 1, 0

/* A run of consecutive options in a table, printed under its heading by --help; a hidden section
 * (test-only flags) is printed by --help-debug only. Its options parse either way. */
typedef struct {
    const char *title;
    int count;
    bool hidden;
} OptionSection;

/* A command's options, grouped: sections cover specs in order (none: one untitled group). */
typedef struct {
    const OptionSpec *specs;
    int count;
    const OptionSection *sections;
    int section_count;
    bool *given; /* the parser's record (NULL: none kept): given[i] when argv gave specs[i], in any spelling
                  * getopt_long accepts (a --config file's options are in argv: cli/config_file.h); a default
                  * is not "given". The one answer to "did the user give this option?" */
} OptionTable;

/* Sets every option's default, then parses argv[1..]. Unknown options, missing or malformed values and
 * out-of-range numbers die with one line and status BS_EXIT_USAGE (core/error.h). Returns false if --help was given
 * (help already printed). Positional arguments are not accepted. */
bool options_parse(const OptionSpec *specs, int count, int argc, char **argv, const char *usage);
/* options_parse over a table by sections: --help prints each visible section under its heading,
 * --help-debug the hidden ones too. */
bool options_parse_table(const OptionTable *table, int argc, char **argv, const char *usage);
/* Whether the table's last parse recorded option `name` as given (table->given); false without a record. */
bool options_table_given(const OptionTable *table, const char *name);
void options_print_help(const OptionSpec *specs, int count, const char *usage);
/* --help by section; hidden sections too where show_hidden. */
void options_print_table_help(const OptionTable *table, bool show_hidden, const char *usage);
/* Parses "12", "2.5M", "1G" (powers of 1000) into *out; false if malformed. */
bool parse_count(const char *text, double *out);

#endif
