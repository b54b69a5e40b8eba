/*  web_history.c: see web_history.h. */
#include "web_history.h"

#include <inttypes.h>
#include <stdbool.h>

/* The chart's size in SVG units. */
#define S_CHART_W 360
#define S_CHART_H 80

void oq_web_history_add(oq_web_history_t *self, const oq_web_sample_t *sample)
{
    self->ring[self->next] = *sample;
    self->next = (self->next + 1) % OQ_WEB_HISTORY_SAMPLES;
    if (self->count < OQ_WEB_HISTORY_SAMPLES)
        self->count++;
}

static const oq_web_sample_t *s_at(const oq_web_history_t *self, size_t i)
{
    size_t first = (self->next + OQ_WEB_HISTORY_SAMPLES - self->count) % OQ_WEB_HISTORY_SAMPLES;
    return &self->ring[(first + i) % OQ_WEB_HISTORY_SAMPLES];
}

/* Jobs per minute between samples i-1 and i; -1 for a gap (a counter that
   went down: the broker restarted, or another broker answered). */
static double s_rate(const oq_web_history_t *self, size_t i, bool failed)
{
    const oq_web_sample_t *a = s_at(self, i - 1), *b = s_at(self, i);
    uint64_t x = failed ? a->failed : a->done, y = failed ? b->failed : b->done;
    if (y < x || b->at_ms <= a->at_ms)
        return -1;
    return (double)(y - x) * 60000.0 / (double)(b->at_ms - a->at_ms);
}

void oq_web_history_svg(const oq_web_history_t *self, bool failed, const char *title,
                        oq_web_buf_t *out)
{
    double top = 0;
    for (size_t i = 1; i < self->count; i++) {
        double r = s_rate(self, i, failed);
        if (r > top)
            top = r;
    }
    double last = self->count > 1 ? s_rate(self, self->count - 1, failed) : -1;
    oq_web_buf_printf(out,
                      "<figure class=\"chart\"><figcaption>%s: <b>%.0f</b>/min now, peak "
                      "%.0f/min</figcaption>"
                      "<svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
                      "aria-label=\"%s per minute, last hour\">"
                      "<rect width=\"%d\" height=\"%d\" class=\"bg\"/>",
                      title, last > 0 ? last : 0, top, S_CHART_W, S_CHART_H, S_CHART_W, S_CHART_H,
                      title, S_CHART_W, S_CHART_H);
    if (self->count < 2) {
        oq_web_buf_printf(out,
                          "<text x=\"8\" y=\"%d\" class=\"note\">collecting: one point every "
                          "%d s</text></svg></figure>",
                          S_CHART_H / 2, OQ_WEB_SAMPLE_MS / 1000);
        return;
    }
    /* x: the sample's place in the hour, right-aligned (the newest at the
       right edge); y: its rate, scaled to the hour's peak. */
    double step = (double)S_CHART_W / (OQ_WEB_HISTORY_SAMPLES - 1);
    double x0 = S_CHART_W - step * (double)(self->count - 1);
    bool open = false;
    for (size_t i = 1; i < self->count; i++) {
        double r = s_rate(self, i, failed);
        if (r < 0) {
            if (open)
                oq_web_buf_puts(out, "\"/>");
            open = false;
            continue;
        }
        double y = S_CHART_H - 4 - (top > 0 ? r / top : 0) * (S_CHART_H - 8);
        if (!open)
            oq_web_buf_printf(out, "<polyline class=\"%s\" points=\"",
                              failed ? "line bad" : "line");
        oq_web_buf_printf(out, "%.1f,%.1f ", x0 + step * (double)i, y);
        open = true;
    }
    if (open)
        oq_web_buf_puts(out, "\"/>");
    oq_web_buf_puts(out, "</svg></figure>");
}
