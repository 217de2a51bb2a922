// pitch_probe.cu - prints the pitch that the CUDA stack returns for a set of
// row widths: cudaMallocPitch (runtime), and cuMemAllocPitch with element
// sizes 4, 8 and 16 (driver API, linked with -lcuda so that a preloaded
// cuMemAllocPitch_v2 is what it binds).  scripts/gpu-check.sh runs it with
// and without fragpool and compares the lines: fragpool must give the
// driver's pitch (it currently rounds the width up to 512).
//
// Prints "PITCH <width> <pitch> <api>" per case, plus the device's pitch and
// texture alignment attributes as "PITCH_INFO ...", then "CHECK pitch_probe OK".
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_NAME "pitch_probe"
#include "gpu_check.h"

static int failures = 0;

int main()
{
    static const size_t widths[] = {1, 100, 511, 512, 513, 1000, 2048, 4096, 5000, 65537};
    static const unsigned elem[] = {4, 8, 16};
    const size_t height = 4;
    CK(cudaSetDevice(0));
    CK(cudaFree(0)); // creates and makes current the primary context
    int tpa = 0, ta = 0;
    CK(cudaDeviceGetAttribute(&tpa, cudaDevAttrTexturePitchAlignment, 0));
    CK(cudaDeviceGetAttribute(&ta, cudaDevAttrTextureAlignment, 0));
    std::printf("PITCH_INFO texture_pitch_alignment %d texture_alignment %d\n", tpa, ta);

    for (size_t w : widths) {
        void *p = nullptr;
        size_t pitch = 0;
        CK(cudaMallocPitch(&p, &pitch, w, height));
        std::printf("PITCH %zu %zu runtime\n", w, pitch);
        if (pitch < w)
            failures++;
        CK(cudaFree(p));
    }
    for (unsigned es : elem) {
        for (size_t w : widths) {
            CUdeviceptr p = 0;
            size_t pitch = 0;
            CUresult r = cuMemAllocPitch(&p, &pitch, w, height, es);
            if (r != CUDA_SUCCESS) {
                const char *name = "?";
                cuGetErrorName(r, &name);
                std::printf("PITCH %zu error:%s driver_es%u\n", w, name, es);
                continue;
            }
            std::printf("PITCH %zu %zu driver_es%u\n", w, pitch, es);
            if (pitch < w)
                failures++;
            cuMemFree(p);
        }
    }
    if (failures) {
        std::printf("CHECK pitch_probe FAIL %d pitches below the width\n", failures);
        return 1;
    }
    std::printf("CHECK pitch_probe OK\n");
    return 0;
}
