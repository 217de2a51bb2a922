/* shim_ipc.c - legacy CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle) on memory that fragpool served.
 *
 * The driver's handle describes a whole driver allocation, and the process
 * that opens it gets that allocation's start.  A pool block that starts
 * its segment is therefore exported as it is: every receiver, with or
 * without fragpool, gets the right bytes.  A block inside its segment
 * cannot be described by the driver's handle at all:
 *   - ipc_export:refuse (the default): the export fails with
 *     CUDA_ERROR_NOT_SUPPORTED and one line saying what to set;
 *   - ipc_export:fragpool: the export gives a fragpool handle, a key into
 *     a registry that this process keeps in a memfd (the segment's real
 *     handle and the block's offset).  A receiver under fragpool reads it
 *     through /proc/PID/fd/FD, opens the real handle and adds the offset;
 *     a receiver without fragpool hands the driver bytes it never made.
 *     The receiver reads only what is a sealed registry memfd of
 *     fragpool's, never blocking: a forged handle gets the driver's
 *     CUDA_ERROR_INVALID_VALUE and one line.
 * own_segment_mb:N sends allocations of N MiB or more to the driver, each a
 * segment of its own, so that their handles need nothing of the above.
 * docs/shim.md ("IPC") gives the reasons and the limits.
 *
 * Invariants: a registry slot is written whole (pwrite) and carries a
 * check over its contents and the handle's, so a reader never uses a torn
 * or reused slot; the slot of a block is killed when the block is freed;
 * the receiver remembers which pointers it opened at an offset, so that
 * cuIpcCloseMemHandle closes the real mapping.  Internal functions return
 * 0 or an errno; the cu* entry points return the driver's codes.
 */
#include "shim_ipc.h"
#include "fp_hmap.h"
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_state.h"
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

#define WIRE_MAGIC "fragpool"      /* the first 8 bytes of a fragpool handle */
#define REG_MAGIC "fpipcreg"       /* the registry file's first 8 bytes      */
#define REG_SLOTS 65536u           /* distinct block addresses exported      */
#define REG_HEAD 4096              /* slots start here in the file           */
#define REG_NAME "fragpool-ipc"    /* the registry memfd's name              */
#define REG_LEN (REG_HEAD + (off_t)REG_SLOTS * (off_t)sizeof(reg_slot))
#define REG_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) /* its length is fixed */

