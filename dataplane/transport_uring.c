/* The default transport backend: kernel TCP driven through one io_uring per
 * network core (transport.h has the contract). The cores share one
 * listening socket (bound once, by core 0's init), each keeping an accept
 * armed on it, so a connection goes to whichever core takes it first.
 *
 * Receiving: where the kernel has them (probed at init: a provided-buffer
 * ring registers, and a multishot recv on a socket pair answers with
 * IORING_CQE_F_MORE), each connection keeps one multishot recv armed that
 * takes buffers from the core's provided-buffer ring; a buffer goes back to
 * the ring as soon as the network core's received upcall returns (it
 * consumes or copies). Otherwise each connection has its own buffer and a
 * single-shot recv re-armed after each completion. Pausing cancels the
 * multishot recv (single-shot: is not re-armed); bytes it had already read
 * are still delivered.
 *
 * user_data encoding: a struct uconn pointer (8-aligned) with the
 * operation in the low 3 bits: UD_ACCEPT and UD_EVENTFD carry no pointer;
 * UD_RECV, UD_SEND and UD_CANCEL (the cancel of a multishot recv) carry
 * the connection. A connection's state is freed, and its fd closed, only
 * when none of its operations is left in the ring (u->inflight == 0), and
 * the core hears of it (closed upcall) at the end of that poll. */
#include "common/log.h"
#include "dataplane/req.h"
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

enum { UD_ACCEPT = 1, UD_RECV = 2, UD_SEND = 3, UD_EVENTFD = 4, UD_CANCEL = 5, UD_MASK = 7 };

#define SLUICE_LISTEN_BACKLOG 1024        /* connections the kernel queues before accept */
#define SLUICE_LISTEN_RETRY_MS 50         /* pause between binds of a port in use */
#define SLUICE_URING_BUFS 128             /* provided receive buffers per network core */
#define SLUICE_URING_BUF_BYTES (64u << 10)
#define SLUICE_URING_BGID 0               /* the provided-buffer group of every recv */
#define SLUICE_URING_CQES_PER_POLL 1024   /* completions handled per poll */
_Static_assert((SLUICE_URING_BUFS & (SLUICE_URING_BUFS - 1)) == 0, "a buffer ring's size is a power of two");
_Static_assert(SLUICE_URING_BUFS <= 32768, "buffer ids are 16 bits");
_Static_assert(SLUICE_URING_CQES_PER_POLL <= SLUICE_URING_ENTRIES * 2, "one poll reaps at most the CQ ring");

/* One connection's state in this backend. */
struct uconn {
	struct conn *c;
	int fd;
	int inflight;       /* operations of it in the ring */
	bool recv_armed, paused, cancelling, send_armed, closing, listed;
	int close_error;    /* what the closed upcall reports */
	uint8_t *rbuf;      /* single-shot receive buffer (no multishot) */
	struct msghdr msg;
	struct iovec iov[SLUICE_SEND_RANGES_MAX];
	struct uconn *done_next;
};

/* One network core's state in this backend. */
struct ustate {
	struct io_uring ring;
	struct netcore *nc;
	int listen_fd;
	bool multishot;
	struct io_uring_buf_ring *br; /* provided buffers, when multishot */
	uint8_t *bufs;
	bool accept_armed, efd_armed;
	uint64_t efd_buf;
	struct sockaddr_storage accept_addr;
	socklen_t accept_len;
	struct uconn *done; /* closing, nothing in flight: reported at the end of poll */
};

static struct io_uring_sqe *sqe_get(struct ustate *us)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&us->ring);
	if (!sqe) {
		io_uring_submit(&us->ring);
		sqe = io_uring_get_sqe(&us->ring);
	}
	assert(sqe); /* the ring was just emptied */
	return sqe;
}

static struct ustate *ustate_of(const struct conn *c) { return c->nc->tstate; }

/* ---- receiving -------------------------------------------------------- */

