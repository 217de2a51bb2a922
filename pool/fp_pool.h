/* fp_pool.h - the caching, fragmentation-aware device-memory pool.
 *
 * The pool hands out ranges of device address space carved from large
 * segments that it reserves through a backend (fp_backend).  Its rules are
 * those of PyTorch's native caching allocator, constant for constant:
 * 512 B rounding, a small pool of 2 MiB segments for requests <= 1 MiB,
 * a large pool (20 MiB segments under 10 MiB, else rounded to 2 MiB),
 * exact best fit by (size, address), PyTorch's split and max_split rules,
 * merge with free neighbours inside one segment, and release-and-retry on
 * backend refusal.
 *
 * Invariants (checked by fp_pool_check after every operation in tests):
 *  - the blocks of a segment tile it exactly, in address order;
 *  - no two neighbouring blocks of a segment are both free;
 *  - every free block is in its pool's size index, and nothing else is;
 *  - every live block is in the address map, and nothing else is;
 *  - the stats equal what a walk of the segments counts.
 *
 * With expandable_segments (on by default) and a backend that has the
 * virtual-memory ops, segments are instead large reserved virtual ranges
 * whose physical pages are mapped on demand (pool_vmm.c, docs/vmm.md);
 * then also:
 *  - every page of a live block is mapped;
 *  - reserved bytes == mapped pages x page size.
 *
 * Plain C11; no CUDA header.  Every function is thread-safe: one mutex per
 * pool.  Functions return 0 or an errno-style code.
 */
#ifndef FP_POOL_H
#define FP_POOL_H

#include <stddef.h>
#include <stdint.h>

#define FP_KIB ((size_t)1024)
#define FP_MIB ((size_t)1024 * 1024)
#define FP_GIB ((size_t)1024 * 1024 * 1024)

#define FP_MIN_BLOCK         ((size_t)512) /* rounding unit and minimum block  */
#define FP_SMALL_SIZE        (1 * FP_MIB)  /* largest request of the small pool */
#define FP_SMALL_SEGMENT     (2 * FP_MIB)  /* segment size of the small pool    */
#define FP_LARGE_SEGMENT     (20 * FP_MIB) /* segment for large requests < 10M  */
#define FP_MIN_LARGE_REQ     (10 * FP_MIB) /* from here: request rounded to 2M  */
#define FP_ROUND_LARGE       (2 * FP_MIB)  /* rounding of big segments          */
#define FP_ROUNDUP_INTERVALS 16            /* power-of-two intervals, 1M..64G   */

/* ---- tunables: filled by config/, read by the pool -------------------- */
typedef struct fp_pool_opts {
    size_t max_split_size;         /* blocks >= this are never split; SIZE_MAX = off */
    size_t max_non_split_rounding; /* slack an oversize request may take       */
    uint32_t roundup_divisions[FP_ROUNDUP_INTERVALS]; /* per interval, 0/1 = off */
    double gc_threshold;    /* 0 = off, else in (0,1); needs a cap         */
    double memory_fraction; /* cap as fraction of device_total; 0 = none   */
    size_t max_reserved;    /* cap in bytes; 0 = none                      */
    size_t device_total;    /* device capacity, for memory_fraction        */
    /* ---- virtual-memory segments (pool_vmm.c) ---- */
    int expandable_segments;    /* FP_VMM_*: whether segments are reserved
                                      ranges with pages mapped on demand   */
    size_t vmm_page;            /* page size; 0 = the backend's granularity    */
    size_t vmm_reserve;         /* bytes of address space per range; 0 = the
                                      device's total (64 GiB when unknown)        */
    size_t vmm_headroom;        /* device memory a map leaves free for the
                                      driver and libraries, idle pages taken
                                      back first where there are any; 0 = off
                                      (needs the backend's device_free)    */
    size_t record_bytes;        /* host bytes the record of requests may
                                      use (pool_record.c, 16 per event);
                                      0 = no record                        */
    size_t exact_segment_round; /* 0: PyTorch's segment sizes; else a large
                                      request's segment is its rounded size
                                      rounded up to this (pinned host memory) */
    size_t thread_cache;        /* bytes of freed blocks each thread's front
                                      end may hold (pool_front.c); 0 = off  */
    int solo;                   /* 1: one thread makes every call (a
                                      replay): allocation and free take no
                                      lock; no key sets it                  */
    int lean_stats;             /* 1: of the byte and block statistics
                                      only reserved, segments and allocated
                                      are kept (the rest stay 0): a replay
                                      that reads only peaks and OOMs (tune);
                                      no decision reads the others          */
    int no_live_map;            /* 1 (with solo): every free is by the
                                      handle its grant gave
                                      (fp_pool_free_handle), nothing asks
                                      for a block by address, and the pool
                                      keeps no map of live blocks (tune's
                                      replays: a fifth of their time)       */
} fp_pool_opts;

