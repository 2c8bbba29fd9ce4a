/* report_chart.c: line and point charts and a heatmap, with cairo, into
 * PNG bytes (see report_chart.h). */
#include "cli/report_chart.h"

#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define W 760.0
#define H 360.0
#define LEFT 80.0
#define RIGHT 30.0
#define TOP 40.0
#define BOTTOM 50.0

static const double COLOURS[CHART_MAX_SERIES][3] = {{0.1, 0.3, 0.7}, {0.8, 0.35, 0.05}, {0.2, 0.6, 0.2}, {0.6, 0.1, 0.5}};

typedef struct {
    double x0, x1, y0, y1; /* in log10 on a log axis */
    bool log_x, log_y;
} Frame;

static double fx(const Frame *f, double x) {
    double v = f->log_x ? log10(x) : x;
    return LEFT + (v - f->x0) / (f->x1 - f->x0) * (W - LEFT - RIGHT);
}
static double fy(const Frame *f, double y) {
    double v = f->log_y ? log10(y) : y;
    return H - BOTTOM - (v - f->y0) / (f->y1 - f->y0) * (H - TOP - BOTTOM);
}

static void text(cairo_t *cr, double x, double y, const char *s, double align) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - align * e.width, y);
    cairo_show_text(cr, s);
}

static cairo_status_t append_png(void *closure, const unsigned char *data, unsigned int len) {
    PngBytes *p = closure;
    if (p->len + len > p->cap) {
        p->cap = 2 * (p->len + len);
        p->data = realloc(p->data, p->cap);
        if (!p->data) return CAIRO_STATUS_NO_MEMORY;
    }
    memcpy(p->data + p->len, data, len);
    p->len += len;
    return CAIRO_STATUS_SUCCESS;
}

static cairo_t *begin(cairo_surface_t **surface, const char *title) {
    *surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, (int)W, (int)H);
    cairo_t *cr = cairo_create(*surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 15);
    text(cr, W / 2, 24, title, 0.5);
    cairo_set_font_size(cr, 11);
    return cr;
}

static PngBytes finish(cairo_surface_t *surface, cairo_t *cr) {
    cairo_destroy(cr);
    PngBytes p = {0};
    if (cairo_surface_write_to_png_stream(surface, append_png, &p) != CAIRO_STATUS_SUCCESS)
        bs_die("report: cannot encode a chart as PNG");
    cairo_surface_destroy(surface);
    return p;
}

/* A value a log axis can show (every finite value on a linear one). */
static bool shown(double v, bool log_axis) { return isfinite(v) && !(log_axis && v <= 0); }

/* The range of every series' x values and of their finite (and, on a log axis, positive) y values. */
static Frame frame_of(const XYChart *c) {
    Frame f = {INFINITY, -INFINITY, INFINITY, -INFINITY, c->log_x, c->log_y};
    for (int s = 0; s < c->num_series; s++) {
        const XYSeries *cs = &c->series[s];
        for (int i = 0; i < cs->n; i++) {
            if (shown(cs->x[i], c->log_x)) {
                double x = c->log_x ? log10(cs->x[i]) : cs->x[i];
                f.x0 = fmin(f.x0, x), f.x1 = fmax(f.x1, x);
            }
            if (!shown(cs->y[i], c->log_y)) continue;
            double y = c->log_y ? log10(cs->y[i]) : cs->y[i];
            f.y0 = fmin(f.y0, y), f.y1 = fmax(f.y1, y);
        }
    }
    if (!isfinite(f.x0)) f.x0 = 0, f.x1 = 1;
    if (!isfinite(f.y0)) f.y0 = 0, f.y1 = 1;
    if (f.x1 <= f.x0) f.x1 = f.x0 + 1;
    if (c->log_x) f.x0 -= 0.03 * (f.x1 - f.x0), f.x1 += 0.03 * (f.x1 - f.x0); /* points off the frame's edge */
    double pad = f.y1 > f.y0 ? 0.05 * (f.y1 - f.y0) : fmax(fabs(f.y0) * 0.1, 1e-12);
    if (!c->log_y && f.y0 >= 0 && f.y0 - pad < 0) f.y0 = 0;
    else f.y0 -= pad;
    f.y1 += pad;
    return f;
}

