/* simdev/fpsim.h: test-control API of the simulated device (libcuda.so.1).
 *
 * These functions are not part of CUDA.  Tests link them directly (-lcuda
 * against the simulated library) or look them up with dlsym(); a test that
 * runs against a real driver must check for their absence.
 *
 * All functions are thread-safe and may be called before cuInit (they load
 * the FRAGPOOL_SIM_* environment once, exactly as cuInit does).
 */
#ifndef FPSIM_H
#define FPSIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef FPSIM_API
#define FPSIM_API __attribute__((visibility("default")))
#endif

/* Per-device counters.  "Device allocation" means cuMemAlloc_v2,
 * cuMemAllocPitch_v2, cuMemAllocAsync (incl. graph allocations made during
 * stream capture) and cuMemAllocManaged; pinned host memory is not counted. */
typedef struct fpsim_counts {
    unsigned long long alloc_calls;       /* device allocation attempts (valid args) */
    unsigned long long alloc_failures;    /* of which returned CUDA_ERROR_OUT_OF_MEMORY */
    unsigned long long async_alloc_calls; /* of which via cuMemAllocAsync */
    unsigned long long free_calls;        /* device allocations released (any path) */
    unsigned long long async_free_calls;  /* of which via cuMemFreeAsync */
    unsigned long long live_allocations;  /* device allocations currently live */
    unsigned long long bytes_in_use;      /* bytes charged against capacity now */
    unsigned long long bytes_peak;        /* high-water mark of bytes_in_use */
    unsigned long long capacity;          /* current capacity in bytes */
    unsigned long long streams_created;   /* user streams created (cuStreamCreate*) */
    unsigned long long streams_live;      /* user streams not yet destroyed */
    unsigned long long ops_executed;      /* stream operations completed by workers */
    unsigned long long device_syncs;      /* whole-device synchronizations
                                          (cuMemFree, cuCtxSynchronize, ...) */
    unsigned long long streams_draining;  /* user streams destroyed with work
                                          queued whose worker has not yet run
                                          it all and exited */
} fpsim_counts;

/* Number of simulated devices (FRAGPOOL_SIM_DEVICES). */
FPSIM_API int fpsim_device_count(void);

/* Sets device dev's capacity in bytes (dev == -1: every device).  Live
 * allocations are kept even if they exceed the new capacity.  Returns 0, or
 * -1 for a bad device. */
FPSIM_API int fpsim_set_capacity(int dev, size_t bytes);

/* Makes the n-th device allocation from now (counted over all devices)
 * fail once with CUDA_ERROR_OUT_OF_MEMORY; n == 0 disarms. */
FPSIM_API void fpsim_fail_nth(unsigned n);

/* Copies device dev's counters into *out.  Returns 0, or -1 for a bad
 * device or NULL out. */
FPSIM_API int fpsim_stats(int dev, fpsim_counts *out);

/* Zeroes the cumulative counters of device dev (-1: all) and resets the
 * peak to the current use; live figures are kept.  Returns 0 or -1. */
FPSIM_API int fpsim_reset_stats(int dev);
/* The allocation of the simulated driver that holds ptr (an interior
 * pointer too), as the driver itself knows it: for a test under fragpool,
 * the pool's segment rather than the block fragpool's range queries
 * answer with.  Returns 0, or -1 when ptr is in no allocation. */
FPSIM_API int fpsim_range(unsigned long long ptr, unsigned long long *base, size_t *size);
/* The devices that may reach the VMM mapping holding ptr, as the
 * simulated driver knows them (bit d: device d granted by cuMemSetAccess):
 * for a test under fragpool, whose cuMemGetAccess answers for a pooled
 * block as for a cudaMalloc.  Returns 0, or -1 when ptr is in no VMM
 * mapping (or devices is NULL). */
FPSIM_API int fpsim_vmm_access(unsigned long long ptr, unsigned *devices);

#ifdef __cplusplus
}
#endif
#endif /* FPSIM_H */
