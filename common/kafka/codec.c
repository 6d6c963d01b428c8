/* Bounds-checked Kafka primitive reader and writer (see codec.h). */
#include "common/kafka/codec.h"
#include <assert.h>
#include <stdlib.h>

static inline bool need(struct krd *r, size_t n, const char *what)
{
	if ((size_t)(r->end - r->p) < n)
		return krd_fail(r, what);
	return true;
}

int8_t krd_i8(struct krd *r)
{
	if (!need(r, 1, "int8"))
		return 0;
	return (int8_t)*r->p++;
}
int16_t krd_i16(struct krd *r)
{
	if (!need(r, 2, "int16"))
		return 0;
	int16_t v = (int16_t)kbe16(r->p);
	r->p += 2;
	return v;
}
int32_t krd_i32(struct krd *r)
{
	if (!need(r, 4, "int32"))
		return 0;
	int32_t v = (int32_t)kbe32(r->p);
	r->p += 4;
	return v;
}
int64_t krd_i64(struct krd *r)
{
	if (!need(r, 8, "int64"))
		return 0;
	int64_t v = (int64_t)kbe64(r->p);
	r->p += 8;
	return v;
}
bool krd_bool(struct krd *r) { return krd_i8(r) != 0; }

static uint64_t uvar64(struct krd *r, int max_bytes)
{
	uint64_t v = 0;
	for (int i = 0; i < max_bytes; i++) {
		if (!need(r, 1, "varint"))
			return 0;
		uint8_t b = *r->p++;
		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80))
			return v;
	}
	krd_fail(r, "varint too long");
	return 0;
}
uint32_t krd_uvarint(struct krd *r) { return (uint32_t)uvar64(r, 5); }
int32_t krd_varint(struct krd *r)
{
	uint32_t u = (uint32_t)uvar64(r, 5);
	return (int32_t)((u >> 1) ^ (~(u & 1) + 1));
}
int64_t krd_varlong(struct krd *r)
{
	uint64_t u = uvar64(r, 10);
	return (int64_t)((u >> 1) ^ (~(u & 1) + 1));
}
void krd_uuid(struct krd *r, uint8_t out[16])
{
	if (!need(r, 16, "uuid")) {
		memset(out, 0, 16);
		return;
	}
	memcpy(out, r->p, 16);
	r->p += 16;
}
void krd_skip(struct krd *r, size_t n)
{
	if (need(r, n, "skip"))
		r->p += n;
}

/* Length of a string/bytes field: -1 for null, checked against bytes left. */
static int32_t length_field(struct krd *r, bool flexible, bool wide)
{
	int64_t n;
	if (flexible)
		n = (int64_t)krd_uvarint(r) - 1;
	else
		n = wide ? krd_i32(r) : krd_i16(r);
	if (r->err)
		return -1;
	if (n < -1) {
		krd_fail(r, "negative length");
		return -1;
	}
	if (n > 0 && (size_t)n > krd_left(r)) {
		krd_fail(r, "length beyond frame");
		return -1;
	}
	return (int32_t)n;
}

struct kstr krd_string(struct krd *r, bool flexible)
{
	struct kstr s = {NULL, 0};
	int32_t n = length_field(r, flexible, false);
	if (n < 0)
		return s;
	s.ptr = (const char *)r->p;
	s.len = n;
	r->p += n;
	return s;
}

int32_t krd_bytes(struct krd *r, bool flexible, const uint8_t **ptr)
{
	*ptr = NULL;
	int32_t n = length_field(r, flexible, true);
	if (n < 0)
		return -1;
	*ptr = r->p;
	r->p += n;
	return n;
}

int32_t krd_array(struct krd *r, bool flexible, size_t elem_min_bytes)
{
	int64_t n = flexible ? (int64_t)krd_uvarint(r) - 1 : krd_i32(r);
	if (r->err)
		return -1;
	if (n < -1) {
		krd_fail(r, "negative array count");
		return -1;
	}
	if (n > 0 && (uint64_t)n * (elem_min_bytes ? elem_min_bytes : 1) > krd_left(r)) {
		krd_fail(r, "array count beyond frame");
		return -1;
	}
	return (int32_t)n;
}

void krd_tags_skip(struct krd *r)
{
	uint32_t count = krd_uvarint(r);
	if (count > SLUICE_KAFKA_TAGGED_FIELDS_MAX || count * 2u > krd_left(r)) {
		if (!r->err)
			krd_fail(r, "tagged field count");
		return;
	}
	for (uint32_t i = 0; i < count && !r->err; i++) {
		(void)krd_uvarint(r); /* tag */
		uint32_t size = krd_uvarint(r);
		krd_skip(r, size);
	}
}

