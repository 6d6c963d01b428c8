/*
 * alloc-count: an LD_PRELOAD library that counts the heap allocation calls of a process
 * (malloc, calloc, realloc, posix_memalign, aligned_alloc, and free) per thread class, so
 * that perf/run-all.sh can report how many allocations the broker makes per produce and
 * per fetch request in steady state (issue 11: the target is zero).
 *
 * Thread classes go by the thread's name: "sluice-net*" (network cores), "sluice-store*"
 * (storage cores), everything else "other". A thread's class is read once from its name
 * (prctl PR_GET_NAME) and again whenever it names itself through pthread_setname_np,
 * which this library also interposes, so a core thread that allocates before naming
 * itself is counted as "other" until it does.
 *
 * Each call is forwarded to the next definition (dlsym RTLD_NEXT): for the broker, which
 * links jemalloc, that is jemalloc's malloc, so the allocator under test is unchanged.
 * The preloaded library comes first in the symbol search order, before libjemalloc, so
 * it sees every call made through the ordinary names; calls to jemalloc's own API
 * (mallocx, sdallocx) would not be seen, and the broker makes none. The unit test
 * alloc-count-test checks the interposition on a jemalloc-linked program with known
 * counts.
 *
 * Counts are dumped, appended to $SLUICE_ALLOC_COUNT_FILE (default
 * /tmp/alloc-count.<pid>), on the signal $SLUICE_ALLOC_COUNT_SIGNAL (a number, default
 * SIGUSR2) and at exit. One dump is a header line and a line per class:
 *
 *   dump SEQ MONOTONIC_NS REASON
 *   CLASS malloc calloc realloc posix_memalign aligned_alloc free
 *
 * The counters are cumulative since the process started; a reader subtracts two dumps.
 * The signal handler uses only async-signal-safe calls (clock_gettime, open, write).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

enum ac_class { AC_OTHER, AC_NET, AC_STORE, AC_CLASSES };
enum ac_fn { AC_MALLOC, AC_CALLOC, AC_REALLOC, AC_MEMALIGN, AC_ALIGNED, AC_FREE, AC_FNS };

static const char *const ac_class_name[AC_CLASSES] = {"other", "net", "store"};

static _Atomic uint64_t ac_count[AC_CLASSES][AC_FNS];
static _Atomic uint64_t ac_seq;
static char ac_path[256];

/* 0 = not yet known; otherwise class + 1. Initial-exec TLS: a preloaded library's TLS is
 * static, and the dynamic model could call malloc on first touch. */
static __thread int ac_thread_class __attribute__((tls_model("initial-exec")));

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void (*real_free)(void *);
static int (*real_setname)(pthread_t, const char *);

/* dlsym may allocate (calloc) before the real functions are known: those few calls are
 * served from this arena and never freed. */
static _Alignas(64) char ac_boot[16384];
static size_t ac_boot_used;
static int ac_resolving;

static int ac_in_boot(const void *p)
{
	return (const char *)p >= ac_boot && (const char *)p < ac_boot + sizeof ac_boot;
}

static void *ac_boot_alloc(size_t n)
{
	size_t at = (ac_boot_used + 63) & ~(size_t)63;
	if (at + n > sizeof ac_boot)
		abort(); /* dlsym wanted more than 16 KiB: a bug of this library */
	ac_boot_used = at + n;
	return ac_boot + at;
}

static enum ac_class ac_class_of_name(const char *name)
{
	if (strncmp(name, "sluice-net", 10) == 0)
		return AC_NET;
	if (strncmp(name, "sluice-store", 12) == 0)
		return AC_STORE;
	return AC_OTHER;
}

static void ac_count_call(enum ac_fn fn)
{
	if (ac_thread_class == 0) {
		char name[16] = {0};
		prctl(PR_GET_NAME, name, 0, 0, 0);
		ac_thread_class = (int)ac_class_of_name(name) + 1;
	}
	atomic_fetch_add_explicit(&ac_count[ac_thread_class - 1][fn], 1, memory_order_relaxed);
}

static void ac_resolve(void)
{
	ac_resolving = 1;
	real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
	real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
	real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
	real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
	real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	real_setname = (int (*)(pthread_t, const char *))dlsym(RTLD_NEXT, "pthread_setname_np");
	ac_resolving = 0;
	if (!real_malloc || !real_calloc || !real_realloc || !real_free)
		abort();
}

