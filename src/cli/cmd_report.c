/* cmd_report.c: `batchscale report RUN_DIR`: a self-contained HTML page
 * (RUN_DIR/report/index.html, every chart inlined as a PNG data URI; the
 * PNGs are also written beside it) from a run's metrics JSON lines: loss
 * and validation loss against tokens, the learning rate and batch
 * schedules, tokens/s, MFU, the exposed communication share, a per-layer
 * gradient-norm heatmap, the noise scale (critical batch) against the
 * batch, and checkpoint stalls and skipped steps. After a restart a step's
 * last line counts. Charts are cli/report_chart.h's; a chart whose metric
 * the run did not record (MFU without --peak-gflops, the noise scale
 * without --noise-scale) is drawn empty and says why. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/report_chart.h"
#include "core/error.h"
#include "core/io.h"

typedef enum { M_TOKENS, M_LOSS, M_VAL, M_LR, M_BATCH, M_TPS, M_MFU, M_COMM, M_NOISE, M_STALL, M_SKIP, M_COUNT } Metric;

/* The run's steps in order, each metric per step (NaN: not recorded). */
typedef struct {
    int n, blocks;
    double *step, *m[M_COUNT];
    double *layers; /* blocks x n: per-layer gradient norms */
} RunMetrics;

static double get(json_t *j, const char *key) {
    json_t *v = json_object_get(j, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void fill_step(RunMetrics *r, int i, json_t *j) {
    const double ms = get(j, "ms"), skipped = json_is_string(json_object_get(j, "skipped")) ? get(j, "loss") : NAN;
    const double values[M_COUNT] = {get(j, "tokens"), get(j, "loss"), get(j, "val_loss"), get(j, "lr"),
                                    get(j, "batch"), get(j, "tokens_per_s"), get(j, "mfu"),
                                    get(j, "comm_exposed_ms") / ms, get(j, "noise_scale"), get(j, "ckpt_stall_ms"),
                                    skipped};
    r->step[i] = get(j, "step");
    for (int k = 0; k < M_COUNT; k++) r->m[k][i] = values[k];
    json_t *layers = json_object_get(j, "grad_norm_layers");
    for (int b = 0; b < r->blocks; b++) {
        json_t *v = json_array_get(layers, (size_t)b);
        r->layers[(size_t)b * r->n + i] = json_is_number(v) ? json_number_value(v) : NAN;
    }
}

/* Every line parsed; for each step the last line that has it. */
static json_t **last_lines(const char *path, int *count, long *max_step) {
    size_t len;
    char *text = bs_read_file(path, &len);
    json_t **lines = NULL;
    int n = 0, cap = 0, number = 0;
    *max_step = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        number++;
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!j || !json_is_integer(json_object_get(j, "step")))
            bs_die("report: %s: line %d is not a metrics object (%s)", path, number, j ? "no step" : err.text);
        if (n == cap) lines = realloc(lines, sizeof(json_t *) * (size_t)(cap = 2 * cap + 64));
        if (!lines) bs_die("out of memory");
        lines[n++] = j;
        long s = (long)json_integer_value(json_object_get(j, "step"));
        if (s > *max_step) *max_step = s;
    }
    free(text);
    *count = n;
    return lines;
}

static RunMetrics load_metrics(const char *path) {
    int lines_n;
    long max_step;
    json_t **lines = last_lines(path, &lines_n, &max_step);
    if (lines_n == 0) bs_die("report: %s has no steps", path);
    json_t **by_step = bs_calloc((size_t)max_step + 1, sizeof(json_t *));
    for (int i = 0; i < lines_n; i++) by_step[json_integer_value(json_object_get(lines[i], "step"))] = lines[i];
    RunMetrics r = {0};
    for (long s = 0; s <= max_step; s++) r.n += by_step[s] != NULL;
    r.blocks = (int)json_array_size(json_object_get(lines[lines_n - 1], "grad_norm_layers"));
    r.step = bs_calloc((size_t)r.n, sizeof(double));
    for (int k = 0; k < M_COUNT; k++) r.m[k] = bs_calloc((size_t)r.n, sizeof(double));
    r.layers = bs_calloc((size_t)r.n * (size_t)(r.blocks + 1), sizeof(double));
    for (long s = 0, i = 0; s <= max_step; s++)
        if (by_step[s]) fill_step(&r, (int)i++, by_step[s]);
    for (int i = 0; i < lines_n; i++) json_decref(lines[i]);
    free(lines);
    free(by_step);
    return r;
}

static void free_metrics(RunMetrics *r) {
    free(r->step);
    for (int k = 0; k < M_COUNT; k++) free(r->m[k]);
    free(r->layers);
}

