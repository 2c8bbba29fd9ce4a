/* report_chart.h: the charts of `batchscale report` (cli/cmd_report.c) and
 * `batchscale batch-sweep`, drawn with cairo into PNG bytes: a chart of
 * series against one x axis (lines, or points for sparse events such as
 * skipped steps and checkpoint stalls), the same with each series' own x
 * values and log axes (the sweep's Pareto front), and a heatmap (per-layer gradient norms: steps across, layers
 * down, log colour scale). Non-finite values leave gaps. The caller writes
 * the bytes to a file and into the page. */
#ifndef BS_CLI_REPORT_CHART_H
#define BS_CLI_REPORT_CHART_H

#include <stdbool.h>
#include <stddef.h>

#define CHART_MAX_SERIES 4

typedef struct {
    const char *label;
    const double *y; /* n values (NaN: none) */
    bool points;     /* markers only, no line */
} ChartSeries;

typedef struct {
    const char *title, *x_label, *y_label;
    const double *x;
    int n;
    bool log_y;
    ChartSeries series[CHART_MAX_SERIES];
    int num_series;
} Chart;

/* A series with its own n points (x[i], y[i]). */
typedef struct {
    const char *label;
    const double *x, *y;
    int n;
    bool points;
} XYSeries;

typedef struct {
    const char *title, *x_label, *y_label;
    bool log_x, log_y;
    XYSeries series[CHART_MAX_SERIES];
    int num_series;
} XYChart;

typedef struct {
    unsigned char *data;
    size_t len, cap;
} PngBytes;

/* The chart as a PNG (caller frees data). */
PngBytes chart_png(const Chart *c);
PngBytes xy_chart_png(const XYChart *c);
/* values[row * cols + col]: rows labelled row_labels, columns are steps x[]. */
PngBytes heatmap_png(const char *title, const double *x, int cols, const double *values, int rows,
                     const char *const *row_labels);
/* Frees cairo's and fontconfig's caches (once, after the last chart). */
void chart_release_fonts(void);

#endif
