/* shim_snaprec.c - the recorder behind snapshot:PATH and trace_stacks:N:
 * a ring of the last FP_SNAP_RING events of every pool, and the host
 * frames of each allocation.  shim_snapfile.c writes the snapshot from it;
 * the summary's leak report reads the frames.
 *
 * Entries: alloc; free_requested + free_completed, one moment (a freed
 * block goes straight back to best fit, deferred reuse only delays the
 * device's use of it, never the pool's); segment_alloc and segment_free;
 * oom.  time_us is CLOCK_REALTIME in microseconds; stream is the program's
 * CUstream value, as PyTorch records it.  Recorded while snapshot:PATH is
 * set, and between fp_snap_start and fp_snap_stop (the C API's
 * fragpool_record_history, torch.cuda.memory._record_memory_history).
 *
 * trace_stacks:N (opt in): glibc backtrace() in the allocation path only,
 * stored raw in the ring beside the entry; symbolized (dladdr) only when
 * a snapshot or the leak report is written.  Every frame inside
 * libfragpool.so is left out.  A frame is {filename: the object, line: 0,
 * name: symbol+0xN, or 0xOFFSET in the object when it has no symbol, for
 * addr2line -e}.
 *
 * Segment events happen inside the pool's allocation, under its lock, so
 * they go to a pending list under a leaf mutex of their own, and move into
 * the ring (in order, before the allocation they belong to) under the
 * ring's mutex: the ring's mutex is never taken with a pool's lock held.
 * A free's pair is recorded the same way, inside the free's locked step
 * (fp_snap_freed), so it is in order before the next allocation of its
 * address without a second round of the pool's lock.
 *
 * Invariants: lock order ring -> pool -> pending, and pending is a leaf;
 * the writer holds the ring's mutex (fp_snap_lock) through its walk of
 * the pools, with the pending events moved in first, so the entries and
 * the segments are one picture (known gap: a SIGUSR1 dump taken while
 * another thread is inside an allocation that reserves or releases may
 * miss that allocation's segment events); fork takes the ring's mutex
 * before the pools' locks and the pending list's after them (shim_life.c's
 * ranked list); a forked child records nothing; no CUDA call.
 */
#include "shim_snaprec.h"
#include "fp_vec.h"
#include "shim_state.h"
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FP_SNAP_RING (1u << 17) /* trace entries kept              */
#define FP_SNAP_SKIP 8          /* frames taken beyond N: the shim's */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
atomic_bool fp_snap_recording;
static fp_snap_entry *ring;
static void **pcs;               /* FP_SNAP_RING x nstack, or NULL   */
static unsigned nstack;          /* trace_stacks                     */
static uint64_t head;            /* entries ever recorded            */
static uintptr_t own_lo, own_hi; /* libfragpool.so's text            */
static pthread_mutex_t pend_lock = PTHREAD_MUTEX_INITIALIZER;
static fp_snap_entry *pend; /* segment events not yet in the ring */
static size_t npend, pend_cap;
static uint64_t pend_lost; /* out of memory for the list       */

/* The address range of the object (all its PT_LOAD segments) that holds
 * ud: libfragpool.so itself. */
static int find_own(struct dl_phdr_info *info, size_t size, void *ud)
{
    (void)size;
    uintptr_t me = (uintptr_t)ud, lo = UINTPTR_MAX, hi = 0;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
        mine |= me >= a && me < b;
    }
    if (mine) {
        own_lo = lo;
        own_hi = hi;
    }
    return mine;
}

void fp_snap_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

void fp_snap_fork_after(bool child)
{
    if (!child) {
        pthread_mutex_unlock(&lock);
        return;
    }
    atomic_store(&fp_snap_recording, false); /* the parent's entries are the parent's */
    pthread_mutex_init(&lock, NULL);
}

void fp_snap_pending_fork_prepare(void)
{
    pthread_mutex_lock(&pend_lock);
}

void fp_snap_pending_fork_after(bool child)
{
    fp_mutex_fork_after(&pend_lock, child);
}

/* The ring (and with frames, their array) on first use; nstack is fixed
 * then.  Under lock, or before any other thread can record. */
static int make_ring(unsigned frames)
{
    if (ring)
        return 0;
    nstack = frames;
    ring = calloc(FP_SNAP_RING, sizeof *ring);
    pcs = nstack ? calloc((size_t)FP_SNAP_RING * nstack, sizeof *pcs) : NULL;
    if (!ring || (nstack && !pcs)) {
        free(ring);
        free(pcs);
        ring = NULL;
        pcs = NULL;
        nstack = 0;
        return ENOMEM;
    }
    if (nstack) { /* backtrace loads its unwinder on first use: not in the hot path */
        void *warm[4];
        backtrace(warm, 4);
        dl_iterate_phdr(find_own, (void *)(uintptr_t)&fp_snap_open);
    }
    return 0;
}

