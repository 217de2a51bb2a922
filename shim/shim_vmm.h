/* shim_vmm.h - the virtual-memory backend of a context's pool
 * (shim_vmm.c): address ranges, pages mapped and unmapped through the
 * driver's VMM calls, peer access on every mapped page.
 *
 * Invariant: a page of a range has a handle iff it is mapped in the
 * driver; every mapped page is readable and writable by the owning
 * device and by every peer granted so far.
 */
#ifndef FP_SHIM_VMM_H
#define FP_SHIM_VMM_H

#include "fp_cuda.h"
#include "shim_defer.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fp_vmm fp_vmm;

/* The VMM state of the pool of ctx on dev; unmaps wait through defer.
 * NULL when out of memory. */
fp_vmm *fp_vmm_new(CUcontext ctx, CUdevice dev, fp_defer *defer);
/* The backend's ops (fp_backend): errno-style results; a failed driver
 * call leaves its CUresult for fp_vmm_last_error on this thread. */
size_t fp_vmm_granularity(fp_vmm *v);
/* Whether the driver says dev has virtual memory management
 * (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED). */
bool fp_vmm_supported(CUdevice dev);
int fp_vmm_reserve_va(fp_vmm *v, size_t size, size_t align, uint64_t *addr);
int fp_vmm_free_va(fp_vmm *v, uint64_t addr, size_t size);
int fp_vmm_map(fp_vmm *v, uint64_t addr, size_t size);
int fp_vmm_unmap(fp_vmm *v, uint64_t addr, size_t size, uint64_t freed_at);
CUresult fp_vmm_last_error(void);
/* The program enabled access from device peer: grant it on every mapped
 * page now and on every page mapped later.  0 or EIO. */
int fp_vmm_add_peer(fp_vmm *v, CUdevice peer);
/* 1 when addr lies inside one of v's ranges. */
bool fp_vmm_owns(fp_vmm *v, uint64_t addr);
/* The granularity found by fp_vmm_granularity (0 before). */
size_t fp_vmm_page(fp_vmm *v);
/* Whether v's granules can be exported (POSIX file descriptor handles). */
bool fp_vmm_shareable(fp_vmm *v);
/* Exports the n granules from addr (a granule's start) of a range: fds[i]
 * a new descriptor of granule i, for another process to import.  0, or
 * EINVAL (not n granules of one range from a granule's start), EFAULT
 * (one is not mapped), EIO (the driver refused); on error nothing stays
 * open. */
int fp_vmm_export(fp_vmm *v, uint64_t addr, size_t n, int *fds);
/* Pages still mapped because their unmap could not wait (capture). */
uint64_t fp_vmm_kept(fp_vmm *v);
/* The context is gone, and with it all its work: every granule is
 * unmapped and released and every range freed (the driver does not tie
 * them to the context, so they would outlive it), then the table dropped.
 * No driver call once the process is exiting. */
void fp_vmm_release_all(fp_vmm *v);
void fp_vmm_free(fp_vmm *v); /* the pool is dropped */
void fp_vmm_fork_prepare(fp_vmm *v);
void fp_vmm_fork_after(fp_vmm *v, bool child);

#endif
