/* simdev/sim.h: internal interfaces of the simulated CUDA driver.
 *
 * The simulated device is host memory plus one worker thread per stream.
 * The files, in layers, lowest first.  A file calls (or reads a global of)
 * only files of lower layers, never one of its own layer, so there is no
 * circle (scripts/check_layers.py --graph simdev prints the calls):
 *   0  sim_state.c     g_sim, its lock, sim_warn, the init/device checks
 *      sim_error.c     cuGetErrorName, cuGetErrorString
 *      sim_op.c        stream operations and their dependencies; the
 *                      references among streams, operations and events
 *   1  sim_share.c     one capacity shared by processes (FRAGPOOL_SIM_SHARED)
 *      sim_ctx.c       contexts: lookup, the per-thread current-context
 *                      stack, the calls that only read or set them
 *      sim_devfile.c   the shared device file that backs IPC exports
 *      sim_capture.c   capture state and rules (what invalidates one)
 *      sim_pool.c      each device's default stream-ordered pool: its
 *                      accounting (fed by the registry, released at a
 *                      synchronize) and the cuMemPool* / cuDevice*MemPool
 *                      calls
 *      sim_vmmfile.c   the memory file behind VMM handles: its pages,
 *                      and the shareable descriptors that export them
 *   2  sim_registry.c  live allocations, capacity, memory counters
 *   3  sim_stream.c    streams, workers, ordering; the cuStream* calls
 *   4  sim_core.c      setup (FRAGPOOL_SIM_*), devices, and the context
 *                      calls that end or wait for work (teardown, sync)
 *   5  the other API files: sim_event.c (events, cross-stream and context
 *      waits), sim_graph.c (capture calls), sim_nodes.c (graphs built node
 *      by node, instantiated, launched; cuGraphDestroy), sim_mem.c (memory
 *      API), sim_copy.c (copies, memsets), sim_host.c (pinned host memory:
 *      flags, registration), sim_ipc.c (IPC handles across processes),
 *      sim_vmm.c (virtual memory management, shareable handles),
 *      sim_control.c (fpsim_*)
 *   6  sim_proc.c      cuGetProcAddress: names every entry point
 * Work flows down as calls; what a lower file must learn from a higher
 * one arrives as an argument (a stream, an op, a context).
 *
 * Locks (take in this order, never the reverse):
 *   1. g_sim.lock  - contexts, streams, their queues, events, captures,
 *                    graphs, per-device stream counters.  Workers drop it
 *                    while they run an operation.
 *   1b. vmm lock   - private to sim_vmm.c: reservations, handles,
 *                    mappings.  Never taken with g_sim.lock held.
 *   2. mem lock    - private to sim_registry.c: the allocation registry,
 *                    capacity accounting and memory counters, VMM
 *                    reservations.
 *   3. pool lock   - private to sim_pool.c: the pools' figures.  A leaf,
 *                    taken inside the mem lock or g_sim.lock or alone.
 * g_sim.progress is broadcast (under g_sim.lock) whenever any stream
 * completes an operation or a draining stream is reaped; every wait for
 * completion waits on it.
 *
 * cuStreamDestroy does not wait: a stream destroyed with work queued is
 * "draining" (dead, still on its device's list) until its worker has run
 * the queue; then the worker reaps it (sim_stream.c).
 */
#ifndef FP_SIM_H
#define FP_SIM_H

#include "fp_cuda.h"
#include "fpsim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_DEVICES       8
#define SIM_DRIVER_VERSION    13000
#define SIM_CTX_STACK_MAX     64
#define SIM_SMALL_ALIGN       ((size_t)512)     /* allocations < 2 MiB */
#define SIM_LARGE_ALIGN       ((size_t)2 << 20) /* allocations >= 2 MiB */
#define SIM_PITCH_ALIGN       512               /* = TEXTURE_ALIGNMENT */
#define SIM_PRIORITY_LEAST    0
#define SIM_PRIORITY_GREATEST (-5)