static bool any(const double *x, int n) {
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) return true;
    return false;
}

static void base64(FILE *f, const unsigned char *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        fputc(A[v >> 18 & 63], f), fputc(A[v >> 12 & 63], f);
        fputc(i + 1 < n ? A[v >> 6 & 63] : '=', f), fputc(i + 2 < n ? A[v & 63] : '=', f);
    }
}

/* One chart: NAME.png in the output directory and a figure in the page. */
static void emit(FILE *html, const char *dir, const char *name, const char *caption, PngBytes png) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s.png", dir, name);
    FILE *f = bs_fopen(path, "wb");
    bs_fwrite_all(png.data, png.len, f, path);
    fclose(f);
    fprintf(html, "<figure class=\"chart\" id=\"chart-%s\"><img alt=\"%s\" width=\"760\" height=\"360\" "
                  "src=\"data:image/png;base64,", name, caption);
    base64(html, png.data, png.len);
    fprintf(html, "\"><figcaption>%s</figcaption></figure>\n", caption);
    free(png.data);
}

static PngBytes line_chart(const RunMetrics *r, const char *title, bool by_tokens, const char *y_label, bool log_y,
                           int series, const Metric *which, const char *const *labels, const bool *points) {
    Chart c = {title, by_tokens ? "tokens" : "step", y_label, by_tokens ? r->m[M_TOKENS] : r->step, r->n, log_y,
               {{0}}, series};
    for (int s = 0; s < series; s++) c.series[s] = (ChartSeries){labels[s], r->m[which[s]], points[s]};
    return chart_png(&c);
}

/* The charts the issue lists, in the page's order. */
static int write_charts(FILE *html, const char *dir, const RunMetrics *r) {
    const bool mfu = any(r->m[M_MFU], r->n), noise = any(r->m[M_NOISE], r->n);
    emit(html, dir, "loss", "Training and validation loss against tokens",
         line_chart(r, "loss", true, "loss", false, 2, (Metric[]){M_LOSS, M_VAL},
                    (const char *[]){"train", "validation"}, (bool[]){false, true}));
    emit(html, dir, "lr", "Learning rate schedule",
         line_chart(r, "learning rate", true, "lr", false, 1, (Metric[]){M_LR}, (const char *[]){"lr"}, (bool[]){0}));
    emit(html, dir, "batch", "Global batch schedule (sequences)",
         line_chart(r, "global batch", true, "sequences", false, 1, (Metric[]){M_BATCH}, (const char *[]){"batch"},
                    (bool[]){0}));
    emit(html, dir, "throughput", "Tokens per second (slowest rank's step time)",
         line_chart(r, "tokens/s", false, "tokens/s", false, 1, (Metric[]){M_TPS}, (const char *[]){"tokens/s"},
                    (bool[]){0}));
    emit(html, dir, "mfu", mfu ? "Model FLOPs utilisation" : "Model FLOPs utilisation (not recorded: train with --peak-gflops)",
         line_chart(r, "MFU", false, "MFU", false, 1, (Metric[]){M_MFU}, (const char *[]){"MFU"}, (bool[]){0}));
    emit(html, dir, "comm", "Exposed communication, share of the step",
         line_chart(r, "exposed communication", false, "share of step", false, 1, (Metric[]){M_COMM},
                    (const char *[]){"exposed"}, (bool[]){0}));
    const char *labels[66];
    char names[66][24];
    const int rows = r->blocks > 0 && r->blocks <= 66 ? r->blocks : 0;
    for (int b = 0; b < rows; b++) {
        if (b == 0) snprintf(names[b], sizeof names[b], "embeddings");
        else if (b == rows - 1) snprintf(names[b], sizeof names[b], "final LN");
        else snprintf(names[b], sizeof names[b], "layer %d", b - 1);
        labels[b] = names[b];
    }
    emit(html, dir, "layers", rows ? "Per-layer gradient norm" : "Per-layer gradient norm (not recorded)",
         heatmap_png("gradient norm per layer", r->step, r->n, r->layers, rows ? rows : 1,
                     rows ? labels : (const char *[]){"-"}));
    emit(html, dir, "noise", noise ? "Gradient noise scale (critical batch) and the batch, sequences"
                                   : "Gradient noise scale (not recorded: train with --noise-scale)",
         line_chart(r, "noise scale and batch", false, "sequences", true, 2, (Metric[]){M_NOISE, M_BATCH},
                    (const char *[]){"B_noise (critical batch)", "batch"}, (bool[]){false, false}));
    emit(html, dir, "events", "Checkpoint stalls (ms) and skipped steps (at their loss)",
         line_chart(r, "checkpoint stalls and skipped steps", false, "ms / loss", false, 2, (Metric[]){M_STALL, M_SKIP},
                    (const char *[]){"checkpoint stall ms", "skipped step"}, (bool[]){true, true}));
    chart_release_fonts();
    return 9;
}

