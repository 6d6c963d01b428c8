/* Kafka wire primitives: a bounds-checked reader and a growable writer for
 * the protocol's integers, varints, (compact) (nullable) strings and arrays,
 * UUIDs and tagged fields. The reader never trusts a length from the wire:
 * every string, byte and array length is checked against the bytes left before
 * use, and an array count is capped by the bytes left divided by the smallest
 * possible element size, so no allocation is ever sized by an attacker.
 * A failed read latches rd->err and returns zeros; callers check once at the
 * end of a structure. Knows nothing of sockets or storage. */
#ifndef SLUICE_KAFKA_CODEC_H
#define SLUICE_KAFKA_CODEC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SLUICE_KAFKA_TAGGED_FIELDS_MAX 64

struct kstr {
	const char *ptr; /* NULL for a null string */
	int32_t len;
};

struct krd {
	const uint8_t *base, *p, *end;
	bool err;
	const char *err_what; /* first failure, for the log line */
};

struct kwr {
	uint8_t *buf;
	size_t len, cap;
	size_t cap_max;
	bool err; /* allocation failure or over cap_max */
};

static inline void krd_init(struct krd *r, const void *buf, size_t len)
{
	r->base = r->p = buf;
	r->end = r->p + len;
	r->err = false;
	r->err_what = NULL;
}
static inline size_t krd_left(const struct krd *r) { return (size_t)(r->end - r->p); }
static inline size_t krd_offset(const struct krd *r) { return (size_t)(r->p - r->base); }

static inline bool krd_fail(struct krd *r, const char *what)
{
	if (!r->err) {
		r->err = true;
		r->err_what = what;
	}
	r->p = r->end;
	return false;
}

int8_t krd_i8(struct krd *r);
int16_t krd_i16(struct krd *r);
int32_t krd_i32(struct krd *r);
int64_t krd_i64(struct krd *r);
uint32_t krd_uvarint(struct krd *r);
int32_t krd_varint(struct krd *r);
int64_t krd_varlong(struct krd *r);
void krd_uuid(struct krd *r, uint8_t out[16]);
bool krd_bool(struct krd *r);
/* String: flexible selects the compact form. A null is returned as ptr NULL. */
struct kstr krd_string(struct krd *r, bool flexible);
/* Bytes / records: returns length (or -1 for null) and sets *ptr. */
int32_t krd_bytes(struct krd *r, bool flexible, const uint8_t **ptr);
/* Array count; -1 means null. Fails when count * elem_min_bytes > bytes left. */
int32_t krd_array(struct krd *r, bool flexible, size_t elem_min_bytes);
/* Skip the tagged-field section of a flexible structure. */
void krd_tags_skip(struct krd *r);
void krd_skip(struct krd *r, size_t n);

void kwr_init(struct kwr *w, size_t cap_hint, size_t cap_max);
void kwr_free(struct kwr *w);
void kwr_reset(struct kwr *w);
uint8_t *kwr_reserve(struct kwr *w, size_t n); /* NULL on failure (w->err set) */
void kwr_raw(struct kwr *w, const void *p, size_t n);
void kwr_i8(struct kwr *w, int8_t v);
void kwr_i16(struct kwr *w, int16_t v);
void kwr_i32(struct kwr *w, int32_t v);
void kwr_i64(struct kwr *w, int64_t v);
void kwr_uvarint(struct kwr *w, uint32_t v);
void kwr_varint(struct kwr *w, int32_t v);
void kwr_varlong(struct kwr *w, int64_t v);
void kwr_bool(struct kwr *w, bool v);
void kwr_uuid(struct kwr *w, const uint8_t u[16]);
void kwr_string(struct kwr *w, bool flexible, const char *s, int32_t len); /* s NULL = null */
void kwr_cstr(struct kwr *w, bool flexible, const char *s);                /* NUL-terminated or NULL */
void kwr_bytes(struct kwr *w, bool flexible, const void *p, int32_t len);  /* p NULL = null */
void kwr_array(struct kwr *w, bool flexible, int32_t count);               /* -1 = null */
void kwr_tags_empty(struct kwr *w);
/* Patch a big-endian int32 at a position written earlier. */
void kwr_patch_i32(struct kwr *w, size_t pos, int32_t v);

static inline uint16_t kbe16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t kbe32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t kbe64(const uint8_t *p) { return (uint64_t)kbe32(p) << 32 | kbe32(p + 4); }
static inline void kput32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void kput64(uint8_t *p, uint64_t v) { kput32(p, (uint32_t)(v >> 32)); kput32(p + 4, (uint32_t)v); }
static inline bool kstr_eq(struct kstr s, const char *c)
{
	return s.ptr && (size_t)s.len == strlen(c) && memcmp(s.ptr, c, (size_t)s.len) == 0;
}

#endif