typedef struct sim_ctx sim_ctx;
typedef struct sim_stream sim_stream;
typedef struct sim_event sim_event;
typedef struct sim_capture sim_capture;
typedef struct sim_graph sim_graph;
typedef struct sim_dep sim_dep;

/* ---- the shared state: contexts, devices (g_sim in sim_state.c) -------- */
/* A context never moves and is never freed: a destroyed one stays in the
 * list with destroyed set, so stale handles are recognised, not reused. */
struct sim_ctx {
    int dev;        /* device ordinal */
    unsigned flags; /* CU_CTX_* flags */
    bool primary;   /* the device's primary context */
    int retain;     /* primary only: retain count */
    bool active;    /* usable: retained primary or live created ctx */
    bool destroyed; /* created ctx after cuCtxDestroy */
    unsigned peers; /* bit d: cuCtxEnablePeerAccess to device d */
    sim_ctx *next;  /* g_sim.ctxs (created contexts) */
};

typedef struct sim_device {
    sim_ctx primary;                     /* primary context (handle = &primary) */
    sim_stream *legacy;                  /* legacy default stream */
    sim_stream *streams;                 /* live streams, legacy included, and
                                         destroyed ones still draining */
    unsigned long long streams_created;  /* user streams ever created */
    unsigned long long streams_live;     /* user streams not destroyed */
    unsigned long long streams_draining; /* destroyed, queue not yet run */
    unsigned long long ops_executed;     /* operations completed */
    unsigned long long device_syncs;     /* sim_device_sync calls */
    sim_dep *barrier;                    /* cuCtxWaitEvent: work submitted from
                                         now on waits for these (refs held) */
    int nbarrier;
} sim_device;

typedef struct sim_state {
    pthread_mutex_t lock;    /* lock 1, see top */
    pthread_cond_t progress; /* broadcast on every completion */
    atomic_bool initialized; /* cuInit succeeded */
    bool forked;             /* a fork child of an initialized process:
                                 cuInit and every call fail (sim_core.c) */
    int ndev;                /* FRAGPOOL_SIM_DEVICES */
    unsigned fence_us;       /* FRAGPOOL_SIM_FENCE_US: host time a context
                                wait takes, as a real one with busy streams */
    bool vmm;                /* FRAGPOOL_SIM_VMM: the devices have virtual
                                 memory management (default 1) */
    bool vmm_rdma;           /* FRAGPOOL_SIM_VMM_RDMA: cuMemCreate may ask
                                 for GPUDirect RDMA (default 1) */
    sim_device dev[SIM_MAX_DEVICES];
    sim_ctx *ctxs;              /* created contexts, never freed */
    sim_event *events;          /* live events */
    sim_graph *graphs;          /* live graphs */
    unsigned long long next_id; /* capture / graph ids */
    pthread_key_t ptds_key;     /* destroys per-thread streams at thread exit */
} sim_state;

extern sim_state g_sim;