static const char PAGE_HEAD[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>batchscale run report</title>\n"
    "<style>body{font-family:sans-serif;margin:2em;max-width:820px}figure{margin:1.5em 0}"
    "figcaption{color:#444}td,th{padding:2px 10px;text-align:left}</style></head><body>\n";
/* Marks the page once every chart image has decoded (the browser test reads it). */
static const char PAGE_SCRIPT[] =
    "<script>\nwindow.addEventListener('load', function () {\n"
    "  var images = document.querySelectorAll('figure.chart img'), decoded = 0;\n"
    "  images.forEach(function (img) { if (img.complete && img.naturalWidth > 0) decoded++; });\n"
    "  document.body.setAttribute('data-charts', decoded + '/' + images.length);\n});\n</script>\n";

static void write_page(const char *dir, const char *run_dir, const char *metrics_path, const RunMetrics *r) {
    char path[4300];
    snprintf(path, sizeof path, "%s/index.html", dir);
    FILE *html = bs_fopen(path, "wb");
    fputs(PAGE_HEAD, html);
    const int last = r->n - 1;
    fprintf(html, "<h1>Run %s</h1>\n<table><tr><th>steps</th><td>%d (last %.0f)</td></tr><tr><th>tokens</th>"
                  "<td>%.4g</td></tr><tr><th>final loss</th><td>%.4f</td></tr><tr><th>metrics</th><td>%s</td></tr>"
                  "</table>\n", run_dir, r->n, r->step[last], r->m[M_TOKENS][last], r->m[M_LOSS][last], metrics_path);
    int charts = write_charts(html, dir, r);
    fputs(PAGE_SCRIPT, html);
    fputs("</body></html>\n", html);
    bs_fclose_synced(html, path);
    printf("report: %s (%d charts, %d steps)\n", path, charts, r->n);
}

/* --metrics, else the path the run's config.json records, else RUN/metrics.jsonl. */
static void find_metrics(const char *run_dir, const char *given, char *out, size_t n) {
    if (given[0]) {
        snprintf(out, n, "%s", given);
        return;
    }
    char config[4200];
    snprintf(config, sizeof config, "%s/config.json", run_dir);
    json_t *root = bs_path_exists(config) ? json_load_file(config, 0, NULL) : NULL;
    const char *recorded = json_string_value(json_object_get(json_object_get(root, "resolved"), "metrics"));
    if (!recorded) /* a config.json written before "resolved" recorded every option under "options" */
        recorded = json_string_value(json_object_get(json_object_get(root, "options"), "metrics"));
    if (recorded && recorded[0] && bs_path_exists(recorded)) snprintf(out, n, "%s", recorded);
    else snprintf(out, n, "%s/metrics.jsonl", run_dir);
    json_decref(root);
    if (!bs_path_exists(out))
        bs_die("report: no metrics for %s: give --metrics FILE (the run's --metrics; its config.json names none "
               "that exists, and there is no %s)", run_dir, out);
}

int cmd_report(int argc, char **argv) {
    const char *metrics = "", *out = "";
    const OptionSpec specs[] = {
        {"metrics", OPT_STRING, &metrics, OPT_NO_RANGE, "FILE", "the run's metrics (default: config.json's --metrics, else RUN_DIR/metrics.jsonl)", "", NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "DIR", "where index.html and the PNGs go (default RUN_DIR/report)", "", NULL},
    };
    const char *usage = "usage: batchscale report RUN_DIR [options]\n\nWrites a self-contained HTML page and PNG charts of a training run.";
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            options_print_help(specs, 2, usage);
            return 0;
        }
        bs_die("report: give the run directory first: batchscale report RUN_DIR [--metrics FILE] [--out DIR]");
    }
    const char *run_dir = argv[1];
    argv[1] = argv[0]; /* the options after RUN_DIR, with a program name in front */
    if (!options_parse(specs, 2, argc - 1, argv + 1, usage)) return 0;
    if (!bs_is_dir(run_dir)) bs_die("report: %s is not a directory", run_dir);
    char metrics_path[4200], dir[4200];
    find_metrics(run_dir, metrics, metrics_path, sizeof metrics_path);
    if (out[0]) snprintf(dir, sizeof dir, "%s", out);
    else snprintf(dir, sizeof dir, "%s/report", run_dir);
    bs_mkdir_p(dir);
    RunMetrics r = load_metrics(metrics_path);
    write_page(dir, run_dir, metrics_path, &r);
    free_metrics(&r);
    return 0;
}
