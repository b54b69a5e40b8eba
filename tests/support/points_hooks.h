/*  points_hooks.h: the order-points handler with its test hooks, for test
    builds only (never linked into a production handler). It registers

      grant_points            the production handler's decode, use case and
                              report, plus the test_* payload keys
                              (docs/points.md, "Test hooks"): pauses inside
                              the transaction and after COMMIT, a retry or a
                              SIGKILL after COMMIT, a trace line;
                              Its batch function is the production
                              one with the same hooks around it (a job
                              that pauses inside its transaction runs
                              alone; the after-COMMIT hooks act after the
                              batch's COMMIT);
      grant_points_unguarded  a deliberately broken twin that adds the
                              points and ignores the guard, so that a chaos
                              checker can prove it sees double grants.

    A worker binary built for tests calls oq_points_test_register instead of
    oq_points_handler_register. */
#ifndef ONCEQ_POINTS_HOOKS_H
#define ONCEQ_POINTS_HOOKS_H

#include "onceq/worker.h"
#include "points/handler.h"

/* The job type of the unguarded twin. */
#define OQ_POINTS_UNGUARDED_JOB_TYPE "grant_points_unguarded"

/* The environment variable a test worker reads: test hooks are on only
   when it is exactly "1". */
#define OQ_POINTS_TEST_HOOKS_ENV "ONCEQ_TEST_HOOKS"

/* Register grant_points (with hooks) and grant_points_unguarded over
   points (borrowed: it must outlive the registry's use), and warn in the
   log that test hooks are on. 0 or -1. */
int oq_points_test_register(oq_registry_t *registry, oq_points_handler_t *points);

/* The batch function oq_points_test_register declares for grant_points
   (oq_batch_fn; state is the oq_points_handler_t), public for tests that
   call it directly. */
void oq_points_test_grant_batch(const oq_job_t *const *jobs, size_t count, void *state,
                                oq_report_t *reports);

/* True if the environment asks for test hooks (OQ_POINTS_TEST_HOOKS_ENV=1). */
bool oq_points_test_hooks_wanted(void);

#endif