/* ---- state (sim_state.c) ------------------------------------------------ */
CUresult sim_check_init(void);
CUresult sim_check_dev(CUdevice dev);
void sim_lock(void);
void sim_unlock(void);
void sim_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* sim_share.c: FRAGPOOL_SIM_SHARED=PATH, one capacity for every process
 * naming PATH.  sim_share_charge adds bytes to dev's shared total unless
 * that would pass capacity (then false); sim_share_identity is what the
 * device UUIDs carry (PATH's hash, else the pid). */
void sim_share_setup(void);
bool sim_share_on(void);
uint64_t sim_share_identity(void);
bool sim_share_charge(int dev, size_t bytes, size_t capacity);
void sim_share_uncharge(int dev, size_t bytes);
size_t sim_share_used(int dev);
void sim_share_fork_child(void);

/* ---- contexts (sim_ctx.c) ----------------------------------------------- */
/* Current context of the calling thread, usable (else INVALID_CONTEXT). */
CUresult sim_ctx_current(sim_ctx **out);
/* Like sim_ctx_current, with g_sim.lock held. */
CUresult sim_ctx_current_locked(sim_ctx **out);
/* Usable context from a handle, NULL meaning the current one (lock held). */
CUresult sim_ctx_from_handle(CUcontext h, sim_ctx **out);
/* A handle we issued and that was not destroyed (lock held). */
bool sim_ctx_known(const sim_ctx *c);
/* c was destroyed: it leaves the top of this thread's stack if there. */
void sim_ctx_forget_current(const sim_ctx *c);

/* ---- the default pools (sim_pool.c) ------------------------------------- */
/* The registry's reports on a live SIM_MEM_ASYNC allocation of bytes:
 * made; its free call (cuMemFreeAsync or cuMemFree); a cuMemFreeAsync
 * that failed to enqueue, undone; its memory given back. */
void sim_pool_alloc(int dev, size_t bytes);
void sim_pool_free_call(int dev, size_t bytes);
void sim_pool_free_undone(int dev, size_t bytes);
void sim_pool_given_back(int dev, size_t bytes);
/* dev was synchronized (stream, context, event): idle reserved memory
 * above the release threshold goes. */
void sim_pool_synced(int dev);

/* ---- the VMM memory file (sim_vmmfile.c; vmm lock held where said) ------ */
#define SIM_VMM_GRAN ((size_t)2 << 20) /* an H200's granularity */
/* First fit of n free pages of one of this process's files, marked
 * used: 0, or an errno (vmm lock held).  *fd: that file's descriptor. */
int sim_vmmfile_take(size_t n, size_t *first, int *fd);
/* Pages of file fd given back: freed and reusable, unless they were ever
 * exported (then kept, never reused: an importer may still map them). */
void sim_vmmfile_give(int fd, size_t first, size_t n, bool exported);
/* A new open file description of file fd whose position names the pages
 * [first, first+n), recorded in the file's export table with dev: the
 * new descriptor, or -1 (errno set). */
int sim_vmmfile_export(int fd, size_t first, size_t n, int dev);
/* A descriptor made by sim_vmmfile_export (in any process), checked
 * without blocking: 0 with a descriptor of our own for the file (close
 * it) and the pages and device recorded for it, or EINVAL. */
int sim_vmmfile_import(int fd, int *own, size_t *first, size_t *n, int *dev);

/* ---- setup and devices (sim_core.c) ------------------------------------- */
void sim_setup(void); /* once: env, devices */
/* cuDriverGetVersion's answer (FRAGPOOL_SIM_DRIVER_VERSION). */
int sim_driver_version(void);
int sim_attr_value(CUdevice_attribute attr, int dev, int *out);

/* ---- memory (sim_registry.c) ------------------------------------------ */
typedef enum sim_mem_kind {
    SIM_MEM_DEVICE,    /* cuMemAlloc, cuMemAllocPitch */
    SIM_MEM_ASYNC,     /* cuMemAllocAsync outside capture */
    SIM_MEM_GRAPH,     /* cuMemAllocAsync during capture */
    SIM_MEM_MANAGED,   /* cuMemAllocManaged */
    SIM_MEM_HOST,      /* cuMemAllocHost, cuMemHostAlloc */
    SIM_MEM_IPC,       /* cuIpcOpenMemHandle: another process's memory */
    SIM_MEM_VMM,       /* cuMemMap + cuMemSetAccess: a mapping (sim_vmm.c) */
    SIM_MEM_REGISTERED /* cuMemHostRegister: the caller's own host memory */
} sim_mem_kind;

typedef struct sim_alloc {
    CUdeviceptr base; /* == host address */
    size_t size;      /* requested bytes */
    size_t charged;   /* bytes charged against capacity */
    int dev;
    sim_ctx *ctx;
    sim_mem_kind kind;
    unsigned flags;            /* host-alloc / managed flags */
    unsigned long long id;     /* unique buffer id */
    unsigned long long cap_id; /* capture that made a graph allocation */
    bool free_pending;         /* cuMemFreeAsync enqueued, not yet run */
    size_t span;               /* host bytes mapped at base (SIM_MEM_DEVICE:
                                 whole pages, so that IPC can share them) */
    bool shared;               /* SIM_MEM_DEVICE pages now shared (IPC) */
    bool sync_memops;          /* cuPointerSetAttribute(SYNC_MEMOPS) set it */
    /* SIM_MEM_VMM only, from the handle mapped there (sim_vmm.c): */
    unsigned long long handle_types; /* requestedHandleTypes */
    bool rdma;                       /* allocFlags.gpuDirectRDMACapable */
    bool decompress;                 /* usage has CU_MEM_CREATE_USAGE_HW_DECOMPRESS */
    unsigned access;                 /* bit d: device d may read and write it */
} sim_alloc;

void sim_mem_setup(int ndev, size_t capacity, unsigned fail_nth);
CUresult sim_mem_alloc(sim_alloc *req, CUdeviceptr *out);
CUresult sim_mem_find(CUdeviceptr p, sim_alloc *out);
bool sim_mem_range_ok(CUdeviceptr p, size_t n);
typedef enum sim_free_mode {
    SIM_FREE_SYNC,      /* cuMemFree: a device allocation, no free pending */
    SIM_FREE_HOST,      /* cuMemFreeHost: a pinned host allocation */
    SIM_FREE_ASYNC_RUN, /* a stream worker runs an enqueued cuMemFreeAsync */
    SIM_FREE_CAPTURED   /* cuMemFreeAsync of a graph allocation in capture */
} sim_free_mode;
/* Releases the allocation starting at base; INVALID_VALUE if there is no
 * allocation starting there that mode may free. */
CUresult sim_mem_release(CUdeviceptr base, sim_free_mode mode);
CUresult sim_mem_mark_pending(CUdeviceptr base, sim_alloc *out);
void sim_mem_unmark_pending(CUdeviceptr base);
void sim_mem_release_ctx(const sim_ctx *ctx);
void sim_mem_stats(int dev, fpsim_counts *out);
void sim_mem_reset_stats(int dev);
void sim_mem_set_capacity(int dev, size_t bytes);
void sim_mem_fail_nth(unsigned n);
void sim_mem_info(int dev, size_t *free_b, size_t *total_b);
void sim_mem_fork_lock(bool lock); /* pthread_atfork support */
/* IPC (sim_ipc.c calls these): the device allocation holding p, its pages
 * made shareable first; an imported mapping registered and removed. */
CUresult sim_mem_share(CUdeviceptr p, sim_alloc *out);
CUresult sim_mem_add_import(sim_alloc *req);
CUresult sim_mem_remove_import(CUdeviceptr base, sim_alloc *out);
/* VMM (sim_vmm.c calls these): physical memory charged at cuMemCreate
 * (OUT_OF_MEMORY past the capacity) and given back at its release; a
 * SIM_MEM_VMM mapping (registered with sim_mem_add_import) removed. */
CUresult sim_mem_charge_phys(int dev, size_t bytes);
void sim_mem_uncharge_phys(int dev, size_t bytes);
void sim_mem_remove_vmm(CUdeviceptr base);
/* The devices that may reach the SIM_MEM_VMM mapping at base (bit d). */
void sim_mem_set_vmm_access(CUdeviceptr base, unsigned access);
/* cuPointerSetAttribute(SYNC_MEMOPS) on the allocation holding p (not
 * VMM memory: NOT_SUPPORTED there, as natively). */
CUresult sim_mem_set_sync_memops(CUdeviceptr p, bool on);
/* Whether device dev may touch [p, p+n): VMM memory needs its access
 * (cuMemSetAccess), any other memory is reachable. */
bool sim_mem_dev_reaches(CUdeviceptr p, size_t n, int dev);
/* VMM reservations (sim_vmm.c adds and removes them), for the range
 * attributes of pointer queries. */
CUresult sim_mem_add_reservation(CUdeviceptr base, size_t size);
void sim_mem_remove_reservation(CUdeviceptr base);
bool sim_mem_find_reservation(CUdeviceptr p, CUdeviceptr *base, size_t *size);
/* cuMemHostRegister (sim_host.c): the caller's range [req->base,
 * +req->size) registered, never charged, never freed by the simulator;
 * HOST_MEMORY_ALREADY_REGISTERED when it overlaps a live entry.  Removed
 * by base only (else HOST_MEMORY_NOT_REGISTERED). */
CUresult sim_mem_add_registered(sim_alloc *req);
CUresult sim_mem_remove_registered(CUdeviceptr base);

/* ---- the IPC device file (sim_devfile.c) ------------------------------- */
/* Moves the pages [base, base+span) of allocation id into the process's
 * shared device file, contents kept: 0 or an errno. */
int sim_devfile_share_pages(CUdeviceptr base, size_t span, unsigned long long id);
/* Gives them private pages again before the allocation is freed. */
void sim_devfile_unshare_pages(CUdeviceptr base, size_t span, unsigned long long id);
/* This process's file, for a handle: its descriptor (-1: none), nonce. */
void sim_devfile_identity(int *fd, uint64_t *nonce);
/* Another process's file, opened through /proc/pid/fd/fd_there and
 * checked (its nonce, allocation id live): a descriptor, or -1. */
int sim_devfile_open(uint32_t pid, int fd_there, uint64_t nonce, uint64_t id);

/* ---- streams (sim_stream.c) -------------------------------------------- */
typedef enum sim_stream_kind {
    SIM_STREAM_LEGACY,
    SIM_STREAM_PTDS,
    SIM_STREAM_USER
} sim_stream_kind;

typedef enum sim_op_kind {
    SIM_OP_COPY,
    SIM_OP_SET8,
    SIM_OP_SET16,
    SIM_OP_SET32,
    SIM_OP_HOSTFN,
    SIM_OP_EVENT,
    SIM_OP_FREE,
    SIM_OP_WAIT
} sim_op_kind;

/* "Do not start before stream has completed ticket". */
struct sim_dep {
    sim_stream *stream; /* holds a reference */
    unsigned long long ticket;
};

typedef struct sim_op {
    struct sim_op *next; /* queue link */
    sim_op_kind kind;
    unsigned long long ticket; /* position in its stream */
    int ndeps;
    sim_dep *deps; /* malloc'd, ndeps entries */
    union {
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            void *dst;
            unsigned value;
            size_t count;
        } set;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        sim_event *event;     /* SIM_OP_EVENT, holds a reference */
        CUdeviceptr free_ptr; /* SIM_OP_FREE */
    } u;
} sim_op;

