/*  migrate.h: schema migrations. Versioned SQL files NNNN_name.sql in one
    directory (deploy/sql in the source tree, share/onceq/sql when
    installed) are applied in version order, each in its own transaction
    together with its row in onceq_migrations(version, name, applied_at), so
    a migration is either applied and recorded or neither, and running the
    migrator again applies nothing. A session advisory lock makes two
    migrators started at once take turns.

    Files must not contain BEGIN or COMMIT (the migrator owns the
    transaction), nor statements that cannot run in one (CREATE INDEX
    CONCURRENTLY). */
#ifndef ONCEQ_MIGRATE_H
#define ONCEQ_MIGRATE_H

#include <stdint.h>

#include "pg/pg.h"

/* Told about each migration as it is applied. */
typedef void (*oq_migrate_report_fn)(void *ctx, uint32_t version, const char *name);

/* Apply the migrations of dir that onceq_migrations does not record.
   report (may be NULL) hears of each one applied. 0 with *applied set to
   the number applied (0: up to date) and *latest to the highest version now
   recorded; -1 with error (a file problem is OQ_PG_ERR_FAIL). */
int oq_migrate_run(oq_pg_t *pg, const char *dir, oq_migrate_report_fn report, void *ctx,
                   uint32_t *applied, uint32_t *latest, oq_pg_error_t *error);

#endif