/* expandable_segments: classic segments; virtual-memory segments asked
 * for by name; or the default, virtual-memory segments wherever the backend
 * offers them.  The pool treats the last two alike (any nonzero value uses
 * the backend's VMM ops when it has them); the shim tells them apart only
 * to say why a mode ran. */
enum { FP_VMM_OFF = 0, FP_VMM_ON = 1, FP_VMM_AUTO = 2 };

/* PyTorch's defaults, but virtual-memory segments where the backend can:
 * no max_split, 20 MiB rounding slack, no rounding, no GC, no cap; with
 * virtual memory, FP_VMM_HEADROOM left free for the driver. */
#define FP_VMM_HEADROOM       (64 * FP_MIB)
#define FP_THREAD_CACHE_BYTES 0 /* thread_cache's default: off until measured on a GPU */
void fp_pool_opts_default(fp_pool_opts *o);

/* The cap in bytes that the options imply; SIZE_MAX when there is none. */
size_t fp_pool_opts_cap(const fp_pool_opts *o);

/* ---- backend: where segments come from -------------------------------- */
typedef struct fp_backend {
    void *ctx;
    /* Reserve a segment of exactly size bytes.  0, ENOMEM when the device
     * is out of memory, or another errno for any other failure. */
    int (*reserve)(void *ctx, size_t size, uint64_t *addr);
    /* Give a whole segment back.  Errors are counted, never fatal. */
    int (*release)(void *ctx, uint64_t addr, size_t size);
    /* Wait until the device has finished all work; may be NULL. */
    int (*synchronize)(void *ctx);
    /* ---- optional virtual-memory ops: all set, or all NULL ----
     * The page size the device maps in (0: it cannot). */
    size_t (*granularity)(void *ctx);
    /* Reserve / free address space only (no physical memory). */
    int (*reserve_va)(void *ctx, size_t size, size_t align, uint64_t *addr);
    int (*free_va)(void *ctx, uint64_t addr, size_t size);
    /* Back [addr, addr+size) with new physical pages, readable and
     * writable by every device that should see it.  0, ENOMEM when the
     * device is out of physical memory, or another errno. */
    int (*map)(void *ctx, uint64_t addr, size_t size);
    /* Give the physical pages of [addr, addr+size) back.  freed_at is the
     * newest pool-clock stamp of the blocks that used them: the backend
     * must make sure the device has finished all work queued before
     * that free before it unmaps. */
    int (*unmap)(void *ctx, uint64_t addr, size_t size, uint64_t freed_at);
    /* Optional: the bytes the device has free now, as the driver counts
     * them (SIZE_MAX: unknown), for vmm_headroom.  May be NULL. */
    size_t (*device_free)(void *ctx);
} fp_backend;

/* The largest request the pool serves; a larger one fails at once (no
 * device holds 256 TiB, and sizes stay far from overflow in every sum the
 * pool makes).  The replay, tune and the OOM report use the same limit. */
#define FP_MAX_REQUEST (((uint64_t)1 << 48) - 1)

/* ---- stats ------------------------------------------------------------- */
typedef struct fp_stat {
    int64_t current;   /* now                                   */
    int64_t peak;      /* highest current ever seen             */
    int64_t allocated; /* sum of all increases, stops at INT64_MAX */
    int64_t freed;     /* sum of all decreases, stops at INT64_MAX */
    int64_t mark;      /* highest current since fp_pool_reset_peaks
                          (the peak torch.cuda's API reports); the
                          run's own peak above never resets      */
} fp_stat;

enum { FP_ALL = 0, FP_SMALL = 1, FP_LARGE = 2, FP_NKINDS = 3 };