static void arm_recv(struct ustate *us, struct uconn *u)
{
	if (u->closing || u->paused || u->recv_armed)
		return;
	struct io_uring_sqe *sqe = sqe_get(us);
	if (us->multishot) {
		io_uring_prep_recv_multishot(sqe, u->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = SLUICE_URING_BGID;
	} else {
		io_uring_prep_recv(sqe, u->fd, u->rbuf, SLUICE_CONN_RECV_BYTES, 0);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)u | UD_RECV);
	u->recv_armed = true;
	u->inflight++;
}

static void buf_recycle(struct ustate *us, unsigned bid)
{
	assert(bid < SLUICE_URING_BUFS);
	io_uring_buf_ring_add(us->br, us->bufs + (size_t)bid * SLUICE_URING_BUF_BYTES, SLUICE_URING_BUF_BYTES,
			      (unsigned short)bid, io_uring_buf_ring_mask(SLUICE_URING_BUFS), 0);
	io_uring_buf_ring_advance(us->br, 1);
}

static void maybe_done(struct ustate *us, struct uconn *u)
{
	if (!u->closing || u->inflight > 0 || u->listed)
		return;
	u->listed = true;
	u->done_next = us->done;
	us->done = u;
}

/* Begin tearing down; shutdown completes every recv and send in flight. */
static void uconn_close(struct ustate *us, struct uconn *u, bool abort, int error)
{
	if (u->closing)
		return;
	u->closing = true;
	u->close_error = error;
	if (abort) {
		struct linger lg = {1, 0};
		(void)setsockopt(u->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	}
	shutdown(u->fd, SHUT_RDWR);
	maybe_done(us, u);
}

static void on_recv(struct ustate *us, struct uconn *u, int res, unsigned flags)
{
	if (!(flags & IORING_CQE_F_MORE)) {
		assert(u->recv_armed && u->inflight > 0);
		u->recv_armed = false;
		u->inflight--;
	}
	if (res > 0) {
		const uint8_t *bytes = u->rbuf;
		if (flags & IORING_CQE_F_BUFFER)
			bytes = us->bufs + (size_t)(flags >> IORING_CQE_BUFFER_SHIFT) * SLUICE_URING_BUF_BYTES;
		if (!u->closing)
			sluice_netcore_received(u->c, bytes, (size_t)res);
		if (flags & IORING_CQE_F_BUFFER)
			buf_recycle(us, flags >> IORING_CQE_BUFFER_SHIFT);
	} else if (res == 0 || (res != -ENOBUFS && res != -ECANCELED)) {
		/* The peer closed (0) or the socket failed. */
		if (res < 0 && res != -ECONNRESET && !u->closing)
			SLOG_DEBUG("net", "%s: recv: %s", u->c->peer, strerror(-res));
		uconn_close(us, u, false, res);
	}
	if (!u->recv_armed)
		arm_recv(us, u); /* multishot ended (out of buffers, cancelled, resumed) or single-shot */
	maybe_done(us, u);
}

static void uring_recv_pause(struct conn *c, bool paused)
{
	struct ustate *us = ustate_of(c);
	struct uconn *u = c->tconn;
	u->paused = paused;
	if (!paused) {
		arm_recv(us, u);
		return;
	}
	if (!us->multishot || !u->recv_armed || u->cancelling)
		return; /* a single-shot recv in flight completes; it is not re-armed */
	struct io_uring_sqe *sqe = sqe_get(us);
	io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)u | UD_RECV, 0);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)u | UD_CANCEL);
	u->cancelling = true;
	u->inflight++;
}

/* ---- sending and closing ---------------------------------------------- */

