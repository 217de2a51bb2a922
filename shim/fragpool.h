/* fragpool.h - the C API that libfragpool.so exports beside the driver's
 * entry points: what a framework's own memory API needs to answer from
 * fragpool's pools (torch.cuda.memory_allocated, memory_stats,
 * set_per_process_memory_fraction, empty_cache, the memory snapshot, the
 * text of an out-of-memory error).  fragpool's Python side
 * (python/fragpool/) reads it through ctypes; docs/api.md describes it.
 *
 * Versioning: fragpool_api_version() returns FRAGPOOL_API_VERSION.  A
 * later version only adds functions, and adds fields to fragpool_stats
 * at its end; a caller passes sizeof(fragpool_stats) as it knows it and
 * gets that many bytes filled.
 *
 * Every function may be called from any thread at any time after the
 * library is loaded, before or after the program's first CUDA call; none
 * of them makes the program's CUDA calls fail or change what they return.
 * Each returns 0 or an errno-style code, except where it says otherwise.
 * A device is a CUDA device ordinal, as torch.cuda numbers them (fragpool
 * sums every context of that device).
 */
#ifndef FRAGPOOL_H
#define FRAGPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FRAGPOOL_API_VERSION 1

/* One statistic, as PyTorch's memory_stats keeps it.  peak is the highest
 * value since the last fragpool_reset_peak (torch.cuda.max_memory_*);
 * run_peak the highest in the whole run (fragpool's summary).  allocated
 * and freed count since the last fragpool_reset_accumulated. */
typedef struct fragpool_stat {
    int64_t current, peak, allocated, freed, run_peak;
} fragpool_stat;

/* Index of the three pools PyTorch breaks every statistic into. */
enum { FRAGPOOL_ALL = 0, FRAGPOOL_SMALL_POOL = 1, FRAGPOOL_LARGE_POOL = 2 };

typedef struct fragpool_stats {
    fragpool_stat allocation[3];           /* live blocks                      */
    fragpool_stat segment[3];              /* segments (mapped runs: VMM)      */
    fragpool_stat active[3];               /* live or not yet reusable blocks  */
    fragpool_stat inactive_split[3];       /* free blocks of split segments    */
    fragpool_stat allocated_bytes[3];      /* whole blocks handed out          */
    fragpool_stat reserved_bytes[3];       /* held from the device             */
    fragpool_stat active_bytes[3];         /*                                  */
    fragpool_stat inactive_split_bytes[3]; /*                                  */
    fragpool_stat requested_bytes[3];      /* bytes the callers asked for      */
    fragpool_stat oversize_allocations;    /* blocks >= max_split_size         */
    fragpool_stat oversize_segments;       /*                                  */
    uint64_t num_alloc_retries;            /* release-and-retry rounds         */
    uint64_t num_ooms;                     /* allocations that failed          */
    uint64_t num_device_alloc;             /* segment reserves and page maps   */
    uint64_t num_device_free;              /* segment releases and page unmaps */
    uint64_t max_split_size;               /* bytes; UINT64_MAX: none          */
    uint64_t device_total;                 /* the device's memory              */
    double memory_fraction;                /* the cap in force; 0: none        */
    uint32_t pools;                        /* contexts of the device summed    */
    uint32_t vmm;                          /* 1: virtual-memory segments       */
} fragpool_stats;

/* FRAGPOOL_API_VERSION of the library loaded. */
int fragpool_api_version(void);

/* The statistics of device into *out (size: sizeof(fragpool_stats) as the
 * caller knows it; at most that many bytes are written).  A device that
 * has no pool yet reads as zeros with pools == 0.  EINVAL for a NULL out
 * or a size of 0. */
int fragpool_get_stats(int device, fragpool_stats *out, size_t size);

/* Every peak of device drops to its current value. */
int fragpool_reset_peak(int device);
/* allocated, freed and the counters of device count from now. */
int fragpool_reset_accumulated(int device);

/* The cap of device becomes fraction x its memory (reserved bytes, as
 * PyTorch's caching allocator caps them), for its pools now and later; 0
 * lifts it.  EINVAL outside [0, 1], ENODEV for a device past 63. */
int fragpool_set_fraction(int device, double fraction);
/* The fraction in force on device: set at run time, else from the
 * configuration; 0 when none. */
double fragpool_get_fraction(int device);

/* Gives the device's idle memory back to the driver (every device when
 * device < 0), once the device has finished the work queued before each
 * block's free: torch.cuda.empty_cache. */
int fragpool_empty_cache(int device);

/* Snapshot history on (frames: host frames kept per allocation, at most
 * 32, fixed by the first call; clear: drop what was recorded so far) or
 * off (on = 0: the entries stay for the next snapshot). */
int fragpool_record_history(int on, unsigned frames, int clear);
/* PyTorch's memory snapshot (the pickle _dump_snapshot writes) to path, a
 * new file: segments and blocks always, trace entries when history was
 * recorded. */
int fragpool_write_snapshot(const char *path);

/* The number of out-of-memory failures fragpool has explained so far, and
 * the text of the latest (the lines it printed, each ending in '\n') in
 * buf[len], cut short where it does not fit.  0 when there was none. */
uint64_t fragpool_last_oom(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
