/* shim.h - internal interface between the files of the shim.
 *
 * shim_real.c   resolves the driver's own functions from libcuda.so.1;
 * shim_hooks.c  decides which of them fragpool replaces (dlsym and
 *               cuGetProcAddress), by the identity of the function pointer;
 * shim_mem.c    the exported entry points that fragpool implements;
 * shim_pools.c  one pool per context, its backend and the pointer routing;
 * shim_ipc.c    legacy IPC on pool memory (cuIpc*);
 * shim_life.c   configuration, first-call setup, fork and exit.
 *
 * The shim never calls through its own exported symbols: every driver call
 * goes through fp_real, so nothing recurses.  Internal functions return 0
 * or an errno-style code; only shim_mem.c speaks CUresult to callers.
 */
#ifndef FP_SHIM_H
#define FP_SHIM_H

#include "fp_conf.h"
#include "fp_cuda.h"
#include "fp_pool.h"
#include "fp_report.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* The driver's functions that the shim calls or forwards to. */
#define FP_REAL_FUNCS(X)                                                   \
    X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuGetErrorString)          \
    X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)                \
    X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuDeviceTotalMem_v2)     \
    X(cuDeviceGetName) X(cuDeviceGetAttribute)                              \
    X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocPitch_v2)                  \
    X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocAsync_ptsz)            \
    X(cuMemFreeAsync_ptsz) X(cuMemGetInfo_v2) X(cuMemAllocManaged)          \
    X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemFreeHost)                 \
    X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz)                      \
    X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz)                      \
    X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxReset_v2)                        \
    X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxGetState)           \
    X(cuEventCreate) X(cuStreamBeginCapture)                                 \
    X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2)                  \
    X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture)                    \
    X(cuStreamEndCapture_ptsz) X(cuMemAllocFromPoolAsync)                  \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemCreate) X(cuMemAddressReserve)   \
    X(cuMemMap) X(cuDriverGetVersion) X(cuCtxRecordEvent) X(cuCtxWaitEvent)  \
    X(cuStreamWaitEvent) X(cuStreamBeginCaptureToGraph)                     \
    X(cuStreamBeginCaptureToGraph_ptsz) X(cuIpcGetMemHandle)                \
    X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)

typedef struct fp_real_table {
#define FP_REAL_FIELD(name) fp_PFN_##name name;
    FP_REAL_FUNCS(FP_REAL_FIELD)
#undef FP_REAL_FIELD
} fp_real_table;

extern fp_real_table fp_real;

/* shim_real.c */
typedef void *(*fp_dlsym_fn)(void *, const char *);
fp_dlsym_fn fp_dlsym_target(void);                    /* glibc's dlsym  */
void *fp_real_dlsym(void *handle, const char *name);  /* calls it       */
int   fp_real_resolve(void);     /* 0, or ENOENT when libcuda is absent */
void *fp_real_lookup(const char *name); /* dlsym on libcuda.so.1 */
/* cuCtxSynchronize of ctx from any thread (pushed when not current). */
CUresult fp_real_ctx_sync(CUcontext ctx);

/* shim_hooks.c */
void *fp_hook_swap(const char *name, void *fn); /* wrapper or fn itself */
void *fp_hook_swap_any(void *fn);

/* shim_life.c */
typedef struct fp_shim_state {
    fp_conf conf;                 /* effective configuration            */
    char conf_errors[2048];       /* the config problems, one per line  */
    unsigned nconf_errors;
    atomic_bool exiting;          /* set by the exit handler            */
    atomic_bool used;             /* this process made a pool call      */
    bool ready;                   /* fp_real resolved                   */
} fp_shim_state;

extern fp_shim_state fp_shim;
/* Runs the one-time setup; true when the pools can be used. */
bool fp_shim_init(void);
/* One line on stderr, prefixed "fragpool: ", built without malloc. */
void fp_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Thread-local data of the shim.  initial-exec: a direct %fs access
 * instead of a __tls_get_addr call on every allocation; the few bytes fit
 * the static TLS that glibc keeps spare for libraries loaded later. */
#define FP_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))

/* shim_defer.c: deferred reuse (see there). */
typedef struct fp_defer fp_defer;
/* The deferral of a context's pool; NULL when out of memory. */
fp_defer *fp_defer_new(CUcontext ctx);
/* An allocation from pool whose memory no work queued before its free
 * can still touch (s and async: the stream of cuMemAllocAsync). */
int  fp_defer_alloc(fp_defer *f, fp_pool *pool, size_t size, CUstream s, bool async,
                    uint64_t *addr);
/* cuMemFreeAsync(addr, s) gave back a block of size bytes, stamped stamp. */
void fp_defer_freed_async(fp_defer *f, uint64_t addr, size_t size, uint64_t stamp,
                          CUstream s);
