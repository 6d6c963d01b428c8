/* CRC-32C unit tests. They prove that the checksum Sluice puts on and checks
 * against record batches is the Castagnoli CRC that Kafka clients compute: the
 * published check value and the RFC 3720 (iSCSI) test vectors come out right
 * through every entry point, the SSE4.2 path and the table path agree on
 * random buffers of every length up to a few kilobytes at every alignment, and
 * a CRC continued over pieces equals the CRC of the whole. */
#include "common/crc32c.h"
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

/* A deterministic generator so that a failure can be reproduced exactly. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return x;
}
static void rng_fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rng_next();
}

/* Check one vector through the dispatching, software and (when the CPU has
 * it) hardware functions. */
static void check_vector(const void *data, size_t len, uint32_t want)
{
	cr_expect_eq(sluice_crc32c(0, data, len), want, "dispatch: len %zu", len);
	cr_expect_eq(sluice_crc32c_sw(0, data, len), want, "sw: len %zu", len);
	if (sluice_crc32c_hw_available())
		cr_expect_eq(sluice_crc32c_hw(0, data, len), want, "hw: len %zu", len);
}

/* Proves the standard CRC-32C check value: "123456789" -> 0xE3069283. */
Test(crc32c, check_value)
{
	check_vector("123456789", 9, 0xE3069283u);
}

/* Proves that the CRC of nothing is 0, so an empty continuation is a no-op. */
Test(crc32c, empty)
{
	check_vector("", 0, 0);
	cr_expect_eq(sluice_crc32c(0xE3069283u, "", 0), 0xE3069283u);
}

/* Proves the four 32-byte vectors of RFC 3720 appendix B.4: zeros, ones,
 * ascending and descending bytes. */
Test(crc32c, rfc3720_32_byte_vectors)
{
	uint8_t buf[32];
	memset(buf, 0, sizeof buf);
	check_vector(buf, sizeof buf, 0x8A9136AAu);
	memset(buf, 0xff, sizeof buf);
	check_vector(buf, sizeof buf, 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	check_vector(buf, sizeof buf, 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	check_vector(buf, sizeof buf, 0x113FDB5Cu);
}

/* Proves the RFC 3720 B.4 iSCSI read-command PDU vector (48 bytes). */
Test(crc32c, rfc3720_iscsi_pdu)
{
	static const uint8_t pdu[48] = {
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
		0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	check_vector(pdu, sizeof pdu, 0xD9963A56u);
}

/* Proves that the hardware and table implementations agree on random data
 * for every length 0..2100 and every start alignment 0..15 (the hardware path
 * has separate head, 8-byte body and tail loops). */
Test(crc32c, hw_equals_sw_random)
{
	if (!sluice_crc32c_hw_available())
		cr_skip_test("CPU has no SSE4.2 crc32 instruction");
	static uint8_t buf[2100 + 16];
	rng_fill(buf, sizeof buf);
	for (size_t align = 0; align < 16; align++)
		for (size_t len = 0; len <= 2100; len++) {
			uint32_t seed = (uint32_t)rng_next();
			uint32_t hw = sluice_crc32c_hw(seed, buf + align, len);
			uint32_t sw = sluice_crc32c_sw(seed, buf + align, len);
			if (hw != sw)
				cr_assert_fail("hw %08x != sw %08x at align %zu len %zu", hw, sw, align, len);
		}
}

/* Proves hw == sw on a large buffer (1 MiB), the size class of real batches. */
Test(crc32c, hw_equals_sw_large)
{
	if (!sluice_crc32c_hw_available())
		cr_skip_test("CPU has no SSE4.2 crc32 instruction");
	size_t n = 1u << 20;
	uint8_t *buf = malloc(n + 8);
	cr_assert_not_null(buf);
	rng_fill(buf, n + 8);
	for (size_t align = 0; align < 8; align++)
		cr_expect_eq(sluice_crc32c_hw(0, buf + align, n), sluice_crc32c_sw(0, buf + align, n));
	free(buf);
}

/* Proves that continuing a CRC over consecutive pieces gives the one-shot
 * CRC, for every split point of a buffer and for random multi-way splits. */
Test(crc32c, incremental_equals_one_shot)
{
	static uint8_t buf[777];
	rng_fill(buf, sizeof buf);
	uint32_t whole = sluice_crc32c(0, buf, sizeof buf);
	cr_assert_eq(whole, sluice_crc32c_sw(0, buf, sizeof buf));
	for (size_t cut = 0; cut <= sizeof buf; cut++) {
		uint32_t c = sluice_crc32c(0, buf, cut);
		c = sluice_crc32c(c, buf + cut, sizeof buf - cut);
		cr_assert_eq(c, whole, "split at %zu", cut);
		uint32_t s = sluice_crc32c_sw(sluice_crc32c_sw(0, buf, cut), buf + cut, sizeof buf - cut);
		cr_assert_eq(s, whole, "sw split at %zu", cut);
	}
	for (int round = 0; round < 200; round++) {
		size_t pos = 0;
		uint32_t c = 0;
		while (pos < sizeof buf) {
			size_t step = (size_t)(rng_next() % 40);
			if (step > sizeof buf - pos)
				step = sizeof buf - pos;
			c = sluice_crc32c(c, buf + pos, step);
			pos += step;
		}
		cr_assert_eq(c, whole, "round %d", round);
	}
}
