/*
 * alloc-count-test: checks that perf/alloc-count.so, preloaded into a program linked with
 * jemalloc as the broker is, sees every allocation call and files it under the right
 * thread class. A thread named sluice-net-test makes a known number of each call, the
 * program dumps with the signal, and the test reads the dump back and compares the "net"
 * line with what it made. Run by meson with LD_PRELOAD set (suite unit); run without the
 * library it fails, which is how a broken interposition shows.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MALLOCS = 1000, CALLOCS = 100, REALLOCS = 50, MEMALIGNS = 10, ALIGNED = 10 };

static void *worker(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sluice-net-test");
	static void *p[MALLOCS];
	for (int i = 0; i < MALLOCS; i++)
		p[i] = malloc(64 + (size_t)i);
	for (int i = 0; i < CALLOCS; i++)
		free(calloc(4, 32));
	for (int i = 0; i < REALLOCS; i++)
		p[i] = realloc(p[i], 4096);
	for (int i = 0; i < MEMALIGNS; i++) {
		void *q = NULL;
		if (posix_memalign(&q, 4096, 8192) == 0)
			free(q);
	}
	for (int i = 0; i < ALIGNED; i++)
		free(aligned_alloc(64, 128));
	for (int i = 0; i < MALLOCS; i++)
		free(p[i]);
	return NULL;
}

int main(void)
{
	char path[64];
	const char *env = getenv("SLUICE_ALLOC_COUNT_FILE");
	if (env)
		snprintf(path, sizeof path, "%s", env);
	else /* the library's default */
		snprintf(path, sizeof path, "/tmp/alloc-count.%d", (int)getpid());
	unlink(path);
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 2;
	pthread_join(t, NULL);
	struct sigaction old;
	if (sigaction(SIGUSR2, NULL, &old) != 0 || old.sa_handler == SIG_DFL) {
		fprintf(stderr, "SIGUSR2 has no handler: alloc-count is not preloaded\n");
		return 1;
	}
	raise(SIGUSR2);

	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "no dump at %s: is alloc-count preloaded?\n", path);
		return 1;
	}
	char line[512];
	unsigned long long m = 0, c = 0, r = 0, pm = 0, aa = 0, fr = 0;
	int found = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "net %llu %llu %llu %llu %llu %llu", &m, &c, &r, &pm, &aa, &fr) == 6)
			found = 1;
	fclose(f);
	unlink(path);
	printf("net: malloc %llu calloc %llu realloc %llu posix_memalign %llu aligned_alloc %llu "
	       "free %llu\n", m, c, r, pm, aa, fr);
	/* The thread's own stack and TLS are allocated by pthread_create in the parent, not
	 * by the thread: the counts are exact. */
	int ok = found && m == MALLOCS && c == CALLOCS && r == REALLOCS && pm == MEMALIGNS &&
		 aa == ALIGNED && fr == MALLOCS + CALLOCS + MEMALIGNS + ALIGNED;
	if (!ok)
		fprintf(stderr, "expected malloc %d calloc %d realloc %d posix_memalign %d "
			"aligned_alloc %d free %d\n", MALLOCS, CALLOCS, REALLOCS, MEMALIGNS, ALIGNED,
			MALLOCS + CALLOCS + MEMALIGNS + ALIGNED);
	return ok ? 0 : 1;
}
