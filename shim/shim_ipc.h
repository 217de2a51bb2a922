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


#endif