static void bump(atomic_ullong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

bool fp_ipc_own_segment(size_t bytes)
{
    size_t n = fp_shim.conf.own_segment;
    if (!n || bytes < n)
        return false;
    bump(&fp_ipc_tallies.own);
    return true;
}

/* ---- the handle and the registry's layout --------------------------------- */

typedef struct wire {          /* a fragpool handle: 64 bytes               */
    char magic[8];
    uint32_t pid;              /* the exporter                              */
    int32_t fd;                /* its registry memfd                        */
    uint64_t nonce;            /* the registry's, against a reused pid      */
    uint32_t slot, version;
    uint64_t serial;           /* the slot's contents when exported         */
    uint64_t offset;           /* the block's offset in its segment         */
    uint64_t size;             /* the block's size, for messages            */
    uint64_t check;            /* over the slot's contents                  */
} wire;
_Static_assert(sizeof(wire) == CU_IPC_HANDLE_SIZE, "a fragpool handle is 64 bytes");

typedef struct reg_head {
    char magic[8];
    uint64_t nonce;
} reg_head;

typedef struct reg_slot {      /* one exported block: 128 bytes             */
    uint64_t serial;           /* 0: empty or freed                         */
    uint64_t addr, offset, size;
    uint64_t check;
    uint64_t spare[3];
    CUipcMemHandle real;       /* the segment's own handle                  */
} reg_slot;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t slot_check(const reg_slot *s, uint64_t nonce)
{
    uint64_t h = mix(nonce, s->serial);
    h = mix(mix(mix(h, s->addr), s->offset), s->size);
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
    int fd;                    /* -1 until the first fragpool export        */
    pid_t pid;                 /* the process that made fd                  */
    uint64_t nonce, serial;
    fp_hmap index;             /* block address -> slot + 1, live exports   */
    uint32_t *free_slots;      /* slots given back (a stack), REG_SLOTS     */
    uint32_t nfree, next;      /* its depth; the first slot never used      */
    atomic_bool any;           /* a fragpool handle was ever given          */
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
                 ? memfd_create(REG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
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
        got->addr == want->addr && got->offset == want->offset &&
        memcmp(&got->real, &want->real, sizeof got->real) == 0)
        return 0;
    *got = *want;
    got->serial = ++reg.serial;
    got->check = slot_check(got, reg.nonce);
    return pwrite(reg.fd, got, sizeof *got, slot_pos(i)) == sizeof *got ? 0 : EIO;
}

/* A fragpool handle for the block at seg + offset; 0 or an errno. */
static int reg_export(uint64_t seg, uint64_t offset, size_t size, const CUipcMemHandle *real,
                      CUipcMemHandle *out)
{
    reg_slot want = {.addr = seg + offset, .offset = offset, .size = size, .real = *real}, got;
    pthread_mutex_lock(&reg.lock);
    int err = reg_open_locked();
    long i = err ? -1 : reg_find_locked(want.addr);
    bool fresh = i < 0;
    if (!err && fresh)
        i = reg_take_locked(want.addr, &err);
    if (!err && (err = reg_put_locked((uint32_t)i, fresh, &want, &got)) != 0)
        reg_give_back_locked(want.addr);
    wire w = {.pid = (uint32_t)getpid(), .fd = reg.fd, .nonce = reg.nonce,
              .slot = (uint32_t)i, .version = 1, .serial = got.serial, .offset = offset,
              .size = size, .check = got.check};
    pthread_mutex_unlock(&reg.lock);
    if (err)
        return err;
    atomic_store(&reg.any, true);
    memcpy(w.magic, WIRE_MAGIC, 8);
    memcpy(out->reserved, &w, sizeof w);
    return 0;
}

void fp_ipc_block_freed(uint64_t addr)
{
    if (!atomic_load_explicit(&reg.any, memory_order_relaxed) || !addr)
        return;
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

typedef struct where {
    uint64_t p;                /* the pointer asked about                   */
    uint64_t seg, seg_size;    /* its segment                               */
    uint64_t block;            /* the block that holds it                   */
    size_t size;               /* that block's size                         */
    bool found, live;
} where;

static void find_block(void *ud, uint64_t addr, size_t size, int small,
                       const fp_block_info *b, size_t n)
{
    (void)small;
    where *w = ud;
    if (w->found || w->p < addr || w->p - addr >= size)
        return;
    w->found = true;
    w->seg = addr;
    w->seg_size = size;
    for (size_t i = 0; i < n; i++)
        if (w->p >= b[i].addr && w->p - b[i].addr < b[i].size) {
            w->block = b[i].addr;
            w->size = b[i].size;
            w->live = b[i].state == 1;
        }
}

static CUresult refuse(CUdeviceptr p, const where *w)
{
    char own[160] = "";
    if (w->size >= FP_MIB)
        snprintf(own, sizeof own, ", or own_segment_mb:%zu (or less) so that allocations this "
                 "large get segments of their own", w->size / FP_MIB);
    bump(&fp_ipc_tallies.refused);
    fp_say("cuIpcGetMemHandle(0x%llx): this allocation starts %llu B into a fragpool segment, "
           "and the driver's handle would give the process that opens it the segment's start; "
           "returning CUDA_ERROR_NOT_SUPPORTED. Set FRAGPOOL_CONF=ipc_export:fragpool if every "
           "process that opens it runs under fragpool and counts offsets from this pointer "
           "(PyTorch), not from cuMemGetAddressRange (UCX)%s",
           (unsigned long long)p, (unsigned long long)(w->block - w->seg), own);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* The driver has no legacy IPC handle for VMM memory (it says
 * CUDA_ERROR_NOT_SUPPORTED too); own_segment_mb gives classic memory. */
static CUresult refuse_vmm(CUdeviceptr p)
{
    bump(&fp_ipc_tallies.refused);
    fp_say("cuIpcGetMemHandle(0x%llx): this allocation lies in a fragpool virtual-memory "
           "range (expandable_segments:True), which has no IPC handle; returning "
           "CUDA_ERROR_NOT_SUPPORTED. Set own_segment_mb:N so that allocations of N MiB or "
           "more get classic memory of their own, which can be exported",
           (unsigned long long)p);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult export_block(CUipcMemHandle *out, CUdeviceptr p, const where *w)
{
    CUipcMemHandle real;
    CUresult r = fp_real.cuIpcGetMemHandle(&real, w->seg);
    if (r != CUDA_SUCCESS)
        return r;
    if (p == w->seg || w->block == w->seg) { /* the handle maps this very start */
        *out = real;
        bump(&fp_ipc_tallies.exports);
        return CUDA_SUCCESS;
    }
    if (fp_shim.conf.ipc_export != FP_IPC_FRAGPOOL)
        return refuse(p, w);
    int err = reg_export(w->seg, w->block - w->seg, w->size, &real, out);
    if (err) {
        fp_say("cuIpcGetMemHandle(0x%llx): no fragpool handle (%s%s); returning "
               "CUDA_ERROR_NOT_SUPPORTED", (unsigned long long)p, strerror(err),
               err == ENOSPC ? ": 65536 exported blocks are live at once" : "");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    bump(&fp_ipc_tallies.exports);
    bump(&fp_ipc_tallies.exports_fragpool);
    return CUDA_SUCCESS;
}

/* A handle for dptr, which d's segments hold. */
static CUresult export_pooled(fp_ctx_pool *d, CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (fp_vmm_owns(d->vmm, dptr))
        return refuse_vmm(dptr);
    where w = {.p = dptr};
    fp_pool_walk(d->pool, find_block, &w);
    if (!w.found)  /* the segment went away meanwhile: the driver decides */
        return fp_real.cuIpcGetMemHandle(pHandle, dptr);
    if (!w.live && dptr != w.seg) {
        fp_say("cuIpcGetMemHandle(0x%llx): not inside a live allocation of fragpool's (freed "
               "or never allocated); returning CUDA_ERROR_INVALID_VALUE",
               (unsigned long long)dptr);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return export_block(pHandle, dptr, &w);
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
            bump(&fp_ipc_tallies.exports);
        return r;
    }
    CUresult r = export_pooled(d, pHandle, dptr);
    fp_pools_put(d);
    return r;
}

/* ---- import ------------------------------------------------------------------ */

typedef struct opened {        /* a pointer handed out at an offset         */
    CUdeviceptr ptr, base;     /* base: what the driver's open returned     */
    int refs;
    struct opened *next;
} opened;

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static opened *open_list;

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
    if (!err && (s->serial != w->serial || s->offset != w->offset ||
                 s->check != w->check || slot_check(s, h.nonce) != s->check))
        err = ESTALE;
    return err;
}

static void remember(CUdeviceptr ptr, CUdeviceptr base)
{
    pthread_mutex_lock(&open_lock);
    opened *o = open_list;
    while (o && o->ptr != ptr)
        o = o->next;
    if (!o && (o = calloc(1, sizeof *o)) != NULL) {
        *o = (opened){.ptr = ptr, .base = base, .next = open_list};
        open_list = o;
    }
    if (o)
        o->refs++;
    pthread_mutex_unlock(&open_lock);
}

/* The driver's pointer behind ptr (and one reference fewer), or ptr. */
static CUdeviceptr forget(CUdeviceptr ptr)
{
    pthread_mutex_lock(&open_lock);
    opened **pp = &open_list, *o;
    while ((o = *pp) && o->ptr != ptr)
        pp = &o->next;
    CUdeviceptr base = o ? o->base : ptr;
    if (o && --o->refs == 0) {
        *pp = o->next;
        free(o);
    }
    pthread_mutex_unlock(&open_lock);
    return base;
}

static CUresult open_fragpool(fp_PFN_cuIpcOpenMemHandle_v2 real, CUdeviceptr *pdptr,
                              const CUipcMemHandle *h, unsigned int flags)
{
    wire w;
    reg_slot s;
    memcpy(&w, h->reserved, sizeof w);
    int err = pdptr ? read_slot(&w, &s) : EINVAL;
    if (err) {
        fp_say("cuIpcOpenMemHandle: the fragpool handle of process %u (a block at +%llu B "
               "in its segment) cannot be used: %s; returning CUDA_ERROR_INVALID_VALUE",
               (unsigned)w.pid, (unsigned long long)w.offset,
               err == ESTALE ? "the block was freed or exported anew"
               : err == ESRCH ? "that process's registry is not there (it ended?)"
               : err == ENOTSUP ? "it names no IPC registry of fragpool's (forged or damaged)"
               : err == EINVAL ? "no pointer to return it in" : strerror(err));
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUdeviceptr base = 0;
    CUresult r = real(&base, s.real, flags);
    if (r != CUDA_SUCCESS)
        return r;
    *pdptr = base + w.offset;
    remember(*pdptr, base);
    bump(&fp_ipc_tallies.opens);
    bump(&fp_ipc_tallies.opens_fragpool);
    return CUDA_SUCCESS;
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
        bump(&fp_ipc_tallies.opens);
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
    CUdeviceptr base = forget(dptr);
    CUresult r = fp_real.cuIpcCloseMemHandle(base);
    if (r == CUDA_SUCCESS)
        bump(&fp_ipc_tallies.closes);
    return r;
}

/* ---- fork ------------------------------------------------------------------- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&reg.lock);
    pthread_mutex_lock(&open_lock);
}

static void fork_after(bool child)
{
    /* a child makes a registry of its own (reg_open_locked) */
    fp_mutex_fork_after(&open_lock, child);
    fp_mutex_fork_after(&reg.lock, child);
}

/* Before main: the row of shim_life.c's ranked list these locks take. */
__attribute__((constructor)) static void rank_locks(void)
{
    fp_life_rank_lock("IPC registry and opens", fork_prepare, fork_after);
}
