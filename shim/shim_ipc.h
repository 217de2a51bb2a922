/* shim_ipc.h - what shim_mem.c asks of the IPC support (shim_ipc.c).
 *
 * Invariant: a block that is freed has no fragpool IPC handle left.
 */
#ifndef FP_SHIM_IPC_H
#define FP_SHIM_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True (and counted) when an allocation of bytes goes to the driver whole
 * (own_segment_mb). */
bool fp_ipc_own_segment(size_t bytes);
/* A block about to be freed loses its fragpool IPC handle. */
void fp_ipc_block_freed(uint64_t addr);
/* Whether cuIpcGetMemHandle gives a handle for a live block (of a
 * virtual-memory segment or not, at its segment's start or not). */
bool fp_ipc_exportable(bool vmm, bool at_segment_start);
/* For p inside memory opened through a fragpool handle: true, with the
 * exporter's block as this process sees it (*base, *size). */
bool fp_ipc_opened_range(uint64_t p, uint64_t *base, size_t *size);

#endif
