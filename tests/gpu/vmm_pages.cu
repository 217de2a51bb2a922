// vmm_pages.cu - what a virtual-memory page costs on this GPU, by page size:
// the measurement behind fragpool's page size (docs/vmm.md, "Page size").
//
// For each page size P (2, 4, 8, 20 and 64 MiB; multiples of the device's
// granularity), TOTAL bytes (default 8 GiB, rounded down to a multiple of
// 320 MiB, which every size divides) are mapped into one reserved
// range page by page, as fragpool maps them (cuMemCreate, cuMemMap, then
// one cuMemSetAccess per page), then unmapped page by page (cuMemUnmap,
// cuMemRelease).  Rounds alternate the sizes (2, 4, ..., 64, 64, ..., 2)
// so that drift in the machine falls on every size alike.  Per size it
// prints the median over rounds of the time per page and per GiB, map and
// unmap apart:
//   PAGE P_MiB map_us_per_page M unmap_us_per_page U map_ms_per_GiB MG unmap_ms_per_GiB UG
// Then "CHECK vmm_pages OK" (exit 0), or "CHECK vmm_pages FAIL ..." (exit 1).
//
//   vmm_pages [TOTAL_MiB] [ROUNDS]    (defaults 8192 and 3)
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_NAME "vmm_pages"
#include "gpu_check.h"

static double now_us()
{
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct cost {
    std::vector<double> map_us, unmap_us; // per page, one per round
};

// Maps total bytes as pages of size page at base, then unmaps them.
static int one_round(CUdevice dev, CUdeviceptr base, size_t total, size_t page, cost &c)
{
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t n = total / page;
    std::vector<CUmemGenericAllocationHandle> h(n);
    double t0 = now_us();
    for (size_t i = 0; i < n; i++) {
        CK_DRV(cuMemCreate(&h[i], page, &prop, 0));
        CK_DRV(cuMemMap(base + i * page, page, 0, h[i], 0));
        CK_DRV(cuMemSetAccess(base + i * page, page, &acc, 1));
    }
    CK_DRV(cuCtxSynchronize());
    double t1 = now_us();
    for (size_t i = 0; i < n; i++) {
        CK_DRV(cuMemUnmap(base + i * page, page));
        CK_DRV(cuMemRelease(h[i]));
    }
    CK_DRV(cuCtxSynchronize());
    double t2 = now_us();
    c.map_us.push_back((t1 - t0) / (double)n);
    c.unmap_us.push_back((t2 - t1) / (double)n);
    return 0;
}

int main(int argc, char **argv)
{
    size_t total_mb = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8192;
    int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
    const size_t sizes_mb[] = {2, 4, 8, 20, 64};
    const int nsizes = sizeof sizes_mb / sizeof *sizes_mb;
    CUdevice dev;
    CUcontext ctx;
    CK_DRV(cuInit(0));
    CK_DRV(cuDeviceGet(&dev, 0));
    CK_DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK_DRV(cuCtxSetCurrent(ctx));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    CK_DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t total = (total_mb << 20) / (320u << 20) * (320u << 20); // every size divides it
    if (!total || (2u << 20) % gran) {
        std::printf("CHECK vmm_pages FAIL total %zu MiB or granularity %zu B unusable\n", total_mb,
                    gran);
        return 1;
    }
    CUdeviceptr base = 0;
    CK_DRV(cuMemAddressReserve(&base, total, 0, 0, 0));
    std::printf("VMM_PAGES granularity %zu MiB total %zu MiB rounds %d\n", gran >> 20, total >> 20,
                rounds);
    std::vector<cost> c(nsizes);
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nsizes; k++) {
            int i = r % 2 ? nsizes - 1 - k : k;
            if (one_round(dev, base, total, sizes_mb[i] << 20, c[i]))
                return 1;
        }
    for (int i = 0; i < nsizes; i++) {
        double m = median(c[i].map_us), u = median(c[i].unmap_us);
        double per_gib = 1024.0 / (double)sizes_mb[i];
        std::printf("PAGE %zu map_us_per_page %.1f unmap_us_per_page %.1f map_ms_per_GiB %.2f "
                    "unmap_ms_per_GiB %.2f\n",
                    sizes_mb[i], m, u, m * per_gib / 1e3, u * per_gib / 1e3);
    }
    CK_DRV(cuMemAddressFree(base, total));
    std::printf("CHECK vmm_pages OK\n");
    return 0;
}
