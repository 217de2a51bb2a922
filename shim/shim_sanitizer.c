/* shim_sanitizer.c - fragpool under compute-sanitizer and the profilers.
 *
 * A pool hides what memcheck looks for: a write one element past a
 * cudaMalloc lands inside the pool's segment, which the driver (and so the
 * tool) sees as one allocation, and a use after free lands in memory the
 * pool still holds.  So when a CUDA tool is injected, fragpool passes
 * every allocation of this process to the driver untouched (the tool then
 * sees each one, as without fragpool) and says so in one line on stderr;
 * tools:pool keeps the pool (for profiling fragpool itself).
 *
 * A tool is injected when one of the variables the CUDA driver reads to
 * load a tool library is set (non-empty): CUDA_INJECTION64_PATH (CUPTI's
 * injection, used by compute-sanitizer, Nsight Systems and Nsight Compute)
 * or NVTX_INJECTION64_PATH (NVTX's, set by the same tools); or LD_PRELOAD
 * names compute-sanitizer's launcher helper (TreeLauncherTargetLdPreload).
 *
 * Invariants: decided once, at the first CUDA call, before any pool
 * exists, so no block is ever half in a pool and half at the driver;
 * reading it afterwards is one relaxed load.
 */
#include "shim_sanitizer.h"
#include "shim_state.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

atomic_bool fp_tools_to_driver;

static const char *injected(void)
{
    static const char *const vars[] = {"CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return vars[i];
    }
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "TreeLauncherTargetLdPreload"))
        return "LD_PRELOAD (compute-sanitizer's launcher)";
    return NULL;
}

void fp_tools_detect(void)
{
    const char *why = injected();
    if (!why)
        return;
    if (fp_shim.conf.tools == FP_TOOLS_POOL) {
        fp_say("%s is set (a CUDA tool such as compute-sanitizer or Nsight is attached) and "
               "tools:pool keeps the pool: the tool cannot see accesses past an allocation "
               "inside a pool segment",
               why);
        return;
    }
    atomic_store(&fp_tools_to_driver, true);
    fp_say("%s is set (a CUDA tool such as compute-sanitizer or Nsight is attached): every "
           "allocation of this process goes to the driver, so the tool sees each one "
           "(tools:pool keeps the pool)",
           why);
}
