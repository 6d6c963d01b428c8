/* Logging with levels that change while the broker runs. Lines go to
 * stderr with a timestamp, level and area, one write per line. Each area
 * (the word after the level: "net", "storage", ...) is a named logger whose
 * level is its own or, unset, the root logger's; Kafka's broker-loggers
 * resource (DescribeConfigs / IncrementalAlterConfigs, resource type 8: what
 * kafka-configs.sh --entity-type broker-loggers sends) lists and sets them. */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H
#include <stdarg.h>
#include <stdbool.h>

enum sluice_log_level { SLUICE_LOG_ERROR = 0, SLUICE_LOG_WARN, SLUICE_LOG_INFO, SLUICE_LOG_DEBUG, SLUICE_LOG_TRACE };

/* The highest level any logger has (a fast test before the area's own):
 * read on every SLOG, written only by the setters. */
extern int sluice_log_level_current;
/* Sets the root logger's level (clamped to ERROR..TRACE). */
void sluice_log_set_level(int level);
/* The named loggers: root first, then one per area, in name order. */
#define SLUICE_LOG_INHERIT (-1) /* a logger with no level of its own: the root's */
#define SLUICE_LOG_LOGGERS_MAX 32 /* loggers at most (callers size tables by it) */
int sluice_log_logger_count(void);
const char *sluice_log_logger_name(int i);
/* The index of the logger called name, or -1. */
int sluice_log_logger_find(const char *name);
/* Its level in effect (its own or the root's), and whether it has its own. */
int sluice_log_logger_level(int i);
bool sluice_log_logger_own(int i);
/* Set logger i's level (SLUICE_LOG_ERROR..TRACE) or, SLUICE_LOG_INHERIT,
 * give it the root's again; 0, or -1 for the root and INHERIT (the root
 * logger always has a level, as in Kafka). */
int sluice_log_logger_set(int i, int level);
const char *sluice_log_level_name(int level);
/* Returns -1 for a name that is not a level. */
int sluice_log_level_parse(const char *name);
void sluice_log_write(int level, const char *area, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define SLOG(level, area, ...) do { \
	if ((level) <= __atomic_load_n(&sluice_log_level_current, __ATOMIC_RELAXED)) \
		sluice_log_write((level), (area), __VA_ARGS__); } while (0)
#define SLOG_ERR(area, ...) SLOG(SLUICE_LOG_ERROR, area, __VA_ARGS__)
#define SLOG_WARN(area, ...) SLOG(SLUICE_LOG_WARN, area, __VA_ARGS__)
#define SLOG_INFO(area, ...) SLOG(SLUICE_LOG_INFO, area, __VA_ARGS__)
#define SLOG_DEBUG(area, ...) SLOG(SLUICE_LOG_DEBUG, area, __VA_ARGS__)

#endif