void kwr_init(struct kwr *w, size_t cap_hint, size_t cap_max)
{
	w->buf = NULL;
	w->len = w->cap = 0;
	w->cap_max = cap_max;
	w->err = false;
	if (cap_hint)
		(void)kwr_reserve(w, cap_hint);
	w->len = 0;
}
void kwr_free(struct kwr *w)
{
	free(w->buf);
	w->buf = NULL;
	w->len = w->cap = 0;
}
void kwr_reset(struct kwr *w)
{
	w->len = 0;
	w->err = false;
}

uint8_t *kwr_reserve(struct kwr *w, size_t n)
{
	if (w->err)
		return NULL;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < w->len + n)
			cap *= 2;
		if (cap > w->cap_max) {
			if (w->len + n > w->cap_max) {
				w->err = true;
				return NULL;
			}
			cap = w->cap_max;
		}
		uint8_t *nb = realloc(w->buf, cap);
		if (!nb) {
			w->err = true;
			return NULL;
		}
		w->buf = nb;
		w->cap = cap;
	}
	uint8_t *p = w->buf + w->len;
	w->len += n;
	return p;
}

void kwr_raw(struct kwr *w, const void *p, size_t n)
{
	uint8_t *d = kwr_reserve(w, n);
	if (d && n)
		memcpy(d, p, n);
}
void kwr_i8(struct kwr *w, int8_t v)
{
	uint8_t *d = kwr_reserve(w, 1);
	if (d)
		*d = (uint8_t)v;
}
void kwr_i16(struct kwr *w, int16_t v)
{
	uint8_t *d = kwr_reserve(w, 2);
	if (d) {
		d[0] = (uint8_t)((uint16_t)v >> 8);
		d[1] = (uint8_t)v;
	}
}
void kwr_i32(struct kwr *w, int32_t v)
{
	uint8_t *d = kwr_reserve(w, 4);
	if (d)
		kput32(d, (uint32_t)v);
}
void kwr_i64(struct kwr *w, int64_t v)
{
	uint8_t *d = kwr_reserve(w, 8);
	if (d)
		kput64(d, (uint64_t)v);
}
void kwr_bool(struct kwr *w, bool v) { kwr_i8(w, v ? 1 : 0); }
static void uvar64_put(struct kwr *w, uint64_t v)
{
	uint8_t tmp[10];
	int n = 0;
	while (v >= 0x80) {
		tmp[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (uint8_t)v;
	kwr_raw(w, tmp, (size_t)n);
}
void kwr_uvarint(struct kwr *w, uint32_t v) { uvar64_put(w, v); }
void kwr_varint(struct kwr *w, int32_t v) { uvar64_put(w, (uint32_t)((uint32_t)v << 1) ^ (uint32_t)(v >> 31)); }
void kwr_varlong(struct kwr *w, int64_t v) { uvar64_put(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }
void kwr_uuid(struct kwr *w, const uint8_t u[16]) { kwr_raw(w, u, 16); }

void kwr_string(struct kwr *w, bool flexible, const char *s, int32_t len)
{
	assert(len >= 0 || !s);
	if (!s) {
		if (flexible)
			kwr_uvarint(w, 0);
		else
			kwr_i16(w, -1);
		return;
	}
	if (flexible)
		kwr_uvarint(w, (uint32_t)len + 1);
	else
		kwr_i16(w, (int16_t)len);
	kwr_raw(w, s, (size_t)len);
}
void kwr_cstr(struct kwr *w, bool flexible, const char *s)
{
	kwr_string(w, flexible, s, s ? (int32_t)strlen(s) : -1);
}
void kwr_bytes(struct kwr *w, bool flexible, const void *p, int32_t len)
{
	if (!p) {
		if (flexible)
			kwr_uvarint(w, 0);
		else
			kwr_i32(w, -1);
		return;
	}
	if (flexible)
		kwr_uvarint(w, (uint32_t)len + 1);
	else
		kwr_i32(w, len);
	kwr_raw(w, p, (size_t)len);
}
void kwr_array(struct kwr *w, bool flexible, int32_t count)
{
	if (flexible)
		kwr_uvarint(w, (uint32_t)(count + 1));
	else
		kwr_i32(w, count);
}
void kwr_tags_empty(struct kwr *w) { kwr_uvarint(w, 0); }
void kwr_patch_i32(struct kwr *w, size_t pos, int32_t v)
{
	if (w->err)
		return;
	assert(pos + 4 <= w->len);
	kput32(w->buf + pos, (uint32_t)v);
}