static void axes(cairo_t *cr, const Frame *f, const XYChart *c) {
    char label[64];
    cairo_set_line_width(cr, 1);
    for (int i = 0; i <= 4; i++) {
        double v = f->y0 + (f->y1 - f->y0) * i / 4, y = H - BOTTOM - (H - TOP - BOTTOM) * i / 4;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, LEFT, y), cairo_line_to(cr, W - RIGHT, y), cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        snprintf(label, sizeof label, "%.4g", f->log_y ? pow(10, v) : v);
        text(cr, LEFT - 6, y + 4, label, 1.0);
        double xv = f->x0 + (f->x1 - f->x0) * i / 4, xs = LEFT + (W - LEFT - RIGHT) * i / 4;
        snprintf(label, sizeof label, "%.4g", f->log_x ? pow(10, xv) : xv);
        text(cr, xs, H - BOTTOM + 16, label, 0.5);
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_rectangle(cr, LEFT, TOP, W - LEFT - RIGHT, H - TOP - BOTTOM), cairo_stroke(cr);
    text(cr, (LEFT + W - RIGHT) / 2, H - 14, c->x_label, 0.5);
    cairo_save(cr);
    cairo_translate(cr, 16, (TOP + H - BOTTOM) / 2), cairo_rotate(cr, -M_PI / 2);
    text(cr, 0, 0, c->y_label, 0.5);
    cairo_restore(cr);
}

static void series(cairo_t *cr, const Frame *f, const XYChart *c, int s) {
    const XYSeries *cs = &c->series[s];
    cairo_set_source_rgb(cr, COLOURS[s][0], COLOURS[s][1], COLOURS[s][2]);
    cairo_set_line_width(cr, 1.8);
    bool drawing = false;
    for (int i = 0; i < cs->n; i++) {
        double x = cs->x[i], y = cs->y[i];
        if (!shown(x, c->log_x) || !shown(y, c->log_y)) {
            drawing = false;
            continue;
        }
        if (cs->points) cairo_arc(cr, fx(f, x), fy(f, y), 3.5, 0, 2 * M_PI), cairo_fill(cr);
        else if (drawing) cairo_line_to(cr, fx(f, x), fy(f, y));
        else cairo_move_to(cr, fx(f, x), fy(f, y));
        drawing = true;
    }
    if (!cs->points) cairo_stroke(cr);
    text(cr, W - RIGHT - 8, TOP + 16 + 14 * s, cs->label, 1.0); /* the legend, in the series' colour */
}

PngBytes xy_chart_png(const XYChart *c) {
    cairo_surface_t *surface;
    cairo_t *cr = begin(&surface, c->title);
    Frame f = frame_of(c);
    axes(cr, &f, c);
    for (int s = 0; s < c->num_series; s++) series(cr, &f, c, s);
    return finish(surface, cr);
}

PngBytes chart_png(const Chart *c) {
    XYChart xy = {c->title, c->x_label, c->y_label, false, c->log_y, {{0}}, c->num_series};
    for (int s = 0; s < c->num_series; s++)
        xy.series[s] = (XYSeries){c->series[s].label, c->x, c->series[s].y, c->n, c->series[s].points};
    return xy_chart_png(&xy);
}

PngBytes heatmap_png(const char *title, const double *x, int cols, const double *values, int rows,
                     const char *const *row_labels) {
    cairo_surface_t *surface;
    cairo_t *cr = begin(&surface, title);
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < rows * cols; i++)
        if (isfinite(values[i]) && values[i] > 0) lo = fmin(lo, log10(values[i])), hi = fmax(hi, log10(values[i]));
    if (!isfinite(lo)) lo = 0, hi = 1;
    if (hi <= lo) hi = lo + 1;
    const double cw = (W - LEFT - RIGHT) / cols, ch = (H - TOP - BOTTOM) / rows;
    for (int r = 0; r < rows; r++) {
        for (int k = 0; k < cols; k++) {
            double v = values[r * cols + k], t = isfinite(v) && v > 0 ? (log10(v) - lo) / (hi - lo) : -1;
            if (t < 0) cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
            else cairo_set_source_rgb(cr, t, 0.25 + 0.5 * (1 - fabs(2 * t - 1)), 1 - t); /* blue -> red */
            cairo_rectangle(cr, LEFT + k * cw, TOP + r * ch, cw + 0.5, ch + 0.5), cairo_fill(cr);
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        text(cr, LEFT - 6, TOP + (r + 0.5) * ch + 4, row_labels[r], 1.0);
    }
    char label[96];
    snprintf(label, sizeof label, "steps %.0f-%.0f; colour: log10 norm %.2f (blue) to %.2f (red)", x[0], x[cols - 1],
             lo, hi);
    text(cr, (LEFT + W - RIGHT) / 2, H - 14, label, 0.5);
    return finish(surface, cr);
}

void chart_release_fonts(void) {
    cairo_debug_reset_static_data();
    FcFini();
}
