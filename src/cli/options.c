/* options.c: getopt_long driven by an OptionSpec table (see options.h). */
#include "cli/options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

bool parse_count(const char *text, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno != 0) return false;
    if (*end) {
        double mult = 0;
        switch (*end) {
        case 'k': case 'K': mult = 1e3; break;
        case 'm': case 'M': mult = 1e6; break;
        case 'g': case 'G': mult = 1e9; break;
        case 't': case 'T': mult = 1e12; break;
        default: return false;
        }
        if (end[1] != '\0') return false;
        v *= mult;
    }
    if (!isfinite(v)) return false;
    *out = v;
    return true;
}

static void format_value(const OptionSpec *s, char *buf, size_t n) {
    switch (s->type) {
    case OPT_INT: snprintf(buf, n, "%d", *(int *)s->target); break;
    case OPT_LONG: snprintf(buf, n, "%lld", *(long long *)s->target); break;
    case OPT_DOUBLE: snprintf(buf, n, "%g", *(double *)s->target); break;
    case OPT_FLOAT: snprintf(buf, n, "%g", (double)*(float *)s->target); break;
    case OPT_STRING: {
        const char *v = *(const char **)s->target;
        snprintf(buf, n, "%s", v && *v ? v : "(none)");
        break;
    }
    case OPT_FLAG: snprintf(buf, n, "%s", *(bool *)s->target ? "on" : "off"); break;
    case OPT_ENUM: /* an index below 0: not given */
        snprintf(buf, n, "%s", *(int *)s->target >= 0 ? s->words[*(int *)s->target] : "(none)");
        break;
    }
}

static void print_option(const OptionSpec *s) {
    char def[64], left[64];
    format_value(s, def, sizeof def);
    if (s->type == OPT_FLAG) snprintf(left, sizeof left, "--%s", s->name);
    else snprintf(left, sizeof left, "--%s %s", s->name, s->unit && *s->unit ? s->unit : "X");
    printf("  %-30s %s [%s]\n", left, s->help, def);
}

void options_print_table_help(const OptionTable *table, bool show_hidden, const char *usage) {
    printf("%s\n\noptions (default in brackets):\n", usage);
    if (table->section_count == 0)
        for (int i = 0; i < table->count; i++) print_option(&table->specs[i]);
    for (int k = 0, first = 0; k < table->section_count; first += table->sections[k].count, k++) {
        const OptionSection *sec = &table->sections[k];
        if (sec->hidden && !show_hidden) continue;
        printf("\n%s:\n", sec->title);
        for (int i = first; i < first + sec->count; i++) print_option(&table->specs[i]);
    }
    if (table->section_count > 0) printf("\n");
    printf("  %-30s %s\n", "--help", "show this help");
    for (int k = 0; k < table->section_count; k++)
        if (table->sections[k].hidden) {
            printf("  %-30s %s\n", "--help-debug", "show this help with the test-only options too");
            break;
        }
}

void options_print_help(const OptionSpec *specs, int count, const char *usage) {
    const OptionTable table = {specs, count, NULL, 0, NULL};
    options_print_table_help(&table, false, usage);
}

/* "a, b or c" */
static void list_words(const char *const *words, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; words[i] && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i == 0 ? "" : words[i + 1] ? ", " : " or ", words[i]);
}

static void set_enum(const OptionSpec *s, const char *arg) {
    for (int i = 0; s->words[i]; i++)
        if (strcmp(s->words[i], arg) == 0) {
            *(int *)s->target = i;
            return;
        }
    char allowed[512];
    list_words(s->words, allowed, sizeof allowed);
    bs_die("--%s must be %s (got '%s')", s->name, allowed, arg);
}

