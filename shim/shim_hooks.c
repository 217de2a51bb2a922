/* shim_hooks.c - where fragpool puts itself in the driver's path.
 *
 * Programs reach the driver three ways: by linking it (the exported cu*
 * symbols of shim_mem.c win, being preloaded), by dlsym on libcuda's
 * handle, and through cuGetProcAddress (how both static and shared cudart
 * fetch every driver function).  The last two hand back a function
 * pointer, and fragpool replaces it only when it is exactly the driver's
 * function whose signature fragpool implements: the pointer must equal
 * what libcuda exports under that name.  Names are compared whole, never
 * by prefix, and anything else passes through untouched.
 *
 * dlsym(RTLD_NEXT or RTLD_DEFAULT, ...) depends on the caller, so those
 * calls are tail calls into glibc: its view of the caller stays the
 * program's, not fragpool's.
 */
#include "shim.h"
#include <dlfcn.h>
#include <string.h>

typedef struct fp_hook {
    const char *name;  /* the exported name whose signature we implement */
    void *wrapper;     /* fragpool's function                             */
    void *real;        /* libcuda's function of that name, once resolved  */
} fp_hook;

#define HOOK(n) {#n, (void *)n, NULL}
static fp_hook hooks[] = {
    HOOK(cuGetProcAddress), HOOK(cuGetProcAddress_v2),
    HOOK(cuMemAlloc_v2), HOOK(cuMemFree_v2), HOOK(cuMemAllocPitch_v2),
    HOOK(cuMemAllocAsync), HOOK(cuMemAllocAsync_ptsz),
    HOOK(cuMemFreeAsync), HOOK(cuMemFreeAsync_ptsz), HOOK(cuMemGetInfo_v2),
    HOOK(cuMemAllocManaged), HOOK(cuMemAllocHost_v2), HOOK(cuMemHostAlloc),
    HOOK(cuMemAllocFromPoolAsync), HOOK(cuMemAllocFromPoolAsync_ptsz),
    HOOK(cuMemCreate), HOOK(cuMemAddressReserve), HOOK(cuMemMap),
    HOOK(cuCtxDestroy_v2), HOOK(cuDevicePrimaryCtxReset_v2),
    HOOK(cuDevicePrimaryCtxRelease_v2), HOOK(cuCtxSynchronize),
    HOOK(cuStreamBeginCapture), HOOK(cuStreamBeginCapture_ptsz),
    HOOK(cuStreamBeginCapture_v2), HOOK(cuStreamBeginCapture_v2_ptsz),
    HOOK(cuStreamBeginCaptureToGraph), HOOK(cuStreamBeginCaptureToGraph_ptsz),
    HOOK(cuStreamEndCapture), HOOK(cuStreamEndCapture_ptsz),
    HOOK(cuIpcGetMemHandle), HOOK(cuIpcOpenMemHandle), HOOK(cuIpcOpenMemHandle_v2),
    HOOK(cuIpcCloseMemHandle),
};
#undef HOOK
#define NHOOKS (sizeof hooks / sizeof *hooks)

/* Called once, from fp_shim_init, after fp_real_resolve. */
void fp_hooks_resolve(void)
{
    for (size_t i = 0; i < NHOOKS; i++)
        hooks[i].real = fp_real_lookup(hooks[i].name);
}

void *fp_hook_swap_any(void *fn)
{
    if (!fn)
        return fn;
    for (size_t i = 0; i < NHOOKS; i++)
        if (hooks[i].real == fn)
            return hooks[i].wrapper;
    return fn;
}

void *fp_hook_swap(const char *name, void *fn)
{
    if (!fn || !name)
        return fn;
    for (size_t i = 0; i < NHOOKS; i++) {
        if (strcmp(hooks[i].name, name) != 0)
            continue;
        if (!fp_shim_init())
            return fn;
        return hooks[i].real == fn ? hooks[i].wrapper : fn;
    }
    return fn;
}

static void *dlsym_on_handle(fp_dlsym_fn real, void *handle, const char *name)
{
    return fp_hook_swap(name, real ? real(handle, name) : NULL);
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    fp_dlsym_fn real = fp_dlsym_target();
    if (!real) /* no glibc dlsym to reach: nothing can be resolved */
        return NULL;
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
#if defined(__clang__) && __has_attribute(musttail)
        __attribute__((musttail))
#endif
        return real(handle, name);
    }
    return dlsym_on_handle(real, handle, name);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (!fp_shim_init() || !fp_real.cuGetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = fp_hook_swap_any(*pfn);
    return r;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!fp_shim_init() || !fp_real.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = fp_hook_swap_any(*pfn);
    return r;
}
