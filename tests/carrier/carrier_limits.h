/*  carrier_limits.h: every default, bound and timer of onceq-carrier, the
    mock carrier API, in one place with its unit in the name. docs/carrier.md
    quotes them; change both together. */
#ifndef ONCEQ_CARRIER_LIMITS_H
#define ONCEQ_CARRIER_LIMITS_H

/* ---- listening ---- */
#define OQ_CARRIER_DEFAULT_BIND "127.0.0.1"
#define OQ_CARRIER_DEFAULT_PORT 7760 /* 0: the system picks one, printed at start */
#define OQ_CARRIER_MAX_PORT     65535
/* Open connections at most (suspended ones, waiting out --delay-ms, count
   too); beyond it new connections are refused by the server library. */
#define OQ_CARRIER_MAX_CONNECTIONS 512
/* A connection silent this long is closed (never one waiting out a delay). */
#define OQ_CARRIER_CONNECTION_TIMEOUT_S 30

/* ---- requests ---- */
#define OQ_CARRIER_MAX_BODY_BYTES    (16 * 1024)        /* POST body; beyond: 413 */
#define OQ_CARRIER_MAX_KEY_LEN       255                /* Idempotency-Key, bytes; beyond: 400 */
#define OQ_CARRIER_MAX_ADDRESS_LEN   1024               /* "address", bytes */
#define OQ_CARRIER_MAX_ITEMS         100                /* entries of "items" */
#define OQ_CARRIER_MAX_SKU_LEN       64                 /* an item's "sku", bytes */
#define OQ_CARRIER_MAX_ITEM_QTY      1000000            /* an item's "qty" */
#define OQ_CARRIER_MAX_ORDER_ID      9007199254740991LL /* 2^53 - 1: exact in any JSON reader */
#define OQ_CARRIER_MAX_REFERENCE_LEN 32                 /* "SHP-" and a counter */
#define OQ_CARRIER_REFERENCE_DIGITS  6 /* SHP-000042; longer once the counter needs it */

/* ---- shipments held in memory ---- */
#define OQ_CARRIER_DEFAULT_MAX_SHIPMENTS 100000 /* beyond: 507 for a new key */
#define OQ_CARRIER_MAX_SHIPMENTS_LIMIT   10000000
#define OQ_CARRIER_DEFAULT_FIRST_REF     1 /* the counter of the first shipment */
#define OQ_CARRIER_MAX_FIRST_REF         1000000000000LL

/* ---- faults ---- */
#define OQ_CARRIER_MAX_DELAY_MS 600000 /* --delay-ms */

#endif
