/* shim_pages.h - the virtual-memory backend of a context's pool
 * (shim_pages.c): address ranges, pages mapped and unmapped through the
 * driver's VMM calls, peer access on every mapped page.
 *
 * Invariant: a page of a range has a handle iff it is mapped in the
 * driver; every mapped page is readable and writable by the owning
 * device and by every peer granted so far.
 */
#ifndef FP_SHIM_PAGES_H
#define FP_SHIM_PAGES_H

#include "fp_cuda.h"
#include "shim_defer.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fp_pages fp_pages;

/* The VMM state of the pool of ctx on dev; unmaps wait through defer.
 * NULL when out of memory. */
fp_pages *fp_pages_new(CUcontext ctx, CUdevice dev, fp_defer *defer);
/* The backend's ops (fp_backend): errno-style results; a failed driver
 * call leaves its CUresult for fp_pages_last_error on this thread. */
size_t fp_pages_granularity(fp_pages *v);
/* Whether the driver says dev has virtual memory management
 * (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED). */
bool fp_pages_supported(CUdevice dev);
int fp_pages_reserve_va(fp_pages *v, size_t size, size_t align, uint64_t *addr);
int fp_pages_free_va(fp_pages *v, uint64_t addr, size_t size);
int fp_pages_map(fp_pages *v, uint64_t addr, size_t size);
int fp_pages_unmap(fp_pages *v, uint64_t addr, size_t size, uint64_t freed_at);
CUresult fp_pages_last_error(void);
/* The program enabled access from device peer: grant it on every mapped
 * page now and on every page mapped later.  0 or EIO. */
int fp_pages_add_peer(fp_pages *v, CUdevice peer);
/* 1 when addr lies inside one of v's ranges. */
bool fp_pages_owns(fp_pages *v, uint64_t addr);
/* The granularity found by fp_pages_granularity (0 before). */
size_t fp_pages_page(fp_pages *v);
/* Whether v's granules can be exported (POSIX file descriptor handles). */
bool fp_pages_shareable(fp_pages *v);
/* Exports the n granules from addr (a granule's start) of a range: fds[i]
 * a new descriptor of granule i, for another process to import.  0, or
 * EINVAL (not n granules of one range from a granule's start), EFAULT
 * (one is not mapped), EIO (the driver refused); on error nothing stays
 * open. */
int fp_pages_export(fp_pages *v, uint64_t addr, size_t n, int *fds);
/* Pages still mapped because their unmap could not wait (capture). */
uint64_t fp_pages_kept(fp_pages *v);
/* The context is gone, and with it all its work: every granule is
 * unmapped and released and every range freed (the driver does not tie
 * them to the context, so they would outlive it), then the table dropped.
 * No driver call once the process is exiting. */
void fp_pages_release_all(fp_pages *v);
void fp_pages_free(fp_pages *v); /* the pool is dropped */
void fp_pages_fork_prepare(fp_pages *v);
void fp_pages_fork_after(fp_pages *v, bool child);

#endif
