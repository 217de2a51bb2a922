/* fake_torch.c - a stand-in for a PyTorch program, built twice: as
 * `python` (a Python command by its name) and as `torchapp` (a program
 * that is PyTorch only once it runs).  Not a test by itself: test_run
 * runs it under `fragpool run` and under a plain LD_PRELOAD.
 *
 * Arguments, any order: "torch" loads libc10_cuda.so (FP_FAKE_C10) as
 * `import torch` does, before any CUDA call; "nocuda" makes no CUDA call;
 * anything else (a script's path, when run from a #! line) is ignored.
 * Then it allocates and frees one block on the device, which is when
 * PyTorch's allocator would first read PYTORCH_NO_CUDA_MEMORY_CACHING,
 * and prints on stdout:
 *   ran=1
 *   PYTORCH_NO_CUDA_MEMORY_CACHING=<value, or (unset)>
 *   LD_PRELOAD.len=<n> LD_LIBRARY_PATH.len=<n>
 * Exit status 0; 10+ when a CUDA call or the load failed.
 */
#include "fp_cuda.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void need(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "fake_torch: %s failed with %d\n", what, (int)r);
        exit(10);
    }
}

static void one_allocation(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    need(cuInit(0), "cuInit");
    need(cuDeviceGet(&dev, 0), "cuDeviceGet");
    need(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    need(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    need(cuMemAlloc_v2(&p, 1 << 20), "cuMemAlloc");
    need(cuMemFree_v2(p), "cuMemFree");
}

static size_t len_of(const char *name)
{
    const char *v = getenv(name);
    return v ? strlen(v) : 0;
}

int main(int argc, char **argv)
{
    int torch = 0, cuda = 1;
    for (int i = 1; i < argc; i++) {
        torch |= strcmp(argv[i], "torch") == 0;
        cuda &= strcmp(argv[i], "nocuda") != 0;
    }
    if (torch && !dlopen(FP_FAKE_C10, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "fake_torch: cannot load %s: %s\n", FP_FAKE_C10, dlerror());
        return 11;
    }
    if (cuda)
        one_allocation();
    const char *v = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    printf("ran=1\nPYTORCH_NO_CUDA_MEMORY_CACHING=%s\n", v ? v : "(unset)");
    const char *c = getenv("PYTORCH_CUDA_ALLOC_CONF");
    printf("PYTORCH_CUDA_ALLOC_CONF=%s\n", c ? c : "(unset)");
    printf("LD_PRELOAD.len=%zu LD_LIBRARY_PATH.len=%zu\n", len_of("LD_PRELOAD"),
           len_of("LD_LIBRARY_PATH"));
    return 0;
}
