/* The Prometheus text exposition format (version 0.0.4), written into a
 * growable buffer: a metric family's # HELP and # TYPE lines, samples with
 * escaped label values, and histograms from per-bucket counts (written
 * cumulative, with the +Inf bucket, _sum and _count that agree). It knows
 * nothing of what it measures: the broker's and the controller's admin
 * listeners both describe their metrics through it. The buffer is bounded
 * (cap_max); a write past it, or out of memory, latches err and the rest is
 * dropped, so a caller checks once at the end. */
#ifndef SLUICE_PROM_H
#define SLUICE_PROM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define SLUICE_PROM_LABELS_MAX 8       /* labels of one sample, le included */
#define SLUICE_PROM_BUCKETS_MAX 32     /* finite buckets of one histogram */
#define SLUICE_PROM_BYTES_MIN 4096     /* first allocation */

struct sluice_prom {
	char *buf;
	size_t len, cap;
	size_t cap_max; /* the most the text may take */
	bool err;       /* over cap_max or out of memory: the text is incomplete */
};

struct sluice_prom_label {
	const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, asserted */
	const char *value; /* any UTF-8, escaped as the format wants */
};

void sluice_prom_init(struct sluice_prom *w, size_t cap_max);
void sluice_prom_free(struct sluice_prom *w);

struct sluice_http_answer;
/* A finished text as the admin listener's GET /metrics answer: 200 with the
 * exposition's content type, the buffer handed to the answer; or, when it
 * did not fit its bound (or memory ran out), 500, said once in the log, and
 * the buffer freed. Shared by the broker's and the controller's listeners. */
void sluice_prom_http_answer(struct sluice_prom *w, struct sluice_http_answer *a);
/* The family's header: type is counter, gauge, histogram (or untyped);
 * help is escaped (backslash, newline). */
void sluice_prom_family(struct sluice_prom *w, const char *name, const char *type, const char *help);
/* One sample name{labels} value: an integer, or a float (NaN, +Inf and
 * -Inf as the format spells them). */
void sluice_prom_u64(struct sluice_prom *w, const char *name, const struct sluice_prom_label *labels, size_t n,
		     uint64_t value);
void sluice_prom_f64(struct sluice_prom *w, const char *name, const struct sluice_prom_label *labels, size_t n,
		     double value);
/* A histogram's samples: counts[i] observations fell at or below bounds[i]
 * and above bounds[i - 1] (bounds ascending, nb of them), counts[nb] above
 * the last; written as cumulative name_bucket{...,le=".."} lines, the +Inf
 * one, name_sum (sum) and name_count (the +Inf bucket's count). */
void sluice_prom_histogram(struct sluice_prom *w, const char *name, const struct sluice_prom_label *labels, size_t n,
			   const double *bounds, const uint64_t *counts, size_t nb, double sum);
/* Label-value escaping alone (for tests): value into out (NUL-terminated);
 * returns the escaped length, or -1 when out is too small. */
int sluice_prom_escape(const char *value, char *out, size_t outlen);

#endif