typedef struct fp_pool_stats {
    fp_stat requested_bytes[FP_NKINDS];      /* bytes the callers asked for        */
    fp_stat allocated_bytes[FP_NKINDS];      /* whole blocks handed out            */
    fp_stat active_bytes[FP_NKINDS];         /* handed out or not yet reusable     */
    fp_stat reserved_bytes[FP_NKINDS];       /* segments held from the backend     */
    fp_stat inactive_split_bytes[FP_NKINDS]; /* free blocks of split segments */
    fp_stat allocations[FP_NKINDS];          /* live blocks                        */
    fp_stat active[FP_NKINDS];               /* active blocks                      */
    fp_stat segments[FP_NKINDS];             /* segments held                      */
    fp_stat inactive_split[FP_NKINDS];       /* free blocks of split segments      */
    fp_stat oversize_allocations;            /* live blocks >= max_split_size      */
    fp_stat oversize_segments;               /* segments made for such requests    */
    uint64_t num_allocs;                     /* successful allocations             */
    uint64_t num_frees;                      /* successful frees                   */
    uint64_t num_cache_hits;                 /* allocations served without backend */
    uint64_t num_reserve_calls;              /* successful backend reserves        */
    uint64_t num_release_calls;              /* backend releases                   */
    uint64_t num_alloc_retries;              /* times the release-all retry ran    */
    uint64_t num_ooms;                       /* allocations that finally failed    */
    uint64_t num_gc_releases;                /* segments released by the GC        */
    uint64_t num_invalid_frees;              /* frees of pointers not live here    */
    uint64_t num_map_calls;                  /* backend map calls (VMM)            */
    uint64_t num_unmap_calls;                /* backend unmap calls (VMM)          */
    uint64_t num_reclaims;                   /* times idle pages were taken back   */
    uint64_t num_headroom_reclaims;          /* of those, for vmm_headroom         */
    /* (the FP_POOL_NCOUNTS counters num_allocs .. num_headroom_reclaims are one run) */
    size_t page_size;            /* VMM page; 0 in the classic mode    */
    size_t largest_free;         /* largest free block now             */
    size_t largest_free_at_peak; /* largest free block at peak allocated*/
} fp_pool_stats;

#define FP_POOL_NCOUNTS 13 /* num_allocs .. num_headroom_reclaims */

/* The fp_stat fields of fp_pool_stats: X(name, kinds), kinds FP_NKINDS for
 * the arrays (all, small, large) and 1 for the single ones, in order.  The
 * one list a walk over every statistic uses. */
#define FP_POOL_STATS(X)                                                                           \
    X(requested_bytes, FP_NKINDS)                                                                  \
    X(allocated_bytes, FP_NKINDS)                                                                  \
    X(active_bytes, FP_NKINDS)                                                                     \
    X(reserved_bytes, FP_NKINDS)                                                                   \
    X(inactive_split_bytes, FP_NKINDS)                                                             \
    X(allocations, FP_NKINDS)                                                                      \
    X(active, FP_NKINDS)                                                                           \
    X(segments, FP_NKINDS)                                                                         \
    X(inactive_split, FP_NKINDS)                                                                   \
    X(oversize_allocations, 1)                                                                     \
    X(oversize_segments, 1)
_Static_assert(offsetof(fp_pool_stats, num_headroom_reclaims) -
                       offsetof(fp_pool_stats, num_allocs) ==
                   (FP_POOL_NCOUNTS - 1) * sizeof(uint64_t),
               "the counters num_allocs .. num_headroom_reclaims are one run of uint64_t");

/* ---- the pool ------------------------------------------------------------ */
typedef struct fp_pool fp_pool;

/* A description of one failed allocation, for the OOM report. */
typedef struct fp_oom_info {
    size_t requested;    /* bytes asked for                         */
    size_t rounded;      /* after rounding                          */
    size_t segment;      /* size of the segment it needed           */
    size_t allocated;    /* allocated bytes at the failure          */
    size_t reserved;     /* reserved bytes at the failure           */
    size_t idle;         /* reserved - allocated                    */
    size_t largest_free; /* largest free block at the failure       */
    size_t cap;          /* cap in force, SIZE_MAX if none          */
    int over_cap;        /* 1 when the cap refused, 0 the backend   */
    int backend_err;     /* last errno from the backend             */
    int host;            /* 1 when host memory ran out (a header, a
                            page set), not the cap or the device     */
    uint64_t record_at;  /* events recorded before the failure      */
    size_t held_aside;   /* filled by the caller, not the pool: device
                            memory the backend still holds for the pool
                            beyond reserved (VMM pages given back during
                            a stream capture, kept mapped until the
                            device is done with them)              */
} fp_oom_info;