void fp_snap_open(void)
{
    const char *path = fp_shim.conf.snapshot;
    if (!path[0] || strcmp(path, "off") == 0)
        return;
    if (make_ring((unsigned)fp_shim.conf.trace_stacks)) {
        fp_say("snapshot: out of memory for the %u-entry ring; writing no snapshot", FP_SNAP_RING);
        return;
    }
    atomic_store(&fp_snap_recording, true);
}

int fp_snap_start(unsigned frames, bool clear)
{
    pthread_mutex_lock(&lock);
    int err = make_ring(frames < 32 ? frames : 32);
    if (!err && clear)
        head = 0;
    if (!err)
        atomic_store(&fp_snap_recording, true);
    pthread_mutex_unlock(&lock);
    return err;
}

void fp_snap_stop(void)
{
    pthread_mutex_lock(&lock);
    atomic_store(&fp_snap_recording, false);
    pthread_mutex_unlock(&lock);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The caller's frames, the shim's own left out, into out[nstack]. */
static void take_stack(void **out)
{
    void *buf[32 + FP_SNAP_SKIP];
    int n = backtrace(buf, (int)nstack + FP_SNAP_SKIP);
    unsigned k = 0;
    for (int i = 0; i < n && k < nstack; i++)
        if ((uintptr_t)buf[i] < own_lo || (uintptr_t)buf[i] >= own_hi)
            out[k++] = buf[i];
    while (k < nstack)
        out[k++] = NULL;
}

/* One entry into the ring (under lock), with its frames or none. */
static void put_locked(const fp_snap_entry *e, void *const *st)
{
    size_t i = (size_t)(head++ % FP_SNAP_RING);
    ring[i] = *e;
    if (pcs && st)
        memcpy(&pcs[i * nstack], st, nstack * sizeof *st);
    else if (pcs)
        memset(&pcs[i * nstack], 0, nstack * sizeof *pcs);
}

/* The pending segment events into the ring, oldest first (under lock). */
static void flush_pending_locked(void)
{
    pthread_mutex_lock(&pend_lock);
    for (size_t i = 0; i < npend; i++)
        put_locked(&pend[i], NULL);
    npend = 0;
    pthread_mutex_unlock(&pend_lock);
}

static void record(fp_snap_entry e, bool stack, int pair)
{
    void *st[32];
    /* pairs with fp_snap_start's store: the ring and nstack are seen whole */
    if (!atomic_load_explicit(&fp_snap_recording, memory_order_acquire))
        return;
    if (stack && nstack)
        take_stack(st);
    e.time_us = now_us();
    pthread_mutex_lock(&lock);
    flush_pending_locked(); /* this allocation's segments come before it */
    put_locked(&e, stack && nstack ? st : NULL);
    if (pair) {
        e.action = FP_SNAP_FREE_COMPLETED;
        put_locked(&e, NULL);
    }
    pthread_mutex_unlock(&lock);
}

void fp_snap_block(int dev, char op, uint64_t addr, size_t size, uint64_t key, CUstream s)
{
    if (!fp_snap_on())
        return;
    bool alloc = op == 'a';
    fp_snap_entry e = {.addr = addr,
                       .size = size,
                       .stream = (uint64_t)(uintptr_t)s,
                       .key = alloc ? key : 0,
                       .device = dev,
                       .action = alloc ? FP_SNAP_ALLOC : FP_SNAP_FREE_REQUESTED};
    record(e, alloc, alloc ? 0 : 1);
}

void fp_snap_oom(int dev, size_t size, CUstream s)
{
    if (fp_snap_on())
        record((fp_snap_entry){.size = size,
                               .stream = (uint64_t)(uintptr_t)s,
                               .device = dev,
                               .action = FP_SNAP_OOM},
               false, 0);
}

/* One entry onto the pending list (taking its leaf lock). */
static void put_pending(const fp_snap_entry *e)
{
    pthread_mutex_lock(&pend_lock);
    fp_snap_entry *v = fp_vec_grow(pend, &pend_cap, npend + 1, sizeof *v, 256);
    if (v)
        pend = v;
    if (npend < pend_cap)
        pend[npend++] = *e;
    else
        pend_lost++;
    pthread_mutex_unlock(&pend_lock);
}

/* Under a pool's lock: to the pending list, never to the ring. */
void fp_snap_segment(int dev, char op, uint64_t addr, size_t size)
{
    if (!fp_snap_on())
        return;
    fp_snap_entry e = {.addr = addr,
                       .size = size,
                       .device = dev,
                       .time_us = now_us(),
                       .action = op == 's'   ? FP_SNAP_SEGMENT_ALLOC
                                 : op == 'm' ? FP_SNAP_SEGMENT_MAP
                                 : op == 'u' ? FP_SNAP_SEGMENT_UNMAP
                                             : FP_SNAP_SEGMENT_FREE};
    put_pending(&e);
}

/* Under a pool's lock, like a segment event: the pair of a free, before
 * any later allocation of its address reaches the ring. */
void fp_snap_freed(int dev, uint64_t addr, size_t size, CUstream s)
{
    if (!fp_snap_on())
        return;
    fp_snap_entry e = {.addr = addr,
                       .size = size,
                       .stream = (uint64_t)(uintptr_t)s,
                       .device = dev,
                       .time_us = now_us(),
                       .action = FP_SNAP_FREE_REQUESTED};
    put_pending(&e);
    e.action = FP_SNAP_FREE_COMPLETED;
    put_pending(&e);
}

/* ---- writing (under lock) --------------------------------------------- */

typedef struct keyidx {
    uint64_t key;
    size_t idx;
} keyidx;

static keyidx *keys; /* the ring's allocations by key, for frames */
static size_t nkeys;
static uint64_t keys_head = UINT64_MAX; /* head when keys was built */

static int by_key(const void *a, const void *b)
{
    const keyidx *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* keys for the ring as it is now: built again only when it changed. */
static void index_keys(void)
{
    if (keys && keys_head == head)
        return;
    size_t n = head < FP_SNAP_RING ? (size_t)head : FP_SNAP_RING;
    free(keys);
    nkeys = 0;
    keys = pcs ? malloc((n ? n : 1) * sizeof *keys) : NULL;
    for (size_t i = 0; keys && i < n; i++)
        if (ring[i].action == FP_SNAP_ALLOC && ring[i].key)
            keys[nkeys++] = (keyidx){ring[i].key, i};
    if (keys)
        qsort(keys, nkeys, sizeof *keys, by_key);
    keys_head = head;
}

static void *const *stack_of(uint64_t key)
{
    size_t lo = 0, hi = nkeys;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nkeys && keys[lo].key == key ? &pcs[keys[lo].idx * nstack] : NULL;
}

static char names[32][320]; /* the frames of one call of frames_of */

static void symbolize(void *pc, fp_snap_frame *f, char *name, size_t len)
{
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (!dladdr(pc, &info) || !info.dli_fname) {
        snprintf(name, len, "%p", pc);
        *f = (fp_snap_frame){.filename = "??", .name = name};
        return;
    }
    if (info.dli_sname)
        snprintf(name, len, "%s+0x%lx", info.dli_sname,
                 (unsigned long)((uintptr_t)pc - (uintptr_t)info.dli_saddr));
    else
        snprintf(name, len, "0x%lx", (unsigned long)((uintptr_t)pc - (uintptr_t)info.dli_fbase));
    *f = (fp_snap_frame){.filename = info.dli_fname, .name = name};
}

size_t fp_snap_frames(void *ud, uint64_t key, fp_snap_frame *out, size_t max)
{
    (void)ud;
    void *const *st = keys ? stack_of(key) : NULL;
    size_t n = 0;
    for (unsigned k = 0; st && k < nstack && n < max && st[k]; k++, n++)
        symbolize(st[k], &out[n], names[n], sizeof names[n]);
    return n;
}

/* ---- for the writer (shim_snapfile.c) ------------------------------------ */

void fp_snap_lock(void)
{
    pthread_mutex_lock(&lock);
    flush_pending_locked(); /* every segment a walk will see is in the ring */
    if (pend_lost)
        fp_say("snapshot: %llu segment events were lost (out of memory); memory_viz may "
               "show those segments wrongly",
               (unsigned long long)pend_lost);
    index_keys();
}

bool fp_snap_locks_free(void)
{
    if (pthread_mutex_trylock(&lock) != 0)
        return false;
    bool ok = pthread_mutex_trylock(&pend_lock) == 0;
    if (ok)
        pthread_mutex_unlock(&pend_lock);
    pthread_mutex_unlock(&lock);
    return ok;
}

void fp_snap_unlock(void)
{
    pthread_mutex_unlock(&lock);
}

void fp_snap_spans(const fp_snap_entry *ev[2], size_t nev[2])
{
    if (!ring) { /* never recorded: segments and blocks only */
        ev[0] = ev[1] = NULL;
        nev[0] = nev[1] = 0;
        return;
    }
    size_t n = head < FP_SNAP_RING ? (size_t)head : FP_SNAP_RING;
    size_t start = head < FP_SNAP_RING ? 0 : (size_t)(head % FP_SNAP_RING);
    ev[0] = ring + start;
    nev[0] = n - start;
    ev[1] = ring;
    nev[1] = start;
}

bool fp_snap_has_stacks(void)
{
    return pcs != NULL;
}

size_t fp_snap_stack_text(uint64_t key, char *out, size_t len)
{
    size_t o = 0;
    if (!fp_snap_on() || !pcs || !len)
        return 0;
    out[0] = '\0';
    pthread_mutex_lock(&lock);
    index_keys();
    fp_snap_frame f[32];
    size_t n = fp_snap_frames(NULL, key, f, 32);
    for (size_t i = 0; i < n && o + 1 < len; i++) {
        int m = snprintf(out + o, len - o, "%s (%s)\n", f[i].name, f[i].filename);
        if (m < 0 || (size_t)m >= len - o) {
            out[o] = '\0'; /* a frame cut short is left out */
            break;
        }
        o += (size_t)m;
    }
    pthread_mutex_unlock(&lock);
    return o;
}