/* Invariants: done <= enq; the queue holds exactly tickets done+1..enq in
 * order; only the worker advances done.  A stream is freed when refs drops
 * to 0 (device list, deps and events hold references).  draining implies
 * dead and worker_exit; a draining stream stays on the device list until
 * its worker, finding the queue empty, unlinks it and detaches itself
 * (nobody joins that worker).  A dead stream that is not draining is being
 * retired synchronously (sim_stream_retire). */
struct sim_stream {
    sim_stream_kind kind;
    int dev;
    sim_ctx *ctx;   /* creating context (NULL: legacy/ptds) */
    unsigned flags; /* CU_STREAM_* */
    int priority;
    int refs;
    bool dead;           /* destroy started: no new work */
    bool draining;       /* destroyed with work queued: worker reaps */
    bool worker_running; /* worker thread exists */
    bool worker_exit;    /* asked to exit when the queue is empty */
    pthread_t worker;
    pthread_cond_t work; /* signalled on enqueue and on exit request */
    sim_op *head, *tail;
    unsigned long long enq;  /* last ticket handed out */
    unsigned long long done; /* last ticket completed */
    sim_capture *cap;        /* capture this stream takes part in */
    sim_stream *next;        /* device stream list */
};

/* All take/need g_sim.lock held unless noted. */
/* Operations and references (sim_op.c). */
sim_op *sim_op_new(sim_op_kind kind);
void sim_op_free(sim_op *op);
bool sim_op_add_dep(sim_op *op, sim_stream *s, unsigned long long ticket);
bool sim_stream_idle(const sim_stream *s);
bool sim_stream_blocking(const sim_stream *s);
void sim_stream_ref(sim_stream *s);
void sim_stream_unref(sim_stream *s);
/* Streams (sim_stream.c). */
/* Stream for a handle (NULL: legacy, or the per-thread stream when
 * per_thread), and in *ctx (optional) its context or the current one. */
