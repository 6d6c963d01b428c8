/* An in-memory transport backend (the ops of dataplane/transport.h) for
 * driving a real network core (dataplane/netcore.c) in unit tests and the
 * fuzzer without sockets: a test opens connections, feeds bytes into them
 * in whatever pieces it likes, takes what the core sent, and closes from
 * either side. Like a real backend it calls the core back only from poll
 * (the core's turn), except tt_connect, which offers the connection at
 * once. A connection's state belongs to the test: it outlives the core's
 * connection (so what was sent can still be read) and is freed by tt_free.
 * Single-threaded; one network core. */
#ifndef SLUICE_TEST_TRANSPORT_TEST_H
#define SLUICE_TEST_TRANSPORT_TEST_H
#include "dataplane/transport.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern const struct sluice_transport_ops sluice_transport_test;

struct tt_conn;

/* What the backend saw, for assertions. */
struct tt_stats {
	int64_t close_calls;   /* the core's close op */
	int64_t send_calls;    /* the core's send op */
	int64_t pause_calls;   /* recv_pause(true) */
	int64_t upcalls;       /* every upcall made (progress, for tt_pump) */
};
extern struct tt_stats tt_stats;

/* Open a connection (the accepted upcall). NULL when the core refused. */
struct tt_conn *tt_connect(struct netcore *nc);
/* The core's connection, or NULL once the core has been told it closed. */
struct conn *tt_core_conn(const struct tt_conn *t);
/* Bytes from the peer, delivered on the next polls (while not paused) in
 * pieces of at most tt_set_piece bytes (0: all that is waiting). */
void tt_feed(struct tt_conn *t, const void *bytes, size_t n);
void tt_set_piece(struct tt_conn *t, size_t piece_bytes);
/* Hold the core's sends (a peer that stops reading) or let them finish;
 * send_max > 0 limits how many bytes one send takes (short sends). */
void tt_hold_sends(struct tt_conn *t, bool hold);
void tt_set_send_max(struct tt_conn *t, size_t send_max);
/* The peer closes (after its fed bytes are delivered). */
void tt_peer_close(struct tt_conn *t);
/* While held, a connection the core closed is not reported closed (the
 * core keeps it, closing, until tt_release_closed). Off by default. */
void tt_hold_closed(struct tt_conn *t, bool hold);
/* Whether the core paused reading; whether it closed the connection (its
 * close op or a reported close); bytes fed and not yet delivered. */
bool tt_paused(const struct tt_conn *t);
bool tt_closing(const struct tt_conn *t);
bool tt_gone(const struct tt_conn *t);
size_t tt_pending_in(const struct tt_conn *t);
/* What the core has sent and the test not taken yet. */
const uint8_t *tt_sent(const struct tt_conn *t, size_t *len);
void tt_sent_consume(struct tt_conn *t, size_t n);
/* Turn the network core (sluice_netcore_turn, not waiting) until nothing
 * more happens, at most max_turns times. Returns the turns taken. */
int tt_pump(struct netcore *nc, int max_turns);
/* Free the test's state of a connection the core no longer holds
 * (tt_gone); one still open is closed by the peer and pumped away first. */
void tt_free(struct netcore *nc, struct tt_conn *t);

#endif