void *malloc(size_t n)
{
	if (!real_malloc) {
		if (ac_resolving)
			return ac_boot_alloc(n);
		ac_resolve();
	}
	ac_count_call(AC_MALLOC);
	return real_malloc(n);
}

void *calloc(size_t k, size_t n)
{
	if (!real_calloc) {
		if (ac_resolving)
			return ac_boot_alloc(k * n); /* the arena is zeroed and never reused */
		ac_resolve();
	}
	ac_count_call(AC_CALLOC);
	return real_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
	if (!real_realloc)
		ac_resolve();
	ac_count_call(AC_REALLOC);
	if (ac_in_boot(p)) {
		void *q = real_malloc(n);
		if (q)
			memcpy(q, p, n < sizeof ac_boot ? n : sizeof ac_boot);
		return q;
	}
	return real_realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (!real_posix_memalign)
		ac_resolve();
	ac_count_call(AC_MEMALIGN);
	return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	if (!real_aligned_alloc)
		ac_resolve();
	ac_count_call(AC_ALIGNED);
	return real_aligned_alloc(align, n);
}

void free(void *p)
{
	if (p == NULL || ac_in_boot(p))
		return;
	if (!real_free)
		ac_resolve();
	ac_count_call(AC_FREE);
	real_free(p);
}

int pthread_setname_np(pthread_t t, const char *name)
{
	if (!real_setname)
		ac_resolve();
	int rc = real_setname(t, name);
	if (rc == 0 && pthread_equal(t, pthread_self()))
		ac_thread_class = (int)ac_class_of_name(name) + 1;
	return rc;
}

/* Async-signal-safe formatting: appends v in decimal to buf at *at. */
static void ac_put_u64(char *buf, size_t *at, uint64_t v)
{
	char tmp[24];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		buf[(*at)++] = tmp[--n];
}

static void ac_put_str(char *buf, size_t *at, const char *s)
{
	while (*s)
		buf[(*at)++] = *s++;
}

/* A dump: the header (3 numbers of at most 20 digits and a word) and per class its name
 * and AC_FNS numbers of at most 20 digits, each with a separator. */
enum { AC_DUMP_MAX = 1024 };
_Static_assert(64 + AC_CLASSES * (16 + AC_FNS * 21 + 1) <= AC_DUMP_MAX,
	       "a dump must fit its buffer");

static void ac_dump(const char *reason)
{
	char buf[AC_DUMP_MAX];
	size_t at = 0;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ac_put_str(buf, &at, "dump ");
	ac_put_u64(buf, &at, atomic_fetch_add(&ac_seq, 1));
	ac_put_str(buf, &at, " ");
	ac_put_u64(buf, &at, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
	ac_put_str(buf, &at, " ");
	ac_put_str(buf, &at, reason);
	ac_put_str(buf, &at, "\n");
	for (int c = 0; c < AC_CLASSES; c++) {
		ac_put_str(buf, &at, ac_class_name[c]);
		for (int f = 0; f < AC_FNS; f++) {
			ac_put_str(buf, &at, " ");
			ac_put_u64(buf, &at, atomic_load_explicit(&ac_count[c][f], memory_order_relaxed));
		}
		ac_put_str(buf, &at, "\n");
	}
	int fd = open(ac_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	ssize_t w = write(fd, buf, at); /* one write: a dump is never interleaved */
	(void)w;
	close(fd);
}

static void ac_on_signal(int sig)
{
	(void)sig;
	int saved = errno;
	ac_dump("signal");
	errno = saved;
}

__attribute__((constructor)) static void ac_start(void)
{
	if (!real_malloc)
		ac_resolve();
	const char *path = getenv("SLUICE_ALLOC_COUNT_FILE");
	if (path && strlen(path) < sizeof ac_path) {
		strcpy(ac_path, path);
	} else {
		size_t at = 0;
		ac_put_str(ac_path, &at, "/tmp/alloc-count.");
		ac_put_u64(ac_path, &at, (uint64_t)getpid());
		ac_path[at] = 0;
	}
	const char *sig = getenv("SLUICE_ALLOC_COUNT_SIGNAL");
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = ac_on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(sig ? atoi(sig) : SIGUSR2, &sa, NULL);
}

__attribute__((destructor)) static void ac_stop(void)
{
	ac_dump("exit");
}
