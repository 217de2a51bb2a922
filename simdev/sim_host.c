/* simdev/sim_host.c: pinned host memory beyond cuMemHostAlloc (sim_mem.c):
 * its flags, and page-locking memory the caller already has.
 *
 * Behaviour kept from the real driver:
 *   - cuMemHostGetFlags gives back the flags cuMemHostAlloc was given
 *     (0 for cuMemAllocHost) with DEVICEMAP added, for any pointer inside
 *     the allocation: with unified addressing all pinned memory is mapped,
 *     and the real driver (H200, 2026-12-01) answers 0 -> 2, 1 -> 3, 4 -> 6;
 *     INVALID_VALUE for memory that is not pinned host memory;
 *   - cuMemHostRegister page-locks [p, p+bytesize) of the caller's memory:
 *     NULL or 0 bytes or unknown flags are INVALID_VALUE, a range meeting
 *     pinned (or any simulated) memory is HOST_MEMORY_ALREADY_REGISTERED;
 *     the range then reads as host memory to pointer queries and
 *     cuMemHostGetDevicePointer, and copies may use it;
 *   - cuMemHostUnregister takes exactly the registered base, else
 *     HOST_MEMORY_NOT_REGISTERED; it never frees the caller's memory.
 * Chosen where the documentation is silent: cuMemHostGetFlags of a
 * registered range gives its PORTABLE and DEVICEMAP registration flags.
 * A registration belongs to the context current when it was made and
 * ends with it (as cuMemHostAlloc's memory does).
 */
#include "sim.h"

#include <stdint.h>

#define SIM_REGISTER_FLAGS                                                                         \
    (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |    \
     CU_MEMHOSTREGISTER_READ_ONLY)

CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && pFlags == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc a;
    if (sim_mem_find((CUdeviceptr)(uintptr_t)p, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    if (a.kind == SIM_MEM_HOST)
        *pFlags = a.flags | CU_MEMHOSTALLOC_DEVICEMAP; /* as the H200's driver: UVA maps all */
    else if (a.kind == SIM_MEM_REGISTERED)
        *pFlags = a.flags & (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS &&
        (p == NULL || bytesize == 0 || (Flags & ~(unsigned)SIM_REGISTER_FLAGS) != 0 ||
         (uintptr_t)p > UINTPTR_MAX - bytesize))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = NULL;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc req = {.base = (CUdeviceptr)(uintptr_t)p,
                     .size = bytesize,
                     .dev = c->dev,
                     .ctx = c,
                     .flags = Flags};
    return sim_mem_add_registered(&req);
}

CUresult cuMemHostUnregister(void *p)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_mem_remove_registered((CUdeviceptr)(uintptr_t)p);
}
