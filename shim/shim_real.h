/* shim_real.h - the driver's own functions (shim_real.c), reached by
 * every file of the shim instead of its exported symbols, so that nothing
 * recurses into fragpool's wrappers.
 *
 * Invariant: fp_real is written once, inside fp_real_resolve (under the
 * pthread_once of shim_life.c), before any wrapper reads it.
 */
#ifndef FP_SHIM_REAL_H
#define FP_SHIM_REAL_H

#include "fp_cuda.h"
#include "shim_funcs.h"

typedef struct fp_real_table {
#define FP_REAL_FIELD(name) fp_PFN_##name name;
    FP_REAL_FUNCS(FP_REAL_FIELD)
#undef FP_REAL_FIELD
} fp_real_table;

extern fp_real_table fp_real;

typedef void *(*fp_dlsym_fn)(void *, const char *);
fp_dlsym_fn fp_dlsym_target(void);                   /* glibc's dlsym  */
void *fp_real_dlsym(void *handle, const char *name); /* calls it       */
int fp_real_resolve(void);                           /* 0, or ENOENT when libcuda is absent */
void *fp_real_lookup(const char *name);              /* dlsym on libcuda.so.1 */
/* What libcuda.so.1 drives, for the summary's Mode row: "GPU", or
 * "simulated device" (fragpool's own driver, simdev/). */
const char *fp_real_device_kind(void);
/* cuCtxSynchronize of ctx from any thread (pushed when not current). */
CUresult fp_real_ctx_sync(CUcontext ctx);

#endif
