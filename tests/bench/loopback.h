/*  loopback.h: the plain TCP side of the transport benchmarks
    (transport-rtt, chain-rtt): sockets on 127.0.0.1 tuned as a latency
    peer tunes them (TCP_NODELAY, a receive timeout so that a lost peer
    ends a run instead of hanging it), and whole-message reads and writes
    of sockets and of the pipes the benchmarks report through. */
#ifndef ONCEQ_BENCH_LOOPBACK_H
#define ONCEQ_BENCH_LOOPBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Read (reading) or write exactly len bytes of fd, a socket or a pipe; -1
   on error, timeout or EOF (the callers ignore SIGPIPE: a closed peer is an
   error here). */
int oq_loopback_full(int fd, void *buf, size_t len, bool reading);

/* TCP_NODELAY and a receive timeout of recv_timeout_ms on fd; 0 or -1. */
int oq_loopback_tune(int fd, int recv_timeout_ms);

/* A listening socket on 127.0.0.1 at a port the kernel picks, put in
 *port; the descriptor, or -1. */
int oq_loopback_listen(uint16_t *port);

/* A connection to 127.0.0.1:port, tuned (oq_loopback_tune); the
   descriptor, or -1. */
int oq_loopback_connect(uint16_t port, int recv_timeout_ms);

#endif