CUresult sim_stream_resolve(CUstream h, bool per_thread, sim_stream **out, sim_ctx **ctx);
CUresult sim_stream_submit(sim_stream *s, sim_op *op);
void sim_stream_wait(sim_stream *s, unsigned long long ticket);
sim_stream *sim_stream_new(int dev, sim_ctx *ctx, sim_stream_kind kind, unsigned flags,
                           int priority);
void sim_stream_retire(sim_stream *s);  /* drains, joins; unlocks inside */
void sim_stream_abandon(sim_stream *s); /* cuStreamDestroy: no wait */
void sim_device_sync(int dev);          /* every stream of dev,
                                                  draining ones too */
/* Retires ctx's live user streams and waits until its draining ones are
 * reaped; unlocks inside. */
void sim_ctx_retire_streams(const sim_ctx *ctx);
void sim_stream_setup(void);      /* from sim_setup */
void sim_stream_fork_child(void); /* child side of fork */

/* ---- events (sim_event.c) ---------------------------------------------- */
struct sim_event {
    unsigned flags;         /* CU_EVENT_* */
    int refs;               /* live list + pending record ops */
    bool recorded;          /* recorded at least once (outside capture) */
    sim_stream *rec_stream; /* last record: stream (ref) and ticket */
    unsigned long long rec_ticket;
    unsigned long long cap_id; /* last recorded in this capture (0: none) */
    sim_dep *set;              /* cuCtxRecordEvent: the busy streams of the
                                 device then, each with a reference */
    int nset;
    bool timed; /* time_ns valid for the last record */
    long long time_ns;
    sim_event *next; /* g_sim.events */
};

