/* Implementation of the runtime-adjustable logger: format into a stack
 * buffer and emit with a single write(2) so lines from cores never interleave. */
#include "common/log.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int sluice_log_level_current = SLUICE_LOG_INFO;
static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

void sluice_log_set_level(int level)
{
	if (level < SLUICE_LOG_ERROR)
		level = SLUICE_LOG_ERROR;
	if (level > SLUICE_LOG_TRACE)
		level = SLUICE_LOG_TRACE;
	__atomic_store_n(&sluice_log_level_current, level, __ATOMIC_RELAXED);
}

int sluice_log_level_parse(const char *name)
{
	for (int i = 0; i <= SLUICE_LOG_TRACE; i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return i;
	if (strcasecmp(name, "WARNING") == 0)
		return SLUICE_LOG_WARN;
	return -1;
}

void sluice_log_write(int level, const char *area, const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof line, "[%04d-%02d-%02d %02d:%02d:%02d.%03ld] %-5s %s: ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], area);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof line)
		n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof line - 1)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}
