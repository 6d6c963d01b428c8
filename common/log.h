/* Logging with a level that can change while the broker runs (Kafka's
 * broker-loggers resource and the CLI will set it later). Lines go to stderr
 * with a timestamp, level and subsystem, one write per line. */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H
#include <stdarg.h>

enum sluice_log_level { SLUICE_LOG_ERROR = 0, SLUICE_LOG_WARN, SLUICE_LOG_INFO, SLUICE_LOG_DEBUG, SLUICE_LOG_TRACE };

extern int sluice_log_level_current;

void sluice_log_set_level(int level);
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
