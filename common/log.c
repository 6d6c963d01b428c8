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

/* The loggers: root, then every area a SLOG names (a line of an area not
 * listed here follows the root). Levels are written by whichever thread
 * handles the request that sets them and read by every core: relaxed
 * atomics, as the single level was. */
static const char *const logger_names[] = {"root",    "admin", "broker", "config", "controller", "ctl", "group",
					   "meta",    "net",   "proto",  "quorum", "replication", "storage"};
#define LOGGERS ((int)(sizeof logger_names / sizeof *logger_names))
static int logger_levels[LOGGERS] = {SLUICE_LOG_INFO, SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT,
				     SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT,
				     SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT, SLUICE_LOG_INHERIT,
				     SLUICE_LOG_INHERIT};
_Static_assert(sizeof logger_levels / sizeof *logger_levels == sizeof logger_names / sizeof *logger_names,
	       "a level per logger");
_Static_assert(LOGGERS <= SLUICE_LOG_LOGGERS_MAX, "within the callers' tables");

const char *sluice_log_level_name(int level)
{
	return level >= SLUICE_LOG_ERROR && level <= SLUICE_LOG_TRACE ? level_names[level] : "?";
}

int sluice_log_logger_count(void) { return LOGGERS; }

const char *sluice_log_logger_name(int i)
{
	return i >= 0 && i < LOGGERS ? logger_names[i] : NULL;
}

int sluice_log_logger_find(const char *name)
{
	for (int i = 0; i < LOGGERS; i++)
		if (strcmp(name, logger_names[i]) == 0)
			return i;
	return -1;
}

int sluice_log_logger_level(int i)
{
	if (i < 0 || i >= LOGGERS)
		i = 0;
	int own = __atomic_load_n(&logger_levels[i], __ATOMIC_RELAXED);
	return own == SLUICE_LOG_INHERIT ? __atomic_load_n(&logger_levels[0], __ATOMIC_RELAXED) : own;
}

bool sluice_log_logger_own(int i)
{
	return i == 0 || (i > 0 && i < LOGGERS && __atomic_load_n(&logger_levels[i], __ATOMIC_RELAXED) != SLUICE_LOG_INHERIT);
}

/* The fast test's level: the highest in effect. */
static void levels_changed(void)
{
	int max = SLUICE_LOG_ERROR;
	for (int i = 0; i < LOGGERS; i++) {
		int l = sluice_log_logger_level(i);
		max = l > max ? l : max;
	}
	__atomic_store_n(&sluice_log_level_current, max, __ATOMIC_RELAXED);
}

int sluice_log_logger_set(int i, int level)
{
	if (i < 0 || i >= LOGGERS || (i == 0 && level == SLUICE_LOG_INHERIT) ||
	    (level != SLUICE_LOG_INHERIT && (level < SLUICE_LOG_ERROR || level > SLUICE_LOG_TRACE)))
		return -1;
	__atomic_store_n(&logger_levels[i], level, __ATOMIC_RELAXED);
	levels_changed();
	return 0;
}

void sluice_log_set_level(int level)
{
	if (level < SLUICE_LOG_ERROR)
		level = SLUICE_LOG_ERROR;
	if (level > SLUICE_LOG_TRACE)
		level = SLUICE_LOG_TRACE;
	(void)sluice_log_logger_set(0, level);
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
	/* SLOG let it through on the highest level of all; the area's own
	 * (or the root's, for an area without a logger) decides. */
	int i = sluice_log_logger_find(area);
	if (level > sluice_log_logger_level(i < 0 ? 0 : i))
		return;
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