static void set_value(const OptionSpec *s, const char *arg) {
    if (s->type == OPT_STRING) {
        *(const char **)s->target = arg;
        return;
    }
    if (s->type == OPT_ENUM) {
        set_enum(s, arg);
        return;
    }
    if (s->type == OPT_FLAG) { /* only as a default */
        *(bool *)s->target = strcmp(arg, "on") == 0;
        return;
    }
    double v;
    bool ok;
    if (s->type == OPT_INT || s->type == OPT_LONG) {
        ok = parse_count(arg, &v) && v == floor(v);
    } else {
        char *end;
        errno = 0;
        v = strtod(arg, &end);
        ok = end != arg && *end == '\0' && errno == 0 && isfinite(v);
    }
    if (!ok) bs_die("--%s: '%s' is not a valid %s", s->name, arg,
                    (s->type == OPT_INT || s->type == OPT_LONG) ? "integer" : "number");
    if (s->min <= s->max && (v < s->min || v > s->max)) bs_die("--%s must be between %g and %g (got %s)", s->name, s->min, s->max, arg);
    switch (s->type) {
    case OPT_INT:
        if (v < -2147483648.0 || v > 2147483647.0) bs_die("--%s: %s is out of range", s->name, arg);
        *(int *)s->target = (int)v;
        break;
    case OPT_LONG: *(long long *)s->target = (long long)v; break;
    case OPT_DOUBLE: *(double *)s->target = v; break;
    case OPT_FLOAT: *(float *)s->target = (float)v; break;
    default: break;
    }
}

/* getopt_long's table for specs (option i answers 1000 + i), with --help and --help-debug; the caller frees it. */
static struct option *long_options(const OptionSpec *specs, int count) {
    struct option *longopts = bs_calloc((size_t)count + 3, sizeof(struct option));
    for (int i = 0; i < count; i++) {
        longopts[i].name = specs[i].name;
        longopts[i].has_arg = specs[i].type == OPT_FLAG ? no_argument : required_argument;
        longopts[i].val = 1000 + i;
    }
    longopts[count].name = "help";
    longopts[count].val = 'h';
    longopts[count + 1].name = "help-debug";
    longopts[count + 1].val = 'H';
    return longopts;
}

bool options_table_given(const OptionTable *table, const char *name) {
    for (int i = 0; table->given && i < table->count; i++)
        if (strcmp(table->specs[i].name, name) == 0) return table->given[i];
    return false;
}

static bool parse_flags(const OptionTable *table, int argc, char **argv, const char *usage) {
    const OptionSpec *specs = table->specs;
    const int count = table->count;
    for (int i = 0; i < count; i++) {
        if (specs[i].def) set_value(&specs[i], specs[i].def);
        if (table->given) table->given[i] = false;
    }
    struct option *longopts = long_options(specs, count);
    optind = 1;
    opterr = 0;
    bool go_on = true;
    for (;;) {
        int idx = -1;
        int c = getopt_long(argc, argv, ":h", longopts, &idx);
        if (c == -1) break;
        if (c == 'h' || c == 'H') {
            options_print_table_help(table, c == 'H', usage);
            go_on = false;
            break;
        }
        if (c == '?') bs_die("unknown option '%s' (see --help)", argv[optind - 1]);
        if (c == ':') bs_die("option '%s' needs a value (see --help)", argv[optind - 1]);
        const OptionSpec *s = &specs[c - 1000];
        if (table->given) table->given[c - 1000] = true;
        if (s->type == OPT_FLAG) *(bool *)s->target = true;
        else set_value(s, optarg);
    }
    if (go_on && optind < argc) bs_die("unexpected argument '%s' (see --help)", argv[optind]);
    free(longopts);
    return go_on;
}

bool options_parse_table(const OptionTable *table, int argc, char **argv, const char *usage) {
    int before = bs_die_status(BS_EXIT_USAGE); /* a bad flag is a usage error in every command */
    bool go_on = parse_flags(table, argc, argv, usage);
    bs_die_status(before);
    return go_on;
}

bool options_parse(const OptionSpec *specs, int count, int argc, char **argv, const char *usage) {
    const OptionTable table = {specs, count, NULL, 0, NULL};
    return options_parse_table(&table, argc, argv, usage);
}
