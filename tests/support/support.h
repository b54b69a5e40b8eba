/*  support.h: the small fixtures every kind of test needs (unit,
    integration, chaos, bench), in one place instead of a copy per
    directory: a monotonic clock, a sleep, a free loopback port, a fresh
    temp dir and its removal, the CPUs a thread may run on, and the
    project-local PostgreSQL script (deploy/pg.sh) with the conninfo of a
    cluster it started. */
#ifndef ONCEQ_TEST_SUPPORT_H
#define ONCEQ_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Milliseconds on the monotonic clock. */
int64_t oq_support_now_ms(void);

/* Sleep ms milliseconds (a signal may end it early). */
void oq_support_sleep_ms(int ms);

/* Sleep us microseconds in full (resumed after a signal). */
void oq_support_sleep_us(uint64_t us);

/* A loopback TCP port the kernel considers free now, or -1. Another
   process may take it before it is bound; whoever binds it then says so. */
int oq_support_free_port(void);

/* Create a fresh directory $TMPDIR/PREFIX-XXXXXX (/tmp without TMPDIR)
   into out. 0, or -1 with errno. */
int oq_support_temp_dir(const char *prefix, char *out, size_t len);

/* Remove a directory tree (links are removed, not followed). 0 or -1. */
int oq_support_remove_tree(const char *path);

/* The CPUs (Cpus_allowed_list, e.g. "0-1") of the first thread of process
   pid (0: this one) whose name starts with name, in out. 0, or -1 if the
   process has no such thread (or is gone). */
int oq_support_thread_cpus(pid_t pid, const char *name, char *out, size_t len);

/* deploy/pg.sh for this build: ../share/onceq/pg.sh next to the running
   binary (the build tree's link to the checkout's script, or the installed
   copy), unless ONCEQ_PG_SCRIPT names another. 0 or -1. */
int oq_support_pg_script(char *out, size_t len);

/* The libpq conninfo of the cluster pg.sh runs in dir on port. */
void oq_support_pg_url(const char *dir, int port, char *out, size_t len);

#endif
