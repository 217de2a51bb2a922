/* shim_ipc.h - what the allocation core (shim_core.c) and the range
 * queries ask of the IPC support (shim_ipc.c).
 *
 * Invariant: a block that is freed has no fragpool IPC handle left.
 */
#ifndef FP_SHIM_IPC_H
#define FP_SHIM_IPC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A fragpool handle was ever given (shim_ipc.c sets it once). */
extern atomic_bool fp_ipc_any_export;
/* A block about to be freed loses its fragpool IPC handle.  Inline, one
 * relaxed load while the process has exported nothing: every free asks. */
void fp_ipc_block_freed_slow(uint64_t addr);
static inline void fp_ipc_block_freed(uint64_t addr)
{
    if (atomic_load_explicit(&fp_ipc_any_export, memory_order_relaxed) && addr)
        fp_ipc_block_freed_slow(addr);
}
/* Whether cuIpcGetMemHandle gives a handle for a live block (of a
 * virtual-memory segment or not, at its segment's start or not). */
bool fp_ipc_exportable(bool vmm, bool at_segment_start);
/* For p inside memory opened through a fragpool handle: true, with the
 * exporter's block as this process sees it (*base, *size). */
bool fp_ipc_opened_range(uint64_t p, uint64_t *base, size_t *size);

#endif
