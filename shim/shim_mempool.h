/* shim_mempool.h - the driver's stream-ordered pool API over fragpool's
 * pools (shim_mempool.c): what shim_core.c tells it about the blocks it
 * serves to cuMemAllocAsync, and the checks it makes on its hot paths.
 *
 * Invariant: each inline check here is one relaxed atomic load when the
 * program uses none of it (no pool set current, no stream-ordered block
 * live, no release threshold set).
 */
#ifndef FP_SHIM_MEMPOOL_H
#define FP_SHIM_MEMPOOL_H

#include "fp_cuda.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Devices whose pools are tracked: ordinals 0 .. FP_MP_DEVICES - 1. */
#define FP_MP_DEVICES 64

/* Per device: the program made a pool other than the default one current
 * (cuDeviceSetMemPool); [FP_MP_DEVICES] stands for every later device. */
extern atomic_bool fp_mempool_foreign_dev[FP_MP_DEVICES + 1];
/* Stream-ordered blocks of fragpool's live now (the table's size). */
extern atomic_size_t fp_mempool_nlive;
/* A release threshold below UINT64_MAX is set on some stand-in pool. */
extern atomic_bool fp_mempool_trimming;

/* cuMemAllocAsync on dev goes to the driver untouched: the program made
 * another pool current there. */
static inline bool fp_mempool_foreign(CUdevice dev)
{
    unsigned i = dev >= 0 && dev < FP_MP_DEVICES ? (unsigned)dev : FP_MP_DEVICES;
    return atomic_load_explicit(&fp_mempool_foreign_dev[i], memory_order_relaxed);
}

/* fragpool served cuMemAllocAsync(size) on dev with the block at p. */
void fp_mempool_allocated(CUdevice dev, CUdeviceptr p, size_t size);

/* Before a block goes back to a pool (any free): takes p out of the
 * stream-ordered table and out of the numbers; returns what it held (0:
 * it was none), for fp_mempool_untake when the free does not happen. */
uint64_t fp_mempool_take_slow(CUdeviceptr p);
static inline uint64_t fp_mempool_take(CUdeviceptr p)
{
    if (!atomic_load_explicit(&fp_mempool_nlive, memory_order_relaxed))
        return 0;
    return fp_mempool_take_slow(p);
}
/* The free of p failed and p stays live: puts back what take took. */
void fp_mempool_untake(CUdeviceptr p, uint64_t held);

/* A context is gone (its pools retired): forgets the stream-ordered blocks
 * that no live pool holds any more. */
void fp_mempool_ctx_gone_slow(void);
static inline void fp_mempool_ctx_gone(void)
{
    if (atomic_load_explicit(&fp_mempool_nlive, memory_order_relaxed))
        fp_mempool_ctx_gone_slow();
}

/* Gives back idle memory of fragpool's on dev (every pool of the device)
 * until it holds at most max(keep, the stream-ordered bytes in use), or
 * nothing idle is left: as safe as empty_cache (a classic pool
 * synchronizes its context first, a virtual-memory pool's unmaps wait for
 * each page's work).  cuMemPoolTrimTo and torch.cuda.empty_cache. */
void fp_mempool_trim(CUdevice dev, uint64_t keep);

/* A synchronization of the program's succeeded: devices with a release
 * threshold give back idle memory above it. */
void fp_mempool_synchronized_slow(void);
static inline void fp_mempool_synchronized(void)
{
    if (atomic_load_explicit(&fp_mempool_trimming, memory_order_relaxed))
        fp_mempool_synchronized_slow();
}

#endif