int fp_pool_create(const fp_pool_opts *opts, const fp_backend *backend, fp_pool **out);
/* Releases every segment through the backend unless keep_segments. */
void fp_pool_destroy(fp_pool *p, int keep_segments);

/* 0 and *addr, or ENOMEM (cap or device), or the backend's other errno. */
int fp_pool_alloc(fp_pool *p, size_t size, uint64_t *addr);
/* 0, or EINVAL (counted as an invalid free) when addr is not a live
 * block of this pool. */
int fp_pool_free(fp_pool *p, uint64_t addr);
/* Frees the allocation whose grant gave handle, as fp_pool_free frees by
 * address, without the map of live blocks: 0, or EINVAL when handle is
 * NULL or not a live block's.  handle must be one a grant of p gave and
 * not yet freed (a replay keeps it beside the address). */
int fp_pool_free_handle(fp_pool *p, void *handle);

/* ---- deferred reuse ------------------------------------------------------
 * The pool keeps a clock that ticks once per allocation.  A free stamps the
 * block with the clock (merging takes the newest stamp, a split keeps it),
 * so every free block knows when its memory was last given back.  A block
 * stamped t was freed before every allocation whose clock is > t.  That is
 * all a caller needs to hand out freed memory safely without waiting at the
 * free: before it uses a grant whose freed_at is not yet covered, it makes
 * the device order new work after everything queued so far, and then
 * knows that all blocks freed before this grant's clock are covered.
 * Freed blocks stay in best fit the whole time, so the layout is exactly
 * that of frees that synchronize. */
#define FP_NEVER_FREED ((uint64_t)0) /* memory nobody used since it was reserved */

typedef struct fp_grant {
    uint64_t addr;     /* the block handed out                        */
    size_t size;       /* its whole size (the request rounded, or more) */
    uint64_t freed_at; /* clock of its memory's last free, or FP_NEVER_FREED */
    uint64_t now;      /* the clock of this allocation (> freed_at)      */
    void *handle;      /* for fp_pool_free_handle, until that free       */
} fp_grant;

/* fp_pool_alloc with the grant's details.  A cached block freed at or
 * after unsafe_from is passed over for a new segment (without release and
 * retry; EAGAIN when that is refused): for callers that cannot make such
 * memory safe right now.  UINT64_MAX: any block. */
int fp_pool_alloc_grant(fp_pool *p, size_t size, uint64_t unsafe_from, fp_grant *g);
/* The clock now, read without the lock: every block freed before this
 * read is stamped below the value read. */
uint64_t fp_pool_clock(const fp_pool *p);
/* fp_pool_free for a caller with several pools: ENOENT, counting nothing,
 * when addr lies in no segment of this pool.  On success *freed_at gets
 * the stamp of the free and *size the block's whole size (either may be
 * NULL). */
int fp_pool_free_at(fp_pool *p, uint64_t addr, uint64_t *freed_at, size_t *size);

/* What a free hands back, read in the same locked step as the free. */
typedef struct fp_freed {
    size_t size;       /* the block's whole size                          */
    size_t requested;  /* its requested bytes (fp_pool_lookup's size)     */
    uint64_t seq;      /* its allocation sequence number (fp_pool_lookup's) */
    uint64_t freed_at; /* the stamp of the free                           */
} fp_freed;
/* Called under the pool's lock just after a block is freed, before any
 * other caller can be handed its memory: for a recorder whose row of the
 * free must come before the memory's next allocation.  It may take only
 * a lock that is never held while calling into a pool. */
typedef void (*fp_free_seen)(void *ud, const fp_freed *f);
/* fp_pool_free_at with the block's fp_freed in *out, and seen (when not
 * NULL) called with it under the lock on success: one lock round for a
 * free and its record. */
int fp_pool_free_seen(fp_pool *p, uint64_t addr, fp_freed *out, fp_free_seen seen, void *ud);

/* 1 when addr lies inside a segment of this pool, else 0. If it is the
 * start of a live block, *size gets its requested size (else 0). */
int fp_pool_owns(fp_pool *p, uint64_t addr, size_t *size);
/* The live block at addr: its requested size and allocation sequence
 * number (unique within the pool).  0, or EINVAL when none is live. */