static int uring_send(struct conn *c, const struct sluice_send_range *ranges, int n)
{
	struct ustate *us = ustate_of(c);
	struct uconn *u = c->tconn;
	assert(!u->send_armed && n > 0 && n <= SLUICE_SEND_RANGES_MAX);
	if (u->closing)
		return -EPIPE;
	for (int i = 0; i < n; i++)
		u->iov[i] = (struct iovec){(void *)ranges[i].base, ranges[i].len};
	memset(&u->msg, 0, sizeof u->msg);
	u->msg.msg_iov = u->iov;
	u->msg.msg_iovlen = (size_t)n;
	struct io_uring_sqe *sqe = sqe_get(us);
	io_uring_prep_sendmsg(sqe, u->fd, &u->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)u | UD_SEND);
	u->send_armed = true;
	u->inflight++;
	return 0;
}

static void on_send(struct ustate *us, struct uconn *u, int res)
{
	assert(u->send_armed && u->inflight > 0);
	u->send_armed = false;
	u->inflight--;
	sluice_netcore_sent(u->c, res);
	maybe_done(us, u);
}

static void uring_close(struct conn *c, bool abort)
{
	uconn_close(ustate_of(c), c->tconn, abort, 0);
}

/* Tell the core about connections that are done, then free them. */
static void report_done(struct ustate *us)
{
	while (us->done) {
		struct uconn *u = us->done;
		us->done = u->done_next;
		assert(u->closing && u->inflight == 0);
		sluice_netcore_closed(u->c, u->close_error);
		close(u->fd);
		free(u->rbuf);
		free(u);
	}
}

/* ---- accepting -------------------------------------------------------- */

static void arm_accept(struct ustate *us)
{
	if (us->accept_armed || __atomic_load_n(&us->nc->b->stopping, __ATOMIC_ACQUIRE))
		return;
	struct io_uring_sqe *sqe = sqe_get(us);
	us->accept_len = sizeof us->accept_addr;
	io_uring_prep_accept(sqe, us->listen_fd, (struct sockaddr *)&us->accept_addr, &us->accept_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, UD_ACCEPT);
	us->accept_armed = true;
}

static void peer_name(const struct sockaddr_storage *ss, char *host, size_t len, int *port)
{
	snprintf(host, len, "?");
	*port = 0;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, host, (socklen_t)len);
		*port = ntohs(a->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, host, (socklen_t)len);
		*port = ntohs(a->sin6_port);
	}
}

static void on_accept(struct ustate *us, int res)
{
	us->accept_armed = false;
	if (res < 0) {
		if (res != -EINTR && res != -ECANCELED)
			SLOG_WARN("net", "accept: %s", strerror(-res));
		arm_accept(us);
		return;
	}
	struct uconn *u = calloc(1, sizeof *u);
	if (u && !us->multishot)
		u->rbuf = malloc(SLUICE_CONN_RECV_BYTES);
	if (!u || (!us->multishot && !u->rbuf)) {
		free(u);
		close(res);
		arm_accept(us);
		return;
	}
	int one = 1;
	setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	u->fd = res;
	char host[INET6_ADDRSTRLEN];
	int port;
	peer_name(&us->accept_addr, host, sizeof host, &port);
	u->c = sluice_netcore_accepted(us->nc, u, host, port);
	if (!u->c) {
		close(res);
		free(u->rbuf);
		free(u);
	} else {
		assert(u->c->tconn == u);
		arm_recv(us, u);
	}
	arm_accept(us);
}

/* ---- poll ------------------------------------------------------------- */

static void dispatch(struct ustate *us, struct io_uring_cqe *cqe)
{
	uintptr_t ud = (uintptr_t)io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	unsigned flags = cqe->flags;
	io_uring_cqe_seen(&us->ring, cqe);
	struct uconn *u = (struct uconn *)(ud & ~(uintptr_t)UD_MASK);
	switch (ud & UD_MASK) {
	case UD_ACCEPT: on_accept(us, res); break;
	case UD_RECV: on_recv(us, u, res, flags); break;
	case UD_SEND: on_send(us, u, res); break;
	case UD_CANCEL:
		u->cancelling = false;
		u->inflight--;
		maybe_done(us, u);
		break;
	case UD_EVENTFD: us->efd_armed = false; break;
	default: assert(!"unknown user_data"); break;
	}
}

