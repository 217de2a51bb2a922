// gpu_check.h - what every GPU test program of tests/gpu does when a CUDA
// call fails: print one "CHECK <name> FAIL <file>:<line>: <call> returned
// <error> (<text>)" line, where <name> is the program's CHECK_NAME (defined
// before this header is included), and exit with status 1.  The scripts
// judge a program by its exit status and its CHECK lines (docs/gpu.md).
//   CK(call)      a runtime call (cudaError_t)
//   CK_DRV(call)  a driver call (CUresult; the program includes <cuda.h>)
#ifndef FP_GPU_CHECK_H
#define FP_GPU_CHECK_H

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#ifndef CHECK_NAME
#error "define CHECK_NAME (the program's name in its CHECK lines) before including gpu_check.h"
#endif

[[noreturn]] static inline void gpu_check_fail(const char *file, int line, const char *call,
                                               const char *err, const char *text)
{
    std::printf("CHECK %s FAIL %s:%d: %s returned %s (%s)\n", CHECK_NAME, file, line, call, err,
                text);
    std::fflush(stdout);
    std::exit(1);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            gpu_check_fail(__FILE__, __LINE__, #call, cudaGetErrorName(e_),                        \
                           cudaGetErrorString(e_));                                                \
    } while (0)

#ifdef CUDA_VERSION /* <cuda.h> was included: the driver API too */
#define CK_DRV(call)                                                                               \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?", *s_ = "?";                                                       \
            cuGetErrorName(r_, &n_);                                                               \
            cuGetErrorString(r_, &s_);                                                             \
            gpu_check_fail(__FILE__, __LINE__, #call, n_, s_);                                     \
        }                                                                                          \
    } while (0)
#endif

#endif