int fp_pool_lookup(fp_pool *p, uint64_t addr, size_t *size, uint64_t *seq);
/* The live allocation whose requested bytes hold addr (an interior
 * pointer too), for the driver's range queries. */
typedef struct fp_found {
    uint64_t addr;    /* the block's start, as handed out            */
    size_t requested; /* its requested bytes                         */
    uint64_t seq;     /* its allocation sequence number              */
    uint64_t segment; /* the start of the segment that holds it      */
    int vmm;          /* 1: a virtual-memory segment                 */
} fp_found;
/* 0 and *out; ENOENT when addr lies in a segment of this pool but in no
 * live block's requested bytes (freed, never handed out, or past the end
 * of what was asked); ESRCH when it lies in no segment of this pool.
 * Walks the segment's blocks: for queries, not for the hot path. */
int fp_pool_find_block(fp_pool *p, uint64_t addr, fp_found *out);
/* Drop every segment without the backend: their memory is already gone
 * (the context that held it was destroyed).  Live blocks count as freed. */
void fp_pool_forget_segments(fp_pool *p);
/* Release every wholly free segment (torch.cuda.empty_cache). */
int fp_pool_empty_cache(fp_pool *p);
/* Release wholly free classic segments, the one freed longest ago first,
 * until reserved bytes are at most keep; then, if still above, unmap idle
 * pages of virtual-memory segments (whole pages no live block touches),
 * oldest free first, until reserved is at most keep or none is left (the
 * last unmap may go up to one page below keep; the ranges themselves
 * stay).  No synchronize for the classic segments (the caller makes sure
 * the device is done with them); every unmap names its pages' newest free
 * stamp, so the backend fences before it (as for empty_cache).  Returns
 * the bytes released. */
size_t fp_pool_trim(fp_pool *p, size_t keep);
/* fp_pool_trim that never waits for the pool's lock: EBUSY (nothing
 * done) while another thread holds it, else 0 with *bytes released.  For
 * a thread that must not wait behind a lock held across a driver call
 * (the lending answer, shim_lend.c). */
int fp_pool_trim_try(fp_pool *p, size_t keep, size_t *bytes);
/* fp_pool_idle_bytes that never waits for the lock: EBUSY, or 0 and *idle. */
int fp_pool_idle_try(fp_pool *p, size_t *idle);

void fp_pool_get_stats(fp_pool *p, fp_pool_stats *out);
/* torch.cuda.reset_peak_memory_stats: every stat's mark becomes its
 * current value (peak, the run's own, stays).  Resetting the totals needs
 * no call: fp_pool_stats_since against a read taken at the reset. */
void fp_pool_reset_peaks(fp_pool *p);
/* torch.cuda.set_per_process_memory_fraction: the cap becomes fraction x
 * device_total (with max_reserved, the lower of the two); 0 removes the
 * fraction.  Takes effect at the next allocation; memory already held
 * stays.  0, or EINVAL for a fraction outside [0, 1]. */
int fp_pool_set_fraction(fp_pool *p, double fraction);
/* st less base, an earlier read of the same pool: every counter and every
 * stat's allocated and freed count what happened since; current and peak
 * stay (a forked child's summary). */
void fp_pool_stats_since(fp_pool_stats *st, const fp_pool_stats *base);
void fp_pool_last_oom(fp_pool *p, fp_oom_info *out);
/* A caller gives up on a refused grant (fp_pool_alloc_grant's EAGAIN)
 * and reports an OOM: the pool notes it as its last OOM and counts it. */
void fp_pool_note_oom(fp_pool *p, size_t size);
/* The caller served the request after the pool's last OOM after all
 * (memory another process gave back): that OOM leaves num_ooms. */
void fp_pool_oom_averted(fp_pool *p);
const fp_pool_opts *fp_pool_get_opts(const fp_pool *p);
/* Bytes reserved now, read without the lock (may be a moment stale). */
size_t fp_pool_reserved_bytes(const fp_pool *p);
/* Bytes held in free blocks (reserved but idle). */
size_t fp_pool_idle_bytes(fp_pool *p);

/* A block's state: free (cached, in the free index) or allocated (handed
 * out, in the live map).  fp_block_info.state holds one of these. */
typedef enum fp_block_state { FP_BLOCK_FREE = 0, FP_BLOCK_ALLOCATED = 1 } fp_block_state;

/* Walk every segment in address order, then every block of it.  A
 * virtual-memory range is walked as one segment per run of mapped pages,
 * its blocks clipped to the run (as PyTorch's snapshot shows expandable
 * segments): a free block that spans unmapped pages shows only its mapped
 * part. */