/* References and the record's timestamp (sim_op.c), lock held. */
void sim_event_unref(sim_event *e);
void sim_event_drop_set(sim_event *e);
/* A worker completed op, a record of e on s: e's time, unless re-recorded. */
void sim_event_fire(sim_event *e, const sim_op *op, const sim_stream *s);
/* The live event of a handle (sim_event.c), lock held. */
CUresult sim_event_lookup(CUevent h, sim_event **out);

/* ---- capture (sim_capture.c; the calls in sim_graph.c) ------------------ */
struct sim_capture {
    unsigned long long id;
    CUstreamCaptureMode mode;
    CUstreamCaptureStatus status;
    sim_stream *origin; /* stream that began it */
    pthread_t thread;   /* thread that began it */
    sim_graph *graph;   /* handed out by cuStreamEndCapture */
};

typedef struct sim_node sim_node;
struct sim_graph {
    unsigned long long id;
    size_t nodes;           /* operations captured */
    sim_node *first, *last; /* nodes added one by one (sim_nodes.c) */
    sim_graph *next;        /* g_sim.graphs */
};

/* With g_sim.lock held. */
CUresult sim_capture_unsafe_check(void);
/* The capture with this id, unless it has ended. */
sim_capture *sim_capture_find(unsigned long long id);
/* dev has a capturing stream (a blocking one, if blocking_only). */
bool sim_capture_on_dev(int dev, bool blocking_only);
/* A capture on dev (blocking streams only if blocking_only) is invalidated
 * and err returned; CUDA_SUCCESS when there is none. */
CUresult sim_capture_conflict(int dev, bool blocking_only, CUresult err);
void sim_capture_invalidate(sim_capture *cap);
void sim_capture_add_node(sim_capture *cap);
/* Ends cap: every member leaves it, cap is freed; returns its graph,
 * which the caller owns (sim_graph.c keeps it, or frees it). */
sim_graph *sim_capture_end(sim_capture *cap);
/* s is being destroyed: leave its capture, ending it if s began it. */
void sim_capture_detach(sim_stream *s);

#endif /* FP_SIM_H */
