/* simdev/sim_ctx.c: contexts as data - their lookup, the calling thread's
 * current-context stack, and the context calls that only read or set them.
 *
 * Each device has a primary context (retain-counted, usable while
 * retained) and any number of created contexts.  The current context is
 * per thread: a thread-local stack.  Context structures are never freed,
 * so a stale handle is always recognised as destroyed.  The calls that end
 * a context's work (release, reset, destroy, synchronize) are in
 * sim_core.c; they use sim_ctx_known and sim_ctx_forget_current.
 */
#include "sim.h"

#include <stdlib.h>

static _Thread_local sim_ctx *tl_stack[SIM_CTX_STACK_MAX]; /* current ctxs */
static _Thread_local int tl_depth;                         /* entries used */

/* ---- lookup ------------------------------------------------------------------ */

/* A handle we issued and that was not destroyed (lock held). */
bool sim_ctx_known(const sim_ctx *c)
{
    for (int d = 0; d < g_sim.ndev; d++)
        if (c == &g_sim.dev[d].primary)
            return true;
    for (const sim_ctx *p = g_sim.ctxs; p != NULL; p = p->next)
        if (p == c)
            return !p->destroyed;
    return false;
}

static bool ctx_usable(const sim_ctx *c)
{
    return c != NULL && sim_ctx_known(c) && c->active;
}

CUresult sim_ctx_current_locked(sim_ctx **out)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = tl_depth > 0 ? tl_stack[tl_depth - 1] : NULL;
    if (!ctx_usable(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_current(sim_ctx **out)
{
    sim_lock();
    CUresult rc = sim_ctx_current_locked(out);
    sim_unlock();
    return rc;
}

/* Usable context from a handle; NULL means the current one. */
CUresult sim_ctx_from_handle(CUcontext h, sim_ctx **out)
{
    if (h == NULL)
        return sim_ctx_current_locked(out);
    if (!ctx_usable((sim_ctx *)h))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = (sim_ctx *)h;
    return CUDA_SUCCESS;
}

/* cuCtxDestroy_v2 of c succeeded: c leaves the top of this thread's stack. */
void sim_ctx_forget_current(const sim_ctx *c)
{
    if (tl_depth > 0 && tl_stack[tl_depth - 1] == c)
        tl_depth--;
}

static bool ctx_flags_ok(unsigned flags)
{
    unsigned sched = flags & CU_CTX_SCHED_MASK;
    return (flags & ~(unsigned)CU_CTX_FLAGS_MASK) == 0 &&
           (sched == 0 || sched == 1 || sched == 2 || sched == 4);
}

/* ---- primary contexts ----------------------------------------------------------- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS && pctx == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_ctx *p = &g_sim.dev[dev].primary;
    p->retain++;
    p->active = true;
    *pctx = (CUcontext)p;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS && !ctx_flags_ok(flags))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    g_sim.dev[dev].primary.flags = flags;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS && (flags == NULL || active == NULL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    *flags = g_sim.dev[dev].primary.flags;
    *active = g_sim.dev[dev].primary.active ? 1 : 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* ---- created contexts and the per-thread stack -------------------------- */

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS && (pctx == NULL || !ctx_flags_ok(flags)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && tl_depth >= SIM_CTX_STACK_MAX)
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = rc == CUDA_SUCCESS ? calloc(1, sizeof *c) : NULL;
    if (rc == CUDA_SUCCESS && c == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS)
        return rc;
    c->dev = dev;
    c->flags = flags;
    c->active = true;
    sim_lock();
    c->next = g_sim.ctxs;
    g_sim.ctxs = c;
    sim_unlock();
    tl_stack[tl_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx == NULL) {
        if (tl_depth > 0)
            tl_depth--;
        return CUDA_SUCCESS;
    }
    sim_lock();
    bool known = sim_ctx_known((sim_ctx *)ctx);
    sim_unlock();
    if (!known)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tl_depth == 0)
        tl_depth = 1;
    tl_stack[tl_depth - 1] = (sim_ctx *)ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && pctx == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pctx = tl_depth > 0 ? (CUcontext)tl_stack[tl_depth - 1] : NULL;
    return rc;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    bool known = sim_ctx_known((sim_ctx *)ctx);
    sim_unlock();
    if (!known)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tl_depth >= SIM_CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    tl_stack[tl_depth++] = (sim_ctx *)ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (tl_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx *c = tl_stack[--tl_depth];
    if (pctx != NULL)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && device == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = NULL;
    sim_lock();
    rc = sim_ctx_from_handle(ctx, &c);
    sim_unlock();
    if (rc == CUDA_SUCCESS)
        *device = c->dev;
    return rc;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    sim_ctx *c = NULL;
    CUresult rc = sim_ctx_current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (leastPriority != NULL)
        *leastPriority = SIM_PRIORITY_LEAST;
    if (greatestPriority != NULL)
        *greatestPriority = SIM_PRIORITY_GREATEST;
    return CUDA_SUCCESS;
}
