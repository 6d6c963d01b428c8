/* The Prometheus text exposition format 0.0.4 (prom.h): the writer behind
 * every /metrics answer. Names come from code and are asserted well-formed;
 * label values and help texts come from the world (topic names, errors)
 * and are escaped: in a label value backslash, double quote and newline,
 * in help text backslash and newline, as the format says. */
#include "common/prom.h"
#include "common/http.h"
#include "common/log.h"
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sluice_prom_init(struct sluice_prom *w, size_t cap_max)
{
	assert(cap_max >= SLUICE_PROM_BYTES_MIN);
	memset(w, 0, sizeof *w);
	w->cap_max = cap_max;
}

void sluice_prom_free(struct sluice_prom *w)
{
	free(w->buf);
	w->buf = NULL;
	w->len = w->cap = 0;
}

/* Room for n more bytes and a NUL; false (err latched) past cap_max. */
static bool reserve(struct sluice_prom *w, size_t n)
{
	if (w->err)
		return false;
	if (w->len + n + 1 <= w->cap)
		return true;
	if (w->len + n + 1 > w->cap_max) {
		w->err = true;
		return false;
	}
	size_t cap = w->cap ? w->cap : SLUICE_PROM_BYTES_MIN;
	while (cap < w->len + n + 1)
		cap *= 2;
	if (cap > w->cap_max)
		cap = w->cap_max;
	char *nb = realloc(w->buf, cap);
	if (!nb) {
		w->err = true;
		return false;
	}
	w->buf = nb;
	w->cap = cap;
	return true;
}

static void put(struct sluice_prom *w, const char *s, size_t n)
{
	if (!reserve(w, n))
		return;
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = '\0';
}

static void puts_(struct sluice_prom *w, const char *s) { put(w, s, strlen(s)); }

static void putf(struct sluice_prom *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct sluice_prom *w, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	assert(n >= 0 && (size_t)n < sizeof tmp); /* numbers only */
	put(w, tmp, (size_t)n);
}

static bool name_valid(const char *s, bool colon)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      (colon && *s == ':')))
			return false;
	return true;
}

/* text with backslash and newline escaped, and double quote when quoted. */
static void put_escaped(struct sluice_prom *w, const char *s, bool quoted)
{
	const char *run = s;
	for (; *s; s++) {
		const char *esc = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : quoted && *s == '"' ? "\\\"" : NULL;
		if (!esc)
			continue;
		put(w, run, (size_t)(s - run));
		puts_(w, esc);
		run = s + 1;
	}
	put(w, run, (size_t)(s - run));
}

int sluice_prom_escape(const char *value, char *out, size_t outlen)
{
	struct sluice_prom w;
	sluice_prom_init(&w, outlen > SLUICE_PROM_BYTES_MIN ? outlen : SLUICE_PROM_BYTES_MIN);
	put_escaped(&w, value, true);
	int rc = -1;
	if (!w.err && w.len < outlen) {
		memcpy(out, w.buf ? w.buf : "", w.len + 1);
		rc = (int)w.len;
	}
	sluice_prom_free(&w);
	return rc;
}

void sluice_prom_family(struct sluice_prom *w, const char *name, const char *type, const char *help)
{
	assert(name_valid(name, true));
	assert(!strcmp(type, "counter") || !strcmp(type, "gauge") || !strcmp(type, "histogram") ||
	       !strcmp(type, "untyped"));
	puts_(w, "# HELP ");
	puts_(w, name);
	puts_(w, " ");
	put_escaped(w, help, false);
	puts_(w, "\n# TYPE ");
	puts_(w, name);
	puts_(w, " ");
	puts_(w, type);
	puts_(w, "\n");
}

/* name{a="x",b="y"} with the space before the value. */
static void sample_head(struct sluice_prom *w, const char *name, const char *suffix,
			const struct sluice_prom_label *labels, size_t n)
{
	assert(name_valid(name, true) && n <= SLUICE_PROM_LABELS_MAX);
	puts_(w, name);
	puts_(w, suffix);
	for (size_t i = 0; i < n; i++) {
		assert(name_valid(labels[i].name, false) && labels[i].value);
		puts_(w, i ? "," : "{");
		puts_(w, labels[i].name);
		puts_(w, "=\"");
		put_escaped(w, labels[i].value, true);
		puts_(w, "\"");
	}
	puts_(w, n ? "} " : " ");
}

/* v in the fewest digits (of 15 to 17) that read back as v: 0.00025, not
 * 0.00025000000000000001. */
static void format_f64(double v, char *out, size_t len)
{
	assert(len >= 32);
	if (isnan(v)) {
		snprintf(out, len, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(out, len, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(out, len, "%.*g", prec, v);
		if (strtod(out, NULL) == v)
			return;
	}
}

static void put_f64(struct sluice_prom *w, double v)
{
	char tmp[32];
	format_f64(v, tmp, sizeof tmp);
	puts_(w, tmp);
}

void sluice_prom_u64(struct sluice_prom *w, const char *name, const struct sluice_prom_label *labels, size_t n,
		     uint64_t value)
{
	sample_head(w, name, "", labels, n);
	putf(w, "%llu\n", (unsigned long long)value);
}

void sluice_prom_f64(struct sluice_prom *w, const char *name, const struct sluice_prom_label *labels, size_t n,
		     double value)
{
	sample_head(w, name, "", labels, n);
	put_f64(w, value);
	puts_(w, "\n");
}

void sluice_prom_histogram(struct sluice_prom *w, const char *name, const struct sluice_prom_label *labels, size_t n,
			   const double *bounds, const uint64_t *counts, size_t nb, double sum)
{
	assert(n < SLUICE_PROM_LABELS_MAX && nb <= SLUICE_PROM_BUCKETS_MAX);
	struct sluice_prom_label l[SLUICE_PROM_LABELS_MAX];
	if (n)
		memcpy(l, labels, n * sizeof *l);
	char le[32];
	l[n].name = "le";
	l[n].value = le;
	uint64_t total = 0;
	for (size_t i = 0; i <= nb; i++) {
		assert(i == 0 || i == nb || bounds[i] > bounds[i - 1]);
		total += counts[i];
		format_f64(i < nb ? bounds[i] : INFINITY, le, sizeof le);
		sample_head(w, name, "_bucket", l, n + 1);
		putf(w, "%llu\n", (unsigned long long)total);
	}
	sample_head(w, name, "_sum", labels, n);
	put_f64(w, sum);
	puts_(w, "\n");
	sample_head(w, name, "_count", labels, n);
	putf(w, "%llu\n", (unsigned long long)total);
}

void sluice_prom_http_answer(struct sluice_prom *w, struct sluice_http_answer *a)
{
	if (w->err) {
		SLOG_WARN("admin", "GET /metrics: the text does not fit %zu bytes (or out of memory)", w->cap_max);
		sluice_prom_free(w);
		a->status = 500;
		return;
	}
	a->status = 200;
	a->content_type = SLUICE_PROM_CONTENT_TYPE;
	a->body = w->buf; /* the server's now */
	a->len = w->len;
}
