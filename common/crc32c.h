/* CRC-32C (Castagnoli), the checksum of Kafka record batches v2. The
 * hardware instruction (SSE4.2 crc32) is used when the CPU has it, chosen once
 * at start; a table-driven version covers every other CPU and serves as the
 * reference in the unit tests. */
#ifndef SLUICE_CRC32C_H
#define SLUICE_CRC32C_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* crc is the running value: pass 0 to start, the previous result to continue. */
uint32_t sluice_crc32c(uint32_t crc, const void *data, size_t len);
uint32_t sluice_crc32c_sw(uint32_t crc, const void *data, size_t len);
uint32_t sluice_crc32c_hw(uint32_t crc, const void *data, size_t len);
bool sluice_crc32c_hw_available(void);

#endif