typedef struct fp_block_info {
    uint64_t addr;
    size_t size;
    size_t requested; /* 0 when free */
    int state;        /* FP_BLOCK_FREE or FP_BLOCK_ALLOCATED */
    uint64_t seq;     /* allocation sequence number, when allocated */
} fp_block_info;
typedef void (*fp_segment_fn)(void *ud, uint64_t addr, size_t size, int small,
                              const fp_block_info *blocks, size_t nblocks);
void fp_pool_walk(fp_pool *p, fp_segment_fn fn, void *ud);

/* fork(): take the pool's lock before, and after it give it back in the
 * parent or make it new in the child (the only thread there). */
void fp_pool_fork_prepare(fp_pool *p);
void fp_pool_fork_after(fp_pool *p, int child);
/* 1 when p's lock is free this moment (taken and given back at once), so
 * the calling thread does not hold it: the shim's exit handler asks before
 * it reads a pool, since exit() may run in a signal handler that
 * interrupted this very pool. */
int fp_pool_lock_free(fp_pool *p);

/* 1 when the pool serves from virtual-memory segments. */
int fp_pool_is_vmm(const fp_pool *p);

/* The sizes of virtual-memory segments (pool_vmm.c): what options o give
 * on a device of o->device_total bytes (0: unknown) and granularity gran,
 * and whether vmm_page or vmm_reserve was over what the device and the
 * address space allow (then the limit is used; the caller says so). */
#define FP_VMM_PAGE_SHARE  8                 /* a page: at most 1/8 of the device */
#define FP_VMM_RANGE_TIMES 4                 /* a range: at most 4 devices' worth */
#define FP_VMM_RANGE_MAX   ((size_t)1 << 42) /* and at most 4 TiB                 */
typedef struct fp_vmm_sizes {
    size_t page, range;              /* bytes mapped at a time; address space per range */
    size_t page_max, range_max;      /* the limits                                      */
    int page_clamped, range_clamped; /* 1: the asked value was over its limit */
} fp_vmm_sizes;
void fp_vmm_size(const fp_pool_opts *o, size_t gran, fp_vmm_sizes *out);
/* Walk the pages of every virtual-memory segment (a reserved range): fn
 * gets each run of pages that are all mapped or all unmapped, in address
 * order, with the range it lies in. */
typedef struct fp_page_run {
    uint64_t addr;     /* the run's first byte                     */
    size_t size;       /* whole pages                              */
    int mapped;        /* 1: backed by physical pages              */
    int small;         /* the range serves the small pool          */
    uint64_t range;    /* the range's first byte                   */
    size_t range_size; /* the range's bytes of address space       */
} fp_page_run;
typedef void (*fp_page_fn)(void *ud, const fp_page_run *run);
void fp_pool_walk_pages(fp_pool *p, fp_page_fn fn, void *ud);

/* ---- the record of requests (pool_record.c, docs/advice.md) ------------
 * With opts.record_bytes > 0 the pool records every allocation it serves
 * ('a': the allocation's ordinal and requested bytes) and every free ('f':
 * the same ordinal and bytes), keeping at least the last record_bytes / 32
 * events of exact history; older history is replaced by the blocks live when it was
 * dropped, replayed as allocations first. */
typedef int (*fp_record_fn)(void *ud, char op, uint64_t id, uint64_t size);
typedef struct fp_record_info {
    uint64_t total;     /* events recorded so far                     */
    uint64_t dropped;   /* events replaced by the base                */
    size_t base_blocks; /* live blocks that stand for them            */
    int broken;         /* a host allocation failed: the record stopped */
} fp_record_info;
/* Calls fn for the record up to event upto (exclusive; an OOM's record_at),
 * under the pool's lock, and fills info.  0, ENODATA when the pool keeps no
 * record, ESTALE when history before upto was dropped, or fn's error. */
int fp_pool_record_read(fp_pool *p, uint64_t upto, fp_record_fn fn, void *ud, fp_record_info *info);

