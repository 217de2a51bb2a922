/* shim_ipc.c - legacy CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle) on memory that fragpool served.
 *
 * The driver's handle describes a whole driver allocation, and the process
 * that opens it gets that allocation's start.  A pool block that starts
 * its segment is therefore exported as it is: every receiver, with or
 * without fragpool, gets the right bytes.  A block inside its segment, and
 * any block of a virtual-memory segment (which has no legacy handle at
 * all), cannot be described by the driver's handle:
 *   - ipc_export:fragpool (the default): the export gives a fragpool
 *     handle, a key into a registry that this process keeps in a memfd.
 *     For a classic block the slot holds the segment's real handle and
 *     the block's offset: a receiver under fragpool reads it through
 *     /proc/PID/fd/FD, opens the real handle and adds the offset.  For a
 *     virtual-memory block the receiver asks this process's channel
 *     (shim_ipc_vmm.c) for the block's granules as file descriptors and
 *     maps them.  A receiver without fragpool hands the driver bytes it
 *     never made and gets its error.  The receiver reads only what is a
 *     sealed registry memfd of fragpool's, never blocking: a forged handle
 *     gets the driver's CUDA_ERROR_INVALID_VALUE and one line.
 *   - ipc_export:refuse: such an export fails with
 *     CUDA_ERROR_NOT_SUPPORTED and one line saying what to set.
 * own_segment_mb:N sends allocations of N MiB or more to the driver, each a
 * segment of its own, so that their handles need nothing of the above (the
 * allocation core, shim_core.c, decides and counts that).
 * docs/shim.md ("IPC") gives the reasons and the limits.
 *
 * Invariants: a registry slot is written whole (pwrite) and carries a
 * check over its contents and the handle's, so a reader never uses a torn
 * or reused slot; the slot of a block is killed when the block is freed
 * (before the pool sees the free, under the registry's lock, which the
 * channel's answers hold too); the receiver remembers what it opened
 * (pointer, the real mapping, the block's bytes), so that
 * cuIpcCloseMemHandle closes the real mapping and the range queries
 * (shim_ranges.c) answer with the exporter's block.  Internal functions
 * return 0 or an errno; the cu* entry points return the driver's codes.
 */
#include "shim_ipc.h"
#include "fp_hmap.h"
#include "shim_ipc_vmm.h"
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_pages.h"
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WIRE_MAGIC "fragpool"     /* the first 8 bytes of a fragpool handle */
#define REG_MAGIC  "fpipcreg"     /* the registry file's first 8 bytes      */
#define REG_SLOTS  65536u         /* distinct block addresses exported      */
#define REG_HEAD   4096           /* slots start here in the file           */
#define REG_NAME   "fragpool-ipc" /* the registry memfd's name              */
#define REG_LEN    (REG_HEAD + (off_t)REG_SLOTS * (off_t)sizeof(reg_slot))
#define REG_SEALS  (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) /* its length is fixed */

