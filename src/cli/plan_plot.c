/* plan_plot.c: `batchscale plan --plot FILE.png|.svg`: the scaling chart,
 * linear scaling efficiency (left axis) and tokens/s (right axis, log)
 * against the GPU count (log), drawn with cairo. The same drawing code
 * serves both formats; only the surface differs. */
#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli/plan_report.h"
#include "core/error.h"

#define WIDTH 860.0
#define HEIGHT 520.0
#define LEFT 80.0
#define RIGHT 90.0
#define TOP 60.0
#define BOTTOM 70.0

typedef struct {
    double x0, x1;     /* log2 GPU count range */
    double y1;         /* efficiency axis top (fraction) */
    double t0, t1;     /* log10 tokens/s range */
} Axes;

static double px(const Axes *a, double gpus) {
    return LEFT + (log2(gpus) - a->x0) / (a->x1 - a->x0) * (WIDTH - LEFT - RIGHT);
}
static double py_eff(const Axes *a, double e) { return HEIGHT - BOTTOM - e / a->y1 * (HEIGHT - TOP - BOTTOM); }
static double py_tps(const Axes *a, double tps) {
    return HEIGHT - BOTTOM - (log10(tps) - a->t0) / (a->t1 - a->t0) * (HEIGHT - TOP - BOTTOM);
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double align) {
    cairo_text_extents_t ext;
    cairo_text_extents(cr, s, &ext);
    cairo_move_to(cr, x - align * ext.width, y);
    cairo_show_text(cr, s);
}

static void draw_axes(cairo_t *cr, const Axes *a, const PlanAnswer *r) {
    char label[160];
    cairo_set_line_width(cr, 1.0);
    cairo_set_font_size(cr, 12);
    for (int i = 0; i <= 5; i++) { /* efficiency grid */
        double e = a->y1 * i / 5.0, y = py_eff(a, e);
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, LEFT, y);
        cairo_line_to(cr, WIDTH - RIGHT, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.1, 0.3, 0.7);
        snprintf(label, sizeof label, "%.0f%%", 100 * e);
        text_at(cr, LEFT - 8, y + 4, label, 1.0);
    }
    for (int p = (int)ceil(a->t0); p <= (int)floor(a->t1); p++) { /* tokens/s decades */
        cairo_set_source_rgb(cr, 0.75, 0.35, 0.05);
        snprintf(label, sizeof label, "1e%d", p);
        text_at(cr, WIDTH - RIGHT + 8, py_tps(a, pow(10, p)) + 4, label, 0.0);
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    for (int i = 0; i < r->n_points; i++) {
        double x = px(a, r->points[i].gpus);
        snprintf(label, sizeof label, "%d", r->points[i].gpus);
        text_at(cr, x, HEIGHT - BOTTOM + 18, label, 0.5);
    }
    cairo_rectangle(cr, LEFT, TOP, WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    cairo_stroke(cr);
    cairo_set_font_size(cr, 13);
    text_at(cr, (LEFT + WIDTH - RIGHT) / 2, HEIGHT - 25, "GPUs", 0.5);
    cairo_set_source_rgb(cr, 0.1, 0.3, 0.7);
    text_at(cr, LEFT, TOP - 12, "linear scaling efficiency", 0.0);
    cairo_set_source_rgb(cr, 0.75, 0.35, 0.05);
    text_at(cr, WIDTH - RIGHT, TOP - 12, "tokens/s", 1.0);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 15);
    snprintf(label, sizeof label, "%s on %s, %s scaling", r->in.model.name, r->in.fleet.hw[0].name, r->weak ? "weak" : "strong");
    text_at(cr, WIDTH / 2, 28, label, 0.5);
}

static void draw_series(cairo_t *cr, const Axes *a, const PlanAnswer *r, bool efficiency) {
    if (efficiency) cairo_set_source_rgb(cr, 0.1, 0.3, 0.7);
    else cairo_set_source_rgb(cr, 0.75, 0.35, 0.05);
    cairo_set_line_width(cr, 2.2);
    bool drawing = false;
    for (int i = 0; i < r->n_points; i++) {
        const ScalePoint *s = &r->points[i];
        if (!s->found) {
            drawing = false;
            continue;
        }
        double x = px(a, s->gpus), y = efficiency ? py_eff(a, s->linear) : py_tps(a, s->best.tokens_per_s);
        if (drawing) cairo_line_to(cr, x, y);
        else cairo_move_to(cr, x, y);
        drawing = true;
    }
    cairo_stroke(cr);
    for (int i = 0; i < r->n_points; i++) {
        const ScalePoint *s = &r->points[i];
        if (!s->found) continue;
        double x = px(a, s->gpus), y = efficiency ? py_eff(a, s->linear) : py_tps(a, s->best.tokens_per_s);
        if (efficiency) cairo_arc(cr, x, y, 4, 0, 2 * M_PI);
        else cairo_rectangle(cr, x - 3.5, y - 3.5, 7, 7);
        cairo_fill(cr);
    }
}

static void draw(cairo_t *cr, const PlanAnswer *r) {
    Axes a = {log2(r->points[0].gpus), log2(r->points[r->n_points - 1].gpus), 1.0, INFINITY, -INFINITY};
    if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
    for (int i = 0; i < r->n_points; i++)
        if (r->points[i].found) {
            double t = log10(r->points[i].best.tokens_per_s);
            a.t0 = fmin(a.t0, floor(t)), a.t1 = fmax(a.t1, ceil(t));
            a.y1 = fmax(a.y1, ceil(r->points[i].linear * 5.0) / 5.0);
        }
    if (!isfinite(a.t0)) a.t0 = 0, a.t1 = 1;
    if (a.t1 <= a.t0) a.t1 = a.t0 + 1;
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    draw_axes(cr, &a, r);
    draw_series(cr, &a, r, true);
    draw_series(cr, &a, r, false);
}

void report_plot(const PlanAnswer *r, const char *path) {
    if (r->n_points == 0) bs_die("--plot %s: no scaling points to draw", path);
    const char *dot = strrchr(path, '.');
    bool svg = dot && strcasecmp(dot, ".svg") == 0;
    cairo_surface_t *surface = svg ? cairo_svg_surface_create(path, WIDTH, HEIGHT)
                                   : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, (int)WIDTH, (int)HEIGHT);
    if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS)
        bs_die("--plot %s: cannot create (%s)", path, cairo_status_to_string(cairo_surface_status(surface)));
    cairo_t *cr = cairo_create(surface);
    draw(cr, r);
    cairo_destroy(cr);
    cairo_status_t status = svg ? (cairo_surface_finish(surface), cairo_surface_status(surface))
                                : cairo_surface_write_to_png(surface, path);
    cairo_surface_destroy(surface);
    cairo_debug_reset_static_data(); /* font caches: drawing is done */
    FcFini();
    if (status != CAIRO_STATUS_SUCCESS) bs_die("--plot %s: cannot write (%s)", path, cairo_status_to_string(status));
}