/* ---- the front end: per-thread caches (pool_front.c, docs/pool.md) ------
 * A thread that allocates joins the pool once (fp_pool_front_join) and
 * passes its fp_tcache to every call after.  While only one thread has
 * joined, the front end does nothing and the pool behaves exactly as
 * without it.  From the second thread on (for good), a thread's free of a
 * block it allocated itself goes to its own cache (by block size, a few
 * per class, at most opts.thread_cache bytes), stamped with the clock and
 * its stream, and that thread's next allocation of a fitting size (the
 * rounded request up to the block, at most a quarter more) takes it back:
 * neither takes the pool's lock.  Cached blocks stay allocated in the pool
 * (its layout), and every cache goes back to best fit before the pool
 * reserves or maps more, before an OOM, at empty_cache and trim, when the
 * thread leaves, and in a forked child.  fp_pool_get_stats counts cached
 * blocks as free (not allocated, not active). */
typedef struct fp_tcache fp_tcache;
/* What the front end did.  allocs and frees: served without the pool's
 * lock; returned: bytes of cached blocks given back to best fit before a
 * growth or an OOM (flushes: times that happened). */
typedef struct fp_front_counts {
    uint64_t threads, allocs, frees, flushes, returned;
} fp_front_counts;
/* The same fields as the summary's "Thread caches" rows, the one list the
 * shim and the replay fill them from: X(field, JSON key, text for one,
 * text for many, row kind: FP_ROW_##kind of report/). */
#define FP_FRONT_COUNTS(X)                                                                         \
    X(threads, "threads", " thread", " threads", COUNT)                                            \
    X(allocs, "lockless_allocs", " allocation without the pool's lock",                            \
      " allocations without the pool's lock", COUNT)                                               \
    X(frees, "lockless_frees", " free without the pool's lock", " frees without the pool's lock",  \
      COUNT)                                                                                       \
    X(flushes, "flushes", " flush before growth", " flushes before growth", COUNT)                 \
    X(returned, "returned_bytes", " returned before growth", NULL, BYTES)
/* The calling thread's cache of p: 0, or ENOMEM. */
int fp_pool_front_join(fp_pool *p, fp_tcache **out);
/* The thread is leaving: its cache goes back to best fit, then t is freed.
 * Blocks it allocated stay live (their frees take the pool's lock). */
void fp_pool_front_leave(fp_pool *p, fp_tcache *t);
/* fp_pool_alloc_grant for thread t (NULL: the pool alone).  stream: the
 * order the caller's work runs in (0: none known); *same_stream gets 1
 * when the grant is a cached block freed on that very stream. */
int fp_pool_front_alloc(fp_pool *p, fp_tcache *t, size_t size, uint64_t unsafe_from,
                        uint64_t stream, fp_grant *g, int *same_stream);
/* A free by thread t: 0 when t's cache took addr (*size: the block's
 * size, *freed_at: its stamp); ENOENT when the caller must free it in the
 * pool (fp_pool_free_seen), as any free not of t's own cacheable block. */
int fp_pool_front_free(fp_pool *p, fp_tcache *t, uint64_t addr, uint64_t stream, size_t *size,
                       uint64_t *freed_at);
/* Every cached block freed on stream forgets it (its handle may be reused). */
void fp_pool_front_stream_gone(fp_pool *p, uint64_t stream);
void fp_pool_front_counts(fp_pool *p, fp_front_counts *out);
/* A number no other pool of this process had: a thread's record of its
 * cache is stale when the pool it names has another serial. */
uint64_t fp_pool_serial(const fp_pool *p);

/* Verify every invariant; 0 when sound, else EFAULT with a description. */
int fp_pool_check(fp_pool *p, char *msg, size_t msglen);

/* The size rules, exposed for tests and the replay tool. */
size_t fp_round_size(const fp_pool_opts *o, size_t size);
size_t fp_pool_segment_size(size_t rounded);
int fp_pool_is_small(size_t rounded);
/* The max_split rules, the one copy of them.  A size is oversize when it
 * is max_split_size or more.  fp_may_take: 1 when best fit may hand a
 * cached free block of block_size bytes (>= rounded) to a request of
 * rounded bytes: a request below max_split_size never takes an oversize
 * block, and an oversize request takes one only while the slack stays
 * below max_non_split_rounding.  fp_may_split: 1 when a large-pool block
 * taken for rounded bytes may have its rest (bytes) split off. */
int fp_pool_is_oversize(const fp_pool_opts *o, size_t size);
int fp_may_take(const fp_pool_opts *o, size_t rounded, size_t block_size);
int fp_may_split_large(const fp_pool_opts *o, size_t rounded, size_t rest);

#endif
