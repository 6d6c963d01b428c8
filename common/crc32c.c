/* CRC-32C for record batches: hardware path via SSE4.2 when present, table
 * path otherwise. Both give identical results (checked in tests/unit). */
#include "common/crc32c.h"
#include <nmmintrin.h>
#include <string.h>

static uint32_t crc_table[256];
static int table_ready;

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
	__atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

uint32_t sluice_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
	if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE))
		crc_table_init();
	const uint8_t *p = data;
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

__attribute__((target("sse4.2")))
uint32_t sluice_crc32c_hw(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t c = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

bool sluice_crc32c_hw_available(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("sse4.2");
}

uint32_t sluice_crc32c(uint32_t crc, const void *data, size_t len)
{
	static int mode; /* 0 unknown, 1 hw, 2 sw */
	int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
	if (m == 0) {
		m = sluice_crc32c_hw_available() ? 1 : 2;
		__atomic_store_n(&mode, m, __ATOMIC_RELAXED);
	}
	return m == 1 ? sluice_crc32c_hw(crc, data, len) : sluice_crc32c_sw(crc, data, len);
}
