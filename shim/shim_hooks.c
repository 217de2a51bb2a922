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
 * The hooked functions are one list (FP_HOOKED_FUNCS, shim_funcs.h), and
 * libcuda's own pointer for each is the one shim_real.c resolved into
 * fp_real from that list, so there is no table of ours to fill.
 *
 * dlsym(RTLD_NEXT or RTLD_DEFAULT, ...) depends on the caller, so those
 * calls are tail calls into glibc: its view of the caller stays the
 * program's, not fragpool's.
 */
#include "shim_life.h"
#include "shim_real.h"
#include <dlfcn.h>
#include <string.h>

/* The wrapper of the hooked function that fn is, or fn itself: fn must
 * be exactly what libcuda exports under that name (fp_real holds it, from
 * the same list, FP_HOOKED_FUNCS of shim_funcs.h). */
static void *swap_any(void *fn)
{
    if (!fn)
        return fn;
#define FP_SWAP_ANY(n)                                                                             \
    if (fn == (void *)fp_real.n)                                                                   \
        return (void *)n;
    FP_HOOKED_FUNCS(FP_SWAP_ANY)
#undef FP_SWAP_ANY
    return fn;
}

/* The same for a function looked up by name: only the hooked function of
 * that whole name is swapped, and only once the shim is set up. */
static void *swap_named(const char *name, void *fn)
{
    if (!fn || !name)
        return fn;
#define FP_SWAP_NAMED(n)                                                                           \
    if (strcmp(#n, name) == 0)                                                                     \
        return !fp_shim_init() ? fn : fn == (void *)fp_real.n ? (void *)n : fn;
    FP_HOOKED_FUNCS(FP_SWAP_NAMED)
#undef FP_SWAP_NAMED
    return fn;
}

static void *dlsym_on_handle(fp_dlsym_fn real, void *handle, const char *name)
{
    return swap_named(name, real ? real(handle, name) : NULL);
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
        *pfn = swap_any(*pfn);
    return r;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!fp_shim_init() || !fp_real.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = swap_any(*pfn);
    return r;
}