static void uring_poll(struct netcore *nc, int64_t wait_ms)
{
	struct ustate *us = nc->tstate;
	arm_accept(us);
	if (!us->efd_armed) {
		struct io_uring_sqe *sqe = sqe_get(us);
		io_uring_prep_read(sqe, nc->rt.efd, &us->efd_buf, sizeof us->efd_buf, 0);
		io_uring_sqe_set_data64(sqe, UD_EVENTFD);
		us->efd_armed = true;
	}
	struct io_uring_cqe *cqe;
	if (wait_ms > 0 && !us->done) {
		struct __kernel_timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000};
		io_uring_submit_and_wait_timeout(&us->ring, &cqe, 1, &ts, NULL);
	} else {
		io_uring_submit(&us->ring);
	}
	for (int i = 0; i < SLUICE_URING_CQES_PER_POLL && io_uring_peek_cqe(&us->ring, &cqe) == 0; i++)
		dispatch(us, cqe);
	report_done(us);
}

/* ---- start and stop --------------------------------------------------- */

/* The broker's one listening socket, shared by every network core's accept.
 * SO_REUSEADDR only, never SO_REUSEPORT: a killed broker's io_uring can keep
 * its listener open for a moment after the process is gone, and with
 * SO_REUSEPORT a new broker would bind beside it while the kernel still hands
 * connections to the dead one. So the port is taken alone or not at all: a
 * bind that finds it in use is retried for sluice.listener.bind.timeout.ms,
 * then the broker fails naming the address. */
static int listener_try(const struct addrinfo *ai, int *err)
{
	int one = 1;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SLUICE_LISTEN_BACKLOG) < 0) {
		*err = errno;
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int listener_open(const struct sluice_config *cfg)
{
	struct addrinfo hints = {0}, *ai = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	char port[16];
	snprintf(port, sizeof port, "%d", cfg->listen_port);
	const char *host = cfg->listen_host[0] ? cfg->listen_host : NULL;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		SLOG_ERR("net", "listeners: cannot resolve %s: %s", cfg->listen_host, gai_strerror(rc));
		return -1;
	}
	int64_t start = sluice_now_ms(), until = start + cfg->listener_bind_timeout_ms;
	int fd, err = 0;
	bool told = false;
	while ((fd = listener_try(ai, &err)) < 0 && err == EADDRINUSE && sluice_now_ms() < until) {
		if (!told)
			SLOG_WARN("net", "listeners: %s:%d is in use; retrying for up to %" PRId64 " ms",
				  cfg->listen_host, cfg->listen_port, cfg->listener_bind_timeout_ms);
		told = true;
		usleep(SLUICE_LISTEN_RETRY_MS * 1000);
	}
	freeaddrinfo(ai);
	if (fd < 0 && err == EADDRINUSE)
		SLOG_ERR("net", "listeners: %s:%d is in use by another process (still after %" PRId64
			 " ms, sluice.listener.bind.timeout.ms)", cfg->listen_host, cfg->listen_port,
			 sluice_now_ms() - start);
	else if (fd < 0)
		SLOG_ERR("net", "listeners: cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port,
			 strerror(err));
	else if (told)
		SLOG_INFO("net", "listeners: %s:%d is ours after %" PRId64 " ms", cfg->listen_host, cfg->listen_port,
			  sluice_now_ms() - start);
	return fd;
}

/* Whether a multishot recv works on this kernel: armed on a socket pair,
 * it must deliver a byte with IORING_CQE_F_MORE (more to come). */
