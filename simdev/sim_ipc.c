/* simdev/sim_ipc.c: legacy IPC - cuIpcGetMemHandle, cuIpcOpenMemHandle(_v2)
 * and cuIpcCloseMemHandle - between processes on one machine.
 *
 * Device memory is host memory, so sharing it means sharing pages.  Each
 * process has one "device file" (sim_devfile.c) in which an allocation's
 * pages live at the file offset equal to its address.  An allocation is
 * moved there the first time it is exported (the device is synchronized,
 * the bytes copied, the file mapped over the same address), so nothing
 * changes for memory that is never exported.  The handle names the
 * exporter (pid, its file's descriptor, a nonce written in the file) and
 * the allocation (address, pages, id); the importer opens /proc/PID/fd/FD
 * and maps the same pages.  The file's first pages hold the nonce and a
 * table of live allocation ids, so a handle of a freed allocation, or of
 * another process that reused the pid, is refused.
 *
 * Behaviour kept from the real driver: the handle describes the whole
 * allocation that holds the pointer, and opening it gives that
 * allocation's start; only cuMemAlloc memory can be exported; a process
 * cannot open its own handles; opening a handle twice in one process gives
 * the same pointer and needs two closes.  Chosen where the documentation
 * is silent: a bad, stale or foreign handle is CUDA_ERROR_INVALID_VALUE,
 * opening an own handle CUDA_ERROR_INVALID_CONTEXT; flags may be 0 or
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
 *
 * Locks: the export holds g_sim.lock (the device is idle while its pages
 * move) and then the mem lock; the list of opened handles has a leaf lock
 * of its own.
 */
#include "sim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define WIRE_MAGIC "fpsimIPC"

/* The handle's bytes (64). */
typedef struct wire {
    char magic[8];
    uint32_t pid;
    int32_t fd;
    uint64_t nonce;
    uint64_t base; /* address in the exporter = file offset */
    uint64_t span; /* bytes mapped                          */
    uint64_t size; /* the allocation's size                 */
    uint64_t id;   /* the exporter's allocation id          */
    uint32_t dev;
    uint32_t pad;
} wire;
_Static_assert(sizeof(wire) == CU_IPC_HANDLE_SIZE, "IPC handle layout");

/* ---- export -------------------------------------------------------------------- */

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && pHandle == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = NULL;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc a;
    if (sim_mem_find(dptr, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_device_sync(a.dev); /* idle while its pages move */
    rc = sim_mem_share(dptr, &a);
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    int fd = -1;
    uint64_t nonce = 0;
    sim_devfile_identity(&fd, &nonce);
    wire w = {.pid = (uint32_t)getpid(),
              .fd = fd,
              .nonce = nonce,
              .base = a.base,
              .span = a.span,
              .size = a.size,
              .id = a.id,
              .dev = (uint32_t)a.dev};
    memcpy(w.magic, WIRE_MAGIC, 8);
    memcpy(pHandle->reserved, &w, sizeof w);
    return CUDA_SUCCESS;
}

/* ---- import --------------------------------------------------------------------- */

typedef struct opened {
    uint32_t pid;
    uint64_t nonce, id;
    CUdeviceptr ptr;
    size_t span;
    int refs;
    struct opened *next;
} opened;

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static opened *g_opened;

static opened *find_opened(const wire *w)
{
    for (opened *o = g_opened; o != NULL; o = o->next)
        if (o->pid == w->pid && o->nonce == w->nonce && o->id == w->id)
            return o;
    return NULL;
}

/* Maps the exporter's pages and registers them (open lock held). */
static CUresult map_new(const wire *w, sim_ctx *c, CUdeviceptr *out)
{
    int fd = sim_devfile_open(w->pid, w->fd, w->nonce, w->id);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, w->span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)w->base);
    close(fd);
    opened *o = p != MAP_FAILED ? calloc(1, sizeof *o) : NULL;
    sim_alloc req = {.base = (CUdeviceptr)(uintptr_t)p,
                     .size = w->size,
                     .span = w->span,
                     .dev = c->dev,
                     .ctx = c,
                     .kind = SIM_MEM_IPC};
    if (o == NULL || sim_mem_add_import(&req) != CUDA_SUCCESS) {
        if (p != MAP_FAILED)
            munmap(p, w->span);
        free(o);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *o = (opened){.pid = w->pid,
                  .nonce = w->nonce,
                  .id = w->id,
                  .ptr = req.base,
                  .span = w->span,
                  .refs = 1,
                  .next = g_opened};
    g_opened = o;
    *out = req.base;
    return CUDA_SUCCESS;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (pdptr == NULL || (Flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = NULL;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    wire w;
    memcpy(&w, handle.reserved, sizeof w);
    if (memcmp(w.magic, WIRE_MAGIC, 8) != 0 || w.span == 0 || w.span % 4096)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (uint32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&g_open_lock);
    opened *o = find_opened(&w);
    if (o != NULL) {
        o->refs++;
        *pdptr = o->ptr;
    } else {
        rc = map_new(&w, c, pdptr);
    }
    pthread_mutex_unlock(&g_open_lock);
    return rc;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_open_lock);
    opened **pp = &g_opened;
    while (*pp != NULL && (*pp)->ptr != dptr)
        pp = &(*pp)->next;
    opened *o = *pp;
    if (o != NULL && --o->refs == 0)
        *pp = o->next;
    pthread_mutex_unlock(&g_open_lock);
    if (o == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (o->refs > 0)
        return CUDA_SUCCESS;
    sim_alloc a;
    if (sim_mem_remove_import(dptr, &a) == CUDA_SUCCESS)
        munmap((void *)(uintptr_t)dptr, a.span);
    free(o);
    return CUDA_SUCCESS;
}
