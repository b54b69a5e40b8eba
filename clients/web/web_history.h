/*  web_history.h: the last hour of throughput, which the broker does not
    keep: onceq-web samples the broker's counters (jobs done and failed,
    summed over the queues) every OQ_WEB_SAMPLE_MS and keeps the newest
    OQ_WEB_HISTORY_SAMPLES in a ring, drawn as a plain SVG chart of the
    jobs per minute between two samples. The history starts when onceq-web
    does; a broker restart (a counter that went down) shows as a gap. */
#ifndef ONCEQ_WEB_HISTORY_H
#define ONCEQ_WEB_HISTORY_H

#include <stdint.h>

#include "web_buf.h"

/* Time between two samples: 10 s. */
#define OQ_WEB_SAMPLE_MS 10000
/* Samples kept: one hour of them. */
#define OQ_WEB_HISTORY_SAMPLES 360

typedef struct {
    int64_t at_ms;   /* when it was taken, Unix ms */
    uint64_t done;   /* jobs done since the broker started, every queue */
    uint64_t failed; /* jobs that failed for good, likewise */
} oq_web_sample_t;

typedef struct {
    oq_web_sample_t ring[OQ_WEB_HISTORY_SAMPLES];
    size_t count; /* samples held */
    size_t next;  /* where the next one goes */
} oq_web_history_t;

/* Keep a sample (the oldest goes once the ring is full). */
void oq_web_history_add(oq_web_history_t *self, const oq_web_sample_t *sample);

/* Draw an SVG chart of done (failed: false) or failed (true) jobs per
   minute over the samples held, with its title. */
void oq_web_history_svg(const oq_web_history_t *self, bool failed, const char *title,
                        oq_web_buf_t *out);

#endif