/* The context was synchronized; the synchronization began at pool clock. */
void fp_defer_synchronized(fp_defer *f, uint64_t clock);
void fp_defer_forget(fp_defer *f);   /* the context is gone */
void fp_defer_free(fp_defer *f);     /* the pool is dropped */
void fp_defer_fork_prepare(fp_defer *f);             /* fork: take the lock */
void fp_defer_fork_after(fp_defer *f, bool child);   /* give back, or renew */
void fp_defer_counts_get(fp_defer *f, fp_defer_counts *out);

/* shim_pools.c */
typedef struct fp_ctx_pool {
    CUcontext ctx;                /* the context its segments live in   */
    CUdevice dev;
    fp_pool *pool;
    fp_defer *defer;              /* deferred reuse of its frees        */
    size_t total;                 /* device memory, bytes               */
    char name[64];                /* device name, for the summary       */
    atomic_bool retired;          /* context destroyed: pool forgotten  */
} fp_ctx_pool;

/* shim_streams.c: graph capture, during which no fence may be made. */
bool fp_streams_capturing(void);
/* True (and captures cannot begin until fp_capture_gate_leave) when no
 * capture is under way; false, holding nothing, when one is. */
bool fp_capture_gate_enter(void);
void fp_capture_gate_leave(void);
void fp_capture_gate_fork_prepare(void);
void fp_capture_gate_fork_after(bool child);

/* Calls passed to the driver, by kind (FP_PT_* of fp_report.h). */
typedef int fp_pt_kind;
extern atomic_ullong fp_passthrough[FP_PT_NKINDS];
extern atomic_ullong fp_alloc_ticks;   /* time in the allocator, fp_ticks */

/* shim_clock.c */
uint64_t fp_ticks(void);
void     fp_clock_start(void);
uint64_t fp_ticks_to_ns(uint64_t ticks);
/* Time in the allocator: t0 = fp_time_begin() on entry, fp_time_slow()
 * where the call starts to wait for the device or the driver, and
 * fp_time_end(t0) on the way out. */
uint64_t fp_time_begin(void);
void     fp_time_slow(void);
void     fp_time_end(uint64_t t0);
void     fp_time_flush(void); /* this thread's ticks into fp_alloc_ticks */

/* The pool of the calling thread's current context, created on first use;
 * NULL when there is no current context (the caller forwards the call). */
fp_ctx_pool *fp_pools_current(void);
/* The pool of the current context if it has one already, or NULL. */
fp_ctx_pool *fp_pools_current_existing(void);
/* Calls fn on every pool in use until it returns true; returns that pool. */
fp_ctx_pool *fp_pools_find(bool (*fn)(fp_ctx_pool *d, void *ud), void *ud);
/* The pool whose segments hold addr, or NULL. */
fp_ctx_pool *fp_pools_owner(uint64_t addr);
/* Forgets every pool of ctx (or of dev's primary context when ctx NULL). */
void fp_pools_retire(CUcontext ctx, CUdevice dev, bool by_device);
/* Synchronizes the context of d, from any thread. */
int  fp_pools_sync(fp_ctx_pool *d);
/* Idle cached bytes of every pool of device dev. */
size_t fp_pools_idle(CUdevice dev);
/* fork: every lock of the pools, taken in the order the shim nests them
 * (the capture gate, each deferral, each pool), then given back in the
 * parent or made new in the child. */
void fp_pools_fork_prepare(void);
void fp_pools_fork_after(bool child);
/* Visits every pool, retired ones too. */
void fp_pools_each(void (*fn)(fp_ctx_pool *d, void *ud), void *ud);
/* The driver's error of the last failed backend call on this thread. */
CUresult fp_pools_last_error(void);
/* shim_summary.c: the OOM report of d's last failure, on stderr; and the
 * summary of every pool, where the summary key says. */
void fp_pools_report_oom(fp_ctx_pool *d);
void fp_shim_write_summary(const char *mode);
void fp_shim_dump_summary(unsigned n);   /* the n-th SIGUSR1 dump */
/* A path pattern with %p (pid), %r (rank), %h (host) filled in. */
void fp_expand_path(const char *pat, char *out, size_t len);

/* shim_ipc.c: true (and counted) when an allocation of bytes goes to the
 * driver whole (own_segment_mb); a block about to be freed loses its
 * fragpool IPC handle; the counters for the summary. */
bool fp_ipc_own_segment(size_t bytes);
void fp_ipc_block_freed(uint64_t addr);
void fp_ipc_counts_get(fp_ipc_counts *out);

/* shim_trace.c: the trace:PATH recorder. */
void fp_trace_open(void);
bool fp_trace_on(void);
void fp_trace_event(char op, uint64_t id, uint64_t size, CUstream s);
void fp_trace_flush(void);
void fp_trace_fork_prepare(void);
void fp_trace_fork_parent(void);
void fp_trace_fork_child(void);
/* A trace id for a block of d with the pool's allocation number seq. */
uint64_t fp_pools_trace_id(const fp_ctx_pool *d, uint64_t seq);

#endif