static bool multishot_works(struct ustate *us)
{
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return false;
	struct io_uring_sqe *sqe = sqe_get(us);
	io_uring_prep_recv_multishot(sqe, sp[0], NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = SLUICE_URING_BGID;
	io_uring_sqe_set_data64(sqe, UD_RECV);
	bool works = false, ended = false;
	if (write(sp[1], "p", 1) == 1) {
		io_uring_submit(&us->ring);
		shutdown(sp[0], SHUT_RDWR); /* ends the recv after the byte */
		for (int i = 0; i < 4 && !ended; i++) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&us->ring, &cqe) < 0)
				break;
			if (cqe->res == 1 && (cqe->flags & IORING_CQE_F_MORE))
				works = true;
			if (cqe->flags & IORING_CQE_F_BUFFER)
				buf_recycle(us, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
			ended = !(cqe->flags & IORING_CQE_F_MORE);
			io_uring_cqe_seen(&us->ring, cqe);
		}
	}
	close(sp[0]);
	close(sp[1]);
	return works && ended;
}

/* Provided buffers and multishot receive, where the kernel has them. */
static void buffers_setup(struct ustate *us)
{
	size_t ring_bytes = SLUICE_URING_BUFS * sizeof(struct io_uring_buf);
	void *br = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	us->bufs = malloc((size_t)SLUICE_URING_BUFS * SLUICE_URING_BUF_BYTES);
	if (br == MAP_FAILED || !us->bufs)
		goto fallback;
	us->br = br;
	struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)br, .ring_entries = SLUICE_URING_BUFS,
				       .bgid = SLUICE_URING_BGID};
	if (io_uring_register_buf_ring(&us->ring, &reg, 0) < 0)
		goto fallback;
	io_uring_buf_ring_init(us->br);
	for (unsigned i = 0; i < SLUICE_URING_BUFS; i++)
		io_uring_buf_ring_add(us->br, us->bufs + (size_t)i * SLUICE_URING_BUF_BYTES, SLUICE_URING_BUF_BYTES,
				      (unsigned short)i, io_uring_buf_ring_mask(SLUICE_URING_BUFS), (int)i);
	io_uring_buf_ring_advance(us->br, SLUICE_URING_BUFS);
	if (multishot_works(us)) {
		us->multishot = true;
		SLOG_DEBUG("net", "network core %d: multishot receive over %d provided buffers of %u bytes", us->nc->id,
			   SLUICE_URING_BUFS, SLUICE_URING_BUF_BYTES);
		return;
	}
	io_uring_unregister_buf_ring(&us->ring, SLUICE_URING_BGID);
fallback:
	SLOG_INFO("net", "network core %d: no multishot receive with provided buffers here; one recv at a time",
		  us->nc->id);
	if (br != MAP_FAILED)
		munmap(br, ring_bytes);
	us->br = NULL;
	free(us->bufs);
	us->bufs = NULL;
}

static int uring_init(struct netcore *nc)
{
	struct ustate *us = calloc(1, sizeof *us);
	if (!us)
		return -1;
	nc->tstate = us;
	us->nc = nc;
	us->listen_fd = -1;
	int rc = io_uring_queue_init(SLUICE_URING_ENTRIES, &us->ring, 0);
	if (rc < 0) {
		SLOG_ERR("net", "io_uring_queue_init: %s", strerror(-rc));
		return -1;
	}
	buffers_setup(us);
	if (nc->id > 0) {
		struct ustate *first = nc->b->net[0].tstate;
		us->listen_fd = first->listen_fd; /* one listener, shared */
		return 0;
	}
	us->listen_fd = listener_open(&nc->b->cfg);
	return us->listen_fd < 0 ? -1 : 0;
}

static void uring_fini(struct netcore *nc)
{
	struct ustate *us = nc->tstate;
	if (!us)
		return;
	if (nc->id == 0 && us->listen_fd >= 0)
		close(us->listen_fd); /* main stops every network core before any fini */
	io_uring_queue_exit(&us->ring);
	if (us->br)
		munmap(us->br, SLUICE_URING_BUFS * sizeof(struct io_uring_buf));
	free(us->bufs);
	free(us);
	nc->tstate = NULL;
}

const struct sluice_transport_ops sluice_transport_uring = {
	.name = "uring",
	.init = uring_init,
	.fini = uring_fini,
	.recv_pause = uring_recv_pause,
	.send = uring_send,
	.close = uring_close,
	.poll = uring_poll,
};
