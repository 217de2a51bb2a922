/* shim_real.c - finds the driver's own functions.
 *
 * glibc's dlsym comes from dlvsym(RTLD_NEXT, "dlsym", version), because the
 * shim exports a dlsym of its own.  The driver's functions come from
 * libcuda.so.1 through that real dlsym, so a lookup on the driver's handle
 * never sees fragpool's exports.
 *
 * Invariant: fp_real is written once, inside fp_real_resolve (called under
 * pthread_once), before any wrapper reads it.
 */
#include "shim_real.h"
#include <stdbool.h>
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

fp_real_table fp_real;

typedef fp_dlsym_fn dlsym_fn;
static dlsym_fn real_dlsym;
static void *libcuda;

static dlsym_fn find_dlsym(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        void *f = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (f)
            return (dlsym_fn)f;
    }
    return NULL;
}

fp_dlsym_fn fp_dlsym_target(void)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE);
    if (!f) {
        f = find_dlsym();
        __atomic_store_n(&real_dlsym, f, __ATOMIC_RELEASE);
    }
    return f;
}

void *fp_real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = fp_dlsym_target();
    return f ? f(handle, name) : NULL;
}

void *fp_real_lookup(const char *name)
{
    return libcuda ? fp_real_dlsym(libcuda, name) : NULL;
}

/* Set with libcuda.so.1: it is fragpool's simulated driver (it has the
 * simulator's own control API, simdev/fpsim.h). */
static bool simulated;

const char *fp_real_device_kind(void)
{
    return simulated ? "simulated device" : "GPU";
}

int fp_real_resolve(void)
{
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (!libcuda)
        libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!libcuda)
        return ENOENT;
    simulated = fp_real_lookup("fpsim_device_count") != NULL;
#define FP_REAL_LOAD(name) fp_real.name = (fp_PFN_##name)fp_real_lookup(#name);
    FP_REAL_FUNCS(FP_REAL_LOAD)
#undef FP_REAL_LOAD
    return fp_real.cuMemAlloc_v2 && fp_real.cuMemFree_v2 && fp_real.cuCtxGetCurrent ? 0 : ENOENT;
}

CUresult fp_real_ctx_sync(CUcontext ctx)
{
    if (!fp_real.cuCtxSynchronize)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUcontext cur = NULL, popped;
    fp_real.cuCtxGetCurrent(&cur);
    bool push = cur != ctx;
    CUresult r = push ? fp_real.cuCtxPushCurrent_v2(ctx) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    r = fp_real.cuCtxSynchronize();
    if (push)
        fp_real.cuCtxPopCurrent_v2(&popped);
    return r;
}