static void bump(atomic_ullong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ---- the handle and the registry's layout --------------------------------- */

enum { KIND_CLASSIC = 1, KIND_VMM = 2 }; /* a slot's, and a handle's version */

typedef struct wire { /* a fragpool handle: 64 bytes               */
    char magic[8];
    uint32_t pid;           /* the exporter                              */
    int32_t fd;             /* its registry memfd                        */
    uint64_t nonce;         /* the registry's, against a reused pid      */
    uint32_t slot, version; /* version: KIND_*                           */
    uint64_t serial;        /* the slot's contents when exported         */
    uint64_t offset;        /* the block's offset in its segment         */
    uint64_t size;          /* the block's size, for messages            */
    uint64_t check;         /* over the slot's contents                  */
} wire;
_Static_assert(sizeof(wire) == CU_IPC_HANDLE_SIZE, "a fragpool handle is 64 bytes");

typedef struct reg_head {
    char magic[8];
    uint64_t nonce;
} reg_head;

typedef struct reg_slot { /* one exported block: 128 bytes             */
    uint64_t serial;      /* 0: empty or freed                         */
    uint64_t addr, offset, size;
    uint64_t check;
    uint64_t kind; /* KIND_*                                    */
    uint64_t seq;  /* the block's allocation number (VMM)       */
    uint64_t spare;
    CUipcMemHandle real; /* the segment's own handle (classic)        */
} reg_slot;
_Static_assert(sizeof(reg_slot) == 128, "a registry slot is 128 bytes");

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t slot_check(const reg_slot *s, uint64_t nonce)
{
    uint64_t h = mix(nonce, s->serial);
    h = mix(mix(mix(h, s->addr), s->offset), s->size);
    h = mix(mix(h, s->kind), s->seq);
    for (size_t i = 0; i < CU_IPC_HANDLE_SIZE; i += 8) {
        uint64_t w;
        memcpy(&w, s->real.reserved + i, 8);
        h = mix(h, w);
    }
    return h | 1;
}

static bool is_fragpool_handle(const CUipcMemHandle *h)
{
    return memcmp(h->reserved, WIRE_MAGIC, 8) == 0;
}

/* ---- the exporter's registry ---------------------------------------------- */

/* Which slot holds which block: an index of the live exports (address ->
 * slot + 1) beside the file, and the slots given back by frees, taken
 * again before a slot never used.  A slot's index is in the handles that
 * receivers hold, so a slot never moves; only its contents change (a new
 * serial), which those handles then refuse. */
static struct {
    pthread_mutex_t lock;
    int fd;    /* -1 until the first fragpool export        */
    pid_t pid; /* the process that made fd                  */
    uint64_t nonce, serial;
    fp_hmap index;        /* block address -> slot + 1, live exports   */
    uint32_t *free_slots; /* slots given back (a stack), REG_SLOTS     */
    uint32_t nfree, next; /* its depth; the first slot never used      */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static void reg_drop_all_locked(void)
{
    if (reg.fd >= 0)
        close(reg.fd);
    fp_hmap_fini(&reg.index);
    free(reg.free_slots);
    reg.fd = -1;
    reg.free_slots = NULL;
    reg.nfree = reg.next = 0;
}

/* The registry of this process: a forked child makes its own, so that it
 * never writes the slots of its parent's handles. */
static int reg_open_locked(void)
{
    if (reg.fd >= 0 && reg.pid == getpid())
        return 0;
    reg_drop_all_locked();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    reg_head h = {.nonce = mix(mix((uint64_t)ts.tv_nsec, (uint64_t)ts.tv_sec), getpid())};
    memcpy(h.magic, REG_MAGIC, 8);
    reg.free_slots = malloc(REG_SLOTS * sizeof *reg.free_slots);
    int fd = reg.free_slots && fp_hmap_init(&reg.index, 1024) == 0
                 ? memfd_create(REG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING)
                 : -1;
    if (fd >= 0 && (ftruncate(fd, REG_LEN) != 0 || pwrite(fd, &h, sizeof h, 0) != sizeof h ||
                    fcntl(fd, F_ADD_SEALS, REG_SEALS) != 0)) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        int err = errno ? errno : EIO;
        reg_drop_all_locked();
        return err;
    }
    reg.fd = fd;
    reg.pid = getpid();
    reg.nonce = h.nonce;
    return 0;
}

static off_t slot_pos(uint32_t i)
{
    return REG_HEAD + (off_t)i * (off_t)sizeof(reg_slot);
}

/* The slot of the live export of addr, or -1. */
static long reg_find_locked(uint64_t addr)
{
    uint64_t v = fp_hmap_at(&reg.index, fp_hmap_slot(&reg.index, addr));
    return v ? (long)(v - 1) : -1;
}

/* A slot for a new export of addr, entered in the index; -1: every slot
 * holds a live export (ENOSPC) or no memory for the index (ENOMEM). */
static long reg_take_locked(uint64_t addr, int *err)
{
    if (!reg.nfree && reg.next == REG_SLOTS) {
        *err = ENOSPC;
        return -1;
    }
    if ((*err = fp_hmap_make_room(&reg.index)) != 0)
        return -1;
    uint32_t i = reg.nfree ? reg.free_slots[--reg.nfree] : reg.next++;
    fp_hmap_fill(&reg.index, fp_hmap_slot(&reg.index, addr), addr, (uint64_t)i + 1);
    return i;
}

/* addr's export is over: its slot goes back to the free stack. */
static void reg_give_back_locked(uint64_t addr)
{
    size_t k = fp_hmap_slot(&reg.index, addr);
    uint64_t v = fp_hmap_at(&reg.index, k);
    if (!v)
        return;
    fp_hmap_erase(&reg.index, k);
    reg.free_slots[reg.nfree++] = (uint32_t)(v - 1);
}

/* Fills slot i with the block (a new serial, unless it holds this already:
 * fresh is false when the slot held addr's export before). */
static int reg_put_locked(uint32_t i, bool fresh, const reg_slot *want, reg_slot *got)
{
    if (!fresh && pread(reg.fd, got, sizeof *got, slot_pos(i)) == sizeof *got && got->serial &&
        got->addr == want->addr && got->offset == want->offset && got->kind == want->kind &&
        got->seq == want->seq && memcmp(&got->real, &want->real, sizeof got->real) == 0)
        return 0;
    *got = *want;
    got->serial = ++reg.serial;
    got->check = slot_check(got, reg.nonce);
    return pwrite(reg.fd, got, sizeof *got, slot_pos(i)) == sizeof *got ? 0 : EIO;
}

/* The granules of the virtual-memory block of slot s, if it is still
 * the block that was exported (the same allocation, live). */
static int vmm_block(const reg_slot *s, size_t from, size_t n, int *fds, fp_ipcv_block *b)
{
    fp_ctx_pool *d = fp_pools_owner(s->addr);
    fp_found f;
    int err = !d || !d->vmm || fp_pool_find_block(d->pool, s->addr, &f) != 0 || !f.vmm ||
                      f.addr != s->addr || f.seq != s->seq
                  ? ESTALE
                  : 0;
    size_t gran = err ? 0 : fp_pages_page(d->vmm);
    if (!err && !gran)
        err = EIO;
    if (!err) {
        uint64_t first = f.segment + (f.addr - f.segment) / gran * gran;
        *b = (fp_ipcv_block){.gran = gran,
                             .offset = f.addr - first,
                             .size = f.requested,
                             .ngran = (f.addr + f.requested - first + gran - 1) / gran};
        if (n)
            err =
                from + n > b->ngran ? EINVAL : fp_pages_export(d->vmm, first + from * gran, n, fds);
    }
    fp_pools_put(d);
    return err;
}

/* The channel's answer (shim_ipc_vmm.h), under the registry's lock: a
 * free of the block waits for it (fp_ipc_block_freed), so the granules
 * sent are the live block's. */
static int vmm_answer(const fp_ipcv_req *q, size_t from, size_t n, int *fds, fp_ipcv_block *b)
{
    reg_slot s;
    pthread_mutex_lock(&reg.lock);
    int err = reg.fd >= 0 && reg.pid == getpid() && q->slot < REG_SLOTS &&
                      pread(reg.fd, &s, sizeof s, slot_pos(q->slot)) == sizeof s
                  ? 0
                  : ESRCH;
    if (!err && (!s.serial || s.serial != q->serial || s.check != q->check || s.kind != KIND_VMM))
        err = ESTALE;
    if (!err)
        err = vmm_block(&s, from, n, fds, b);
    pthread_mutex_unlock(&reg.lock);
    return err;
}

/* A fragpool handle for the block want describes; 0 or an errno. */
static int reg_export(reg_slot want, CUipcMemHandle *out)
{
    reg_slot got;
    pthread_mutex_lock(&reg.lock);
    int err = reg_open_locked();
    long i = err ? -1 : reg_find_locked(want.addr);
    bool fresh = i < 0;
    if (!err && fresh)
        i = reg_take_locked(want.addr, &err);
    if (!err && (err = reg_put_locked((uint32_t)i, fresh, &want, &got)) != 0)
        reg_give_back_locked(want.addr);
    if (!err && want.kind == KIND_VMM)
        err = fp_ipcv_serve(reg.nonce, vmm_answer);
    wire w = {.pid = (uint32_t)getpid(),
              .fd = reg.fd,
              .nonce = reg.nonce,
              .slot = (uint32_t)i,
              .version = (uint32_t)want.kind,
              .serial = got.serial,
              .offset = want.offset,
              .size = want.size,
              .check = got.check};
    pthread_mutex_unlock(&reg.lock);
    if (err)
        return err;
    atomic_store(&fp_ipc_any_export, true);
    memcpy(w.magic, WIRE_MAGIC, 8);
    memcpy(out->reserved, &w, sizeof w);
    return 0;
}

atomic_bool fp_ipc_any_export;

void fp_ipc_block_freed_slow(uint64_t addr)
{
    pthread_mutex_lock(&reg.lock);
    long i = reg.fd >= 0 && reg.pid == getpid() ? reg_find_locked(addr) : -1;
    uint64_t dead = 0;
    if (i >= 0) {
        if (pwrite(reg.fd, &dead, sizeof dead, slot_pos((uint32_t)i)) == sizeof dead)
            reg_give_back_locked(addr); /* its slot may serve another block now */
        else
            fp_say("IPC: cannot mark the freed block 0x%llx in the registry",
                   (unsigned long long)addr);
    }
    pthread_mutex_unlock(&reg.lock);
}

/* ---- export ------------------------------------------------------------------ */

bool fp_ipc_exportable(bool vmm, bool at_segment_start)
{
    return fp_shim.conf.ipc_export == FP_IPC_FRAGPOOL || (!vmm && at_segment_start);
}

static CUresult refuse(CUdeviceptr p, const fp_found *f)
{
    char own[160] = "";
    if (f->requested >= FP_MIB)
        snprintf(own, sizeof own,
                 ", or own_segment_mb:%zu (or less) so that allocations this "
                 "large get segments of their own",
                 f->requested / FP_MIB);
    bump(&fp_state_ipc_tallies.refused);
    fp_say("cuIpcGetMemHandle(0x%llx): this allocation starts %llu B into a fragpool segment, "
           "and the driver's handle would give the process that opens it the segment's start; "
           "returning CUDA_ERROR_NOT_SUPPORTED (ipc_export:refuse). Leave ipc_export at "
           "fragpool if every process that opens it runs under fragpool%s",
           (unsigned long long)p, (unsigned long long)(f->addr - f->segment), own);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* The driver has no legacy IPC handle for VMM memory (it says
 * CUDA_ERROR_INVALID_VALUE); own_segment_mb gives classic memory. */
static CUresult refuse_vmm(CUdeviceptr p, const char *why)
{
    bump(&fp_state_ipc_tallies.refused);
    fp_say("cuIpcGetMemHandle(0x%llx): this allocation lies in a fragpool virtual-memory "
           "range, which has no driver IPC handle, and %s; "
           "returning CUDA_ERROR_NOT_SUPPORTED. Set own_segment_mb:N so that allocations of N "
           "MiB or more get classic memory of their own, which any process can open",
           (unsigned long long)p, why);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult fragpool_handle(CUdeviceptr p, reg_slot want, CUipcMemHandle *out)
{
    int err = reg_export(want, out);
    if (err) {
        fp_say("cuIpcGetMemHandle(0x%llx): no fragpool handle (%s%s); returning "
               "CUDA_ERROR_NOT_SUPPORTED",
               (unsigned long long)p, strerror(err),
               err == ENOSPC ? ": 65536 exported blocks are live at once" : "");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    bump(&fp_state_ipc_tallies.exports);
    bump(&fp_state_ipc_tallies.exports_fragpool);
    return CUDA_SUCCESS;
}

static CUresult export_classic(CUipcMemHandle *out, CUdeviceptr p, const fp_found *f)
{
    CUipcMemHandle real;
    CUresult r = fp_real.cuIpcGetMemHandle(&real, f->segment);
    if (r != CUDA_SUCCESS)
        return r;
    if (f->addr == f->segment) { /* the handle maps this very start */
        *out = real;
        bump(&fp_state_ipc_tallies.exports);
        return CUDA_SUCCESS;
    }
    if (fp_shim.conf.ipc_export != FP_IPC_FRAGPOOL)
        return refuse(p, f);
    reg_slot want = {.addr = f->addr,
                     .offset = f->addr - f->segment,
                     .size = f->requested,
                     .kind = KIND_CLASSIC,
                     .seq = f->seq,
                     .real = real};
    return fragpool_handle(p, want, out);
}

static CUresult export_vmm(CUipcMemHandle *out, CUdeviceptr p, const fp_found *f, fp_ctx_pool *d)
{
    if (fp_shim.conf.ipc_export != FP_IPC_FRAGPOOL)
        return refuse_vmm(p, "ipc_export is refuse");
    if (!fp_pages_shareable(d->vmm))
        return refuse_vmm(p, "this driver offers no POSIX file descriptor handles for it");
    reg_slot want = {.addr = f->addr,
                     .offset = f->addr - f->segment,
                     .size = f->requested,
                     .kind = KIND_VMM,
                     .seq = f->seq};
    return fragpool_handle(p, want, out);
}

/* A handle for the allocation that holds dptr, which d's segments hold:
 * natively an interior pointer exports its allocation. */
static CUresult export_pooled(fp_ctx_pool *d, CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    fp_found f;
    int err = fp_pool_find_block(d->pool, dptr, &f);
    if (err == ESRCH) /* the segment went away meanwhile: the driver decides */
        return fp_real.cuIpcGetMemHandle(pHandle, dptr);
    if (err) {
        fp_say("cuIpcGetMemHandle(0x%llx): not inside a live allocation of fragpool's (freed "
               "or never allocated); returning CUDA_ERROR_INVALID_VALUE",
               (unsigned long long)dptr);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return f.vmm ? export_vmm(pHandle, dptr, &f, d) : export_classic(pHandle, dptr, &f);
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (!fp_shim_init() || !fp_real.cuIpcGetMemHandle)
        return fp_real.cuIpcGetMemHandle ? fp_real.cuIpcGetMemHandle(pHandle, dptr)
                                         : CUDA_ERROR_NOT_INITIALIZED;
    fp_ctx_pool *d = pHandle ? fp_pools_owner(dptr) : NULL;
    if (!d) {
        CUresult r = fp_real.cuIpcGetMemHandle(pHandle, dptr);
        if (r == CUDA_SUCCESS)
            bump(&fp_state_ipc_tallies.exports);
        return r;
    }
    CUresult r = export_pooled(d, pHandle, dptr);
    fp_pools_put(d);
    return r;
}

/* ---- import ------------------------------------------------------------------ */

typedef struct opened { /* a pointer handed out for a fragpool handle */
    CUdeviceptr ptr;    /* what the program got                       */
    CUdeviceptr base;   /* classic: what the driver's open returned   */
    size_t size;        /* the exported block's bytes                 */
    bool vmm;           /* map is ours: the last close unmaps it      */
    fp_ipcv_mapping map;
    uint32_t pid, slot;     /* the handle, so that opening it again gives */
    uint64_t nonce, serial; /* the same pointer (as the driver does)      */
    int refs;
    struct opened *next;
} opened;

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static opened *open_list;
static atomic_bool open_any; /* a fragpool handle was ever opened          */

/* The registry that w names, opened read-only; or -1 with errno set.  A
 * handle's bytes are the sender's to choose, so what they name is
 * checked before it is opened and again after: only a registry memfd of
 * fragpool's (by its name, sealed: regular, of the registry's length) is
 * read, and nothing is opened that could block (a FIFO, a device). */
static int open_registry(const wire *w)
{
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", (unsigned)w->pid, (int)w->fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return -1;
    target[n] = '\0';
    if (strncmp(target, "/memfd:" REG_NAME " ", strlen("/memfd:" REG_NAME " ")) != 0) {
        errno = ENOTSUP;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != REG_LEN ||
                    fcntl(fd, F_GET_SEALS) != REG_SEALS)) {
        close(fd);
        errno = ENOTSUP;
        return -1;
    }
    return fd;
}

/* The exporter's slot for w, checked; 0, or an errno. */
static int read_slot(const wire *w, reg_slot *s)
{
    int fd = open_registry(w);
    if (fd < 0)
        return errno == ENOENT ? ESRCH : errno;
    reg_head h;
    int err = 0;
    if (pread(fd, &h, sizeof h, 0) != sizeof h || memcmp(h.magic, REG_MAGIC, 8) != 0 ||
        h.nonce != w->nonce || w->slot >= REG_SLOTS ||
        pread(fd, s, sizeof *s, slot_pos(w->slot)) != sizeof *s)
        err = ESRCH;
    close(fd);
    if (!err && (s->serial != w->serial || s->offset != w->offset || s->check != w->check ||
                 slot_check(s, h.nonce) != s->check))
        err = ESTALE;
    return err;
}

/* Counts one more open of o's pointer, entering o when it is new. */
static bool remember(const opened *o)
{
    pthread_mutex_lock(&open_lock);
    opened *e = open_list;
    while (e && e->ptr != o->ptr)
        e = e->next;
    if (!e && (e = malloc(sizeof *e)) != NULL) {
        *e = *o;
        e->refs = 0;
        e->next = open_list;
        open_list = e;
    }
    if (e)
        e->refs++;
    pthread_mutex_unlock(&open_lock);
    return e != NULL;
}

/* The pointer of an open of w's virtual-memory block, counted once more;
 * 0 if this process has none. */
static CUdeviceptr reopen(const wire *w)
{
    pthread_mutex_lock(&open_lock);
    opened *e = open_list;
    while (e && !(e->vmm && e->pid == w->pid && e->nonce == w->nonce && e->slot == w->slot &&
                  e->serial == w->serial))
        e = e->next;
    if (e)
        e->refs++;
    pthread_mutex_unlock(&open_lock);
    return e ? e->ptr : 0;
}

/* The entry of ptr, one reference fewer, copied to *out; false if ptr
 * was not opened through a fragpool handle.  *last: that was its last. */
static bool forget(CUdeviceptr ptr, opened *out, bool *last)
{
    pthread_mutex_lock(&open_lock);
    opened **pp = &open_list, *o;
    while ((o = *pp) && o->ptr != ptr)
        pp = &o->next;
    if (o) {
        *out = *o;
        *last = --o->refs == 0;
        if (*last) {
            *pp = o->next;
            free(o);
        }
    }
    pthread_mutex_unlock(&open_lock);
    return o != NULL;
}

bool fp_ipc_opened_range(uint64_t p, uint64_t *base, size_t *size)
{
    if (!atomic_load_explicit(&open_any, memory_order_relaxed))
        return false;
    pthread_mutex_lock(&open_lock);
    opened *o = open_list;
    while (o && !(p >= o->ptr && p - o->ptr < o->size))
        o = o->next;
    if (o) {
        *base = o->ptr;
        *size = o->size;
    }
    pthread_mutex_unlock(&open_lock);
    return o != NULL;
}

static CUresult unusable(const wire *w, int err)
{
    fp_say("cuIpcOpenMemHandle: the fragpool handle of process %u (a block of %llu B at +%llu B "
           "in its segment) cannot be used: %s; returning CUDA_ERROR_INVALID_VALUE",
           (unsigned)w->pid, (unsigned long long)w->size, (unsigned long long)w->offset,
           err == ESTALE      ? "the block was freed or exported anew"
           : err == ESRCH     ? "that process has no fragpool registry or channel (it ended?)"
           : err == ENOTSUP   ? "it names no IPC registry of fragpool's (forged or damaged)"
           : err == EPERM     ? "that process runs as another user"
           : err == EACCES    ? "its channel is served by another process (forged?)"
           : err == ETIMEDOUT ? "that process did not answer in time"
           : err == EPROTO    ? "that process's answer was malformed"
           : err == EINVAL    ? "no pointer to return it in"
                              : strerror(err));
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult opened_ok(CUdeviceptr *pdptr, const opened *o)
{
    if (!remember(o)) { /* no memory to remember it: undo the open */
        if (o->vmm)
            fp_ipcv_close(&o->map);
        else
            fp_real.cuIpcCloseMemHandle(o->base);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_store(&open_any, true);
    *pdptr = o->ptr;
    bump(&fp_state_ipc_tallies.opens);
    bump(&fp_state_ipc_tallies.opens_fragpool);
    return CUDA_SUCCESS;
}

static CUresult open_classic(fp_PFN_cuIpcOpenMemHandle_v2 real, CUdeviceptr *pdptr, const wire *w,
                             unsigned int flags)
{
    reg_slot s;
    int err = read_slot(w, &s);
    if (err)
        return unusable(w, err);
    CUdeviceptr base = 0;
    CUresult r = real(&base, s.real, flags);
    if (r != CUDA_SUCCESS)
        return r;
    opened o = {.ptr = base + w->offset, .base = base, .size = w->size};
    return opened_ok(pdptr, &o);
}

static CUresult open_vmm(CUdeviceptr *pdptr, const wire *w, unsigned int flags)
{
    if (w->pid == (uint32_t)getpid()) /* as the driver refuses a process's own handle */
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr again = reopen(w);
    if (again) {
        *pdptr = again;
        bump(&fp_state_ipc_tallies.opens);
        bump(&fp_state_ipc_tallies.opens_fragpool);
        return CUDA_SUCCESS;
    }
    CUdevice dev;
    CUresult r = fp_real.cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    opened o = {
        .vmm = true, .pid = w->pid, .slot = w->slot, .nonce = w->nonce, .serial = w->serial};
    fp_ipcv_req q = {.slot = w->slot, .serial = w->serial, .check = w->check};
    int err = fp_ipcv_open(w->pid, w->nonce, &q, dev, &o.map, &r);
    if (err == EIO)
        return r;
    if (err)
        return unusable(w, err);
    o.ptr = o.map.ptr;
    o.base = o.map.base;
    o.size = o.map.size;
    return opened_ok(pdptr, &o);
}

static CUresult open_fragpool(fp_PFN_cuIpcOpenMemHandle_v2 real, CUdeviceptr *pdptr,
                              const CUipcMemHandle *h, unsigned int flags)
{
    wire w;
    memcpy(&w, h->reserved, sizeof w);
    if (!pdptr)
        return unusable(&w, EINVAL);
    return w.version == KIND_VMM ? open_vmm(pdptr, &w, flags)
                                 : open_classic(real, pdptr, &w, flags);
}

static CUresult ipc_open(fp_PFN_cuIpcOpenMemHandle_v2 real, CUdeviceptr *pdptr,
                         CUipcMemHandle handle, unsigned int flags)
{
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (is_fragpool_handle(&handle))
        return open_fragpool(real, pdptr, &handle, flags);
    CUresult r = real(pdptr, handle, flags);
    if (r == CUDA_SUCCESS)
        bump(&fp_state_ipc_tallies.opens);
    return r;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    fp_shim_init();
    return ipc_open(fp_real.cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    fp_shim_init();
    return ipc_open(fp_real.cuIpcOpenMemHandle, pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    if (!fp_shim_init() || !fp_real.cuIpcCloseMemHandle)
        return fp_real.cuIpcCloseMemHandle ? fp_real.cuIpcCloseMemHandle(dptr)
                                           : CUDA_ERROR_NOT_INITIALIZED;
    opened o;
    bool last = false, ours = forget(dptr, &o, &last);
    CUresult r = !ours   ? fp_real.cuIpcCloseMemHandle(dptr)
                 : o.vmm ? (last ? fp_ipcv_close(&o.map) : CUDA_SUCCESS)
                         : fp_real.cuIpcCloseMemHandle(o.base); /* the driver counts opens too */
    if (r == CUDA_SUCCESS)
        bump(&fp_state_ipc_tallies.closes);
    return r;
}

/* ---- fork ------------------------------------------------------------------- */

static void registry_prepare(void)
{
    pthread_mutex_lock(&reg.lock);
}

/* A child makes a registry (reg_open_locked) and a channel of its own. */
static void registry_after(bool child)
{
    fp_mutex_fork_after(&reg.lock, child);
}

static void opens_prepare(void)
{
    pthread_mutex_lock(&open_lock);
}

static void opens_after(bool child)
{
    fp_mutex_fork_after(&open_lock, child);
}

/* Before main: the rows of shim_life.c's ranked list these locks take. */
__attribute__((constructor)) static void rank_locks(void)
{
    fp_life_rank_lock("IPC registry", registry_prepare, registry_after);
    fp_life_rank_lock("IPC opens", opens_prepare, opens_after);
}
