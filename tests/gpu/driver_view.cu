// driver_view.cu - what the driver says about a program's memory must stay
// true when a pool serves it: a plain CUDA program that asks the driver
// about its own allocations and its default memory pool, and checks every
// answer against what the native driver says for an allocation of its own.
// Run natively (the control) and under LD_PRELOAD=libfragpool.so by
// scripts/gpu-check.sh (group view), in either of fragpool's modes.
//
// Modes (argument; default all):
//   ranges  cudaMalloc of varied sizes (1 B to 25 MiB, and many of 1000 B so
//           that a pool packs several into one segment); at each block's
//           base, middle and last byte, through three ways to reach the
//           driver (the linked symbols, dlsym of libcuda.so.1 and
//           cuGetProcAddress): cuMemGetAddressRange = (base, requested
//           size); cuPointerGetAttribute RANGE_START_ADDR / RANGE_SIZE the
//           same, BUFFER_ID one per allocation and never seen before,
//           IS_LEGACY_CUDA_IPC_CAPABLE 1; cuPointerGetAttributes (start,
//           size, context, device ordinal, buffer id) the same.  One byte
//           past a block's end (unless another live block of ours is there)
//           and every byte of a freed block: the driver's answer for memory
//           nobody allocated (CUDA_ERROR_NOT_FOUND, CUDA_ERROR_INVALID_VALUE,
//           the plural call CUDA_SUCCESS with zeros and no context), or the
//           exact range of one of our live allocations.
//   pool    cudaMallocAsync on a non-blocking stream: the default pool's
//           (= cudaDeviceGetMemPool's) USED_MEM_CURRENT is the exact sum of
//           the live requests, drops at cudaFreeAsync before any sync,
//           RESERVED >= USED, the highs, their reset (0 resets, 1 is
//           cudaErrorInvalidValue), RELEASE_THRESHOLD 0 by default and round
//           trips, cudaMemPoolTrimTo(pool, 0) never raises RESERVED.  Read
//           through the runtime and through the three driver paths.
//   graph   a captured graph with cudaMallocAsync / cudaFreeAsync inside the
//           capture (graph allocation nodes), a kernel and a copy out,
//           launched 3 times; a relaxed capture that uses a cudaMalloc'd
//           buffer from before the capture and one cudaMalloc'd during it.
//
// Output: "VIEW ..." lines (the counts; "VIEW miss ..." and "VIEW graph
// nodes ..." are compared with the native run's by gpu-check.sh), at most
// 20 "VIEW FAIL ..." lines, then "CHECK driver_view OK <counts>" (exit 0)
// or "CHECK driver_view FAIL <what>" (exit 1).  A failing runtime call ends
// the run at once through CK.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#define CHECK_NAME "driver_view"
#include "gpu_check.h"

// ---- failures: counted, the first 20 printed, the first kept ---------------

static int g_failures = 0;
static std::string g_first;

static void fail(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (g_failures < 20)
        std::printf("VIEW FAIL %s\n", buf);
    if (g_first.empty())
        g_first = buf;
    g_failures++;
}

// ---- the three ways to reach the driver --------------------------------------

typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*attr_fn)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*attrs_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*pool_get_fn)(CUmemoryPool, CUmemPool_attribute, void *);

struct Api {
    const char *name;
    range_fn range;
    attr_fn attr;
    attrs_fn attrs;
    pool_get_fn pool_get;
};

static void *by_dlsym(void *lib, const char *sym)
{
    void *p = lib ? dlsym(lib, sym) : nullptr;
    if (!p)
        fail("dlsym(libcuda.so.1, %s) found nothing", sym);
    return p;
}

static void *by_proc(const char *sym)
{
    void *p = nullptr;
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = cuGetProcAddress(sym, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    if (r != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS || !p) {
        fail("cuGetProcAddress(%s, %d) = %d, status %d", sym, CUDA_VERSION, (int)r, (int)q);
        return nullptr;
    }
    return p;
}

// The paths whose four functions were all found.
static std::vector<Api> driver_paths()
{
    std::vector<Api> v;
    Api linked = {"linked", &cuMemGetAddressRange, &cuPointerGetAttribute, &cuPointerGetAttributes,
                  &cuMemPoolGetAttribute};
    v.push_back(linked);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        fail("dlopen(libcuda.so.1): %s", dlerror());
    Api d = {"dlsym", (range_fn)by_dlsym(lib, "cuMemGetAddressRange_v2"),
             (attr_fn)by_dlsym(lib, "cuPointerGetAttribute"),
             (attrs_fn)by_dlsym(lib, "cuPointerGetAttributes"),
             (pool_get_fn)by_dlsym(lib, "cuMemPoolGetAttribute")};
    if (d.range && d.attr && d.attrs && d.pool_get)
        v.push_back(d);
    Api p = {"cuGetProcAddress", (range_fn)by_proc("cuMemGetAddressRange"),
             (attr_fn)by_proc("cuPointerGetAttribute"), (attrs_fn)by_proc("cuPointerGetAttributes"),
             (pool_get_fn)by_proc("cuMemPoolGetAttribute")};
    if (p.range && p.attr && p.attrs && p.pool_get)
        v.push_back(p);
    return v;
}

// ---- ranges -----------------------------------------------------------------------

struct Alloc {
    CUdeviceptr base;
    size_t size;
    unsigned long long id;
    bool live;
};

struct RangeCounts {
    long queries = 0, hits = 0, past_miss = 0, past_skipped = 0, freed_miss = 0, other_hits = 0;
};

static CUcontext g_ctx = nullptr;
static RangeCounts g_rc;

// The answers of one path for one address, all calls.
struct Answer {
    CUresult r_range, r_start, r_size, r_id, r_ipc, r_plural;
    CUdeviceptr range_base, start, p_start;
    size_t range_size, size, p_size;
    unsigned long long id, p_id;
    int ipc, p_ord;
    CUcontext p_ctx;
};

static Answer ask(const Api &a, CUdeviceptr q)
{
    Answer w;
    std::memset(&w, 0, sizeof w);
    w.p_ord = -12345; // left alone by a call that writes nothing
    w.r_range = a.range(&w.range_base, &w.range_size, q);
    w.r_start = a.attr(&w.start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, q);
    w.r_size = a.attr(&w.size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, q);
    w.r_id = a.attr(&w.id, CU_POINTER_ATTRIBUTE_BUFFER_ID, q);
    // A bool by the documentation: read into a zeroed int, either width fits.
    w.r_ipc = a.attr(&w.ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, q);
    CUpointer_attribute at[5] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void *data[5] = {&w.p_start, &w.p_size, &w.p_ctx, &w.p_ord, &w.p_id};
    w.r_plural = a.attrs(5, at, data, q);
    g_rc.queries++;
    return w;
}

// q lies in allocation al: every answer is al's.
static void expect_hit(const Api &a, CUdeviceptr q, const Alloc &al, const char *where)
{
    Answer w = ask(a, q);
    const unsigned long long b = (unsigned long long)al.base;
    if (w.r_range != CUDA_SUCCESS || w.range_base != al.base || w.range_size != al.size)
        fail("%s: cuMemGetAddressRange at %s of %zu B at 0x%llx: %d (0x%llx, %zu)", a.name, where,
             al.size, b, (int)w.r_range, (unsigned long long)w.range_base, w.range_size);
    if (w.r_start != CUDA_SUCCESS || w.start != al.base || w.r_size != CUDA_SUCCESS ||
        w.size != al.size)
        fail("%s: RANGE_START_ADDR/RANGE_SIZE at %s of %zu B at 0x%llx: %d/%d (0x%llx, %zu)",
             a.name, where, al.size, b, (int)w.r_start, (int)w.r_size, (unsigned long long)w.start,
             w.size);
    if (w.r_id != CUDA_SUCCESS || w.id != al.id)
        fail("%s: BUFFER_ID at %s of %zu B at 0x%llx: %d, %llu (want %llu)", a.name, where, al.size,
             b, (int)w.r_id, w.id, al.id);
    if (w.r_ipc != CUDA_SUCCESS || w.ipc != 1)
        fail("%s: IS_LEGACY_CUDA_IPC_CAPABLE at %s of %zu B at 0x%llx: %d, %d", a.name, where,
             al.size, b, (int)w.r_ipc, w.ipc);
    if (w.r_plural != CUDA_SUCCESS || w.p_start != al.base || w.p_size != al.size ||
        w.p_ctx != g_ctx || w.p_ord != 0 || w.p_id != al.id)
        fail("%s: cuPointerGetAttributes at %s of %zu B at 0x%llx: %d (0x%llx, %zu, ctx %s, "
             "ordinal %d, id %llu)",
             a.name, where, al.size, b, (int)w.r_plural, (unsigned long long)w.p_start, w.p_size,
             w.p_ctx == g_ctx ? "ok" : "WRONG", w.p_ord, w.p_id);
    g_rc.hits++;
}

static const Alloc *live_exact(const std::vector<Alloc> &all, CUdeviceptr b, size_t s,
                               CUdeviceptr q)
{
    for (const Alloc &o : all)
        if (o.live && o.base == b && o.size == s && q >= b && q - b < s)
            return &o;
    return nullptr;
}

static const Alloc *live_containing(const std::vector<Alloc> &all, CUdeviceptr q)
{
    for (const Alloc &o : all)
        if (o.live && q >= o.base && q - o.base < o.size)
            return &o;
    return nullptr;
}

static std::set<std::string> g_miss_lines;

// The first miss of each kind per path, as one line to compare with the
// native run's (the values the driver gives for memory nobody allocated).
static void print_miss(const Api &a, const char *kind, const Answer &w)
{
    char line[400];
    std::snprintf(line, sizeof line,
                  "VIEW miss %s %s: range %d start %d size %d buffer_id %d ipc %d (value %d) "
                  "plural %d start 0x%llx size %zu ctx %s ordinal %d buffer_id %llu",
                  kind, a.name, (int)w.r_range, (int)w.r_start, (int)w.r_size, (int)w.r_id,
                  (int)w.r_ipc, w.ipc, (int)w.r_plural, (unsigned long long)w.p_start, w.p_size,
                  w.p_ctx ? "set" : "NULL", w.p_ord, w.p_id);
    std::string key = std::string(kind) + a.name;
    if (g_miss_lines.insert(key).second)
        std::printf("%s\n", line);
}

// q lies in no live allocation that is al: the driver's answer for an
// unknown address, or exactly the range of another live allocation of ours.
// Returns 1 for a miss, 0 for another allocation's range.
static int expect_not(const Api &a, CUdeviceptr q, const Alloc &al, const char *where,
                      const char *kind, const std::vector<Alloc> &all)
{
    Answer w = ask(a, q);
    const unsigned long long b = (unsigned long long)al.base;
    if (w.r_range == CUDA_SUCCESS) {
        const Alloc *o = live_exact(all, w.range_base, w.range_size, q);
        if (!o || o->base == al.base)
            fail("%s: cuMemGetAddressRange at %s of %zu B at 0x%llx (%s) = (0x%llx, %zu), "
                 "which is no live allocation",
                 a.name, where, al.size, b, kind, (unsigned long long)w.range_base, w.range_size);
        else if (w.r_start != CUDA_SUCCESS || w.start != o->base || w.p_start != o->base ||
                 w.p_size != o->size)
            fail("%s: at %s of %zu B at 0x%llx (%s) the attributes disagree with the range", a.name,
                 where, al.size, b, kind);
        g_rc.other_hits++;
        return 0;
    }
    if (w.r_range != CUDA_ERROR_NOT_FOUND)
        fail("%s: cuMemGetAddressRange at %s of %zu B at 0x%llx (%s) = %d, want %d (NOT_FOUND)",
             a.name, where, al.size, b, kind, (int)w.r_range, (int)CUDA_ERROR_NOT_FOUND);
    if (w.r_start != CUDA_ERROR_INVALID_VALUE || w.r_size != CUDA_ERROR_INVALID_VALUE)
        fail("%s: RANGE_START_ADDR/RANGE_SIZE at %s of %zu B at 0x%llx (%s) = %d/%d, want %d",
             a.name, where, al.size, b, kind, (int)w.r_start, (int)w.r_size,
             (int)CUDA_ERROR_INVALID_VALUE);
    if (w.r_plural != CUDA_SUCCESS || w.p_start != 0 || w.p_size != 0 || w.p_ctx != nullptr)
        fail("%s: cuPointerGetAttributes at %s of %zu B at 0x%llx (%s) = %d (0x%llx, %zu, "
             "ctx %s), want success, zeros, no context",
             a.name, where, al.size, b, kind, (int)w.r_plural, (unsigned long long)w.p_start,
             w.p_size, w.p_ctx ? "set" : "NULL");
    print_miss(a, kind, w);
    return 1;
}

static unsigned long long linked_id(CUdeviceptr p)
{
    unsigned long long id = 0;
    CUresult r = cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
    if (r != CUDA_SUCCESS)
        fail("BUFFER_ID of a fresh allocation at 0x%llx: %d", (unsigned long long)p, (int)r);
    return id;
}

static void check_live(const std::vector<Api> &paths, const std::vector<Alloc> &all)
{
    for (const Api &a : paths)
        for (const Alloc &al : all) {
            if (!al.live)
                continue;
            expect_hit(a, al.base, al, "base");
            expect_hit(a, al.base + al.size / 2, al, "middle");
            expect_hit(a, al.base + al.size - 1, al, "last byte");
        }
}

// Pairs of live allocations that start in one 2 MiB-aligned region.
static long shared_pairs(const std::vector<Alloc> &all)
{
    std::map<unsigned long long, long> per;
    for (const Alloc &al : all)
        if (al.live)
            per[(unsigned long long)al.base >> 21]++;
    long pairs = 0;
    for (const auto &kv : per)
        pairs += kv.second * (kv.second - 1) / 2;
    return pairs;
}

static Alloc new_alloc(size_t size, std::set<unsigned long long> &ids)
{
    void *p = nullptr;
    CK(cudaMalloc(&p, size));
    CK(cudaMemset(p, (int)(size & 0xff), size));
    Alloc al = {(CUdeviceptr)(uintptr_t)p, size, 0, true};
    al.id = linked_id(al.base);
    if (!ids.insert(al.id).second)
        fail("BUFFER_ID %llu of %zu B at 0x%llx was seen before", al.id, size,
             (unsigned long long)al.base);
    return al;
}

static std::string run_ranges(const std::vector<Api> &paths)
{
    const size_t MiB = 1 << 20;
    const size_t varied[] = {1,       4099,        512, 65536 + 3, 1 * MiB + 5, 200000,
                             2 * MiB, 3 * MiB + 5, 513, 25 * MiB,  777,         8 * MiB + 1};
    const int nvaried = (int)(sizeof varied / sizeof *varied);
    std::set<unsigned long long> ids;
    std::vector<Alloc> all;
    for (int i = 0; i < 96; i++) {
        all.push_back(new_alloc(1000, ids));
        if (i % 8 == 7)
            all.push_back(new_alloc(varied[(i / 8) % nvaried], ids));
    }
    for (int i = 0; i < 40; i++) // more small ones of varied sizes
        all.push_back(new_alloc(1 + (size_t)(i * 997) % 6000, ids));
    CK(cudaDeviceSynchronize());
    long pairs = shared_pairs(all);
    check_live(paths, all);
    for (const Api &a : paths)
        for (const Alloc &al : all) {
            CUdeviceptr q = al.base + al.size;
            if (live_containing(all, q)) {
                g_rc.past_skipped++;
                continue;
            }
            g_rc.past_miss += expect_not(a, q, al, "one past the end", "one-past", all);
        }
    // Free every other one; the freed must read as nobody's, the rest as before.
    for (size_t k = 1; k < all.size(); k += 2) {
        CK(cudaFree((void *)(uintptr_t)all[k].base));
        all[k].live = false;
    }
    for (const Api &a : paths)
        for (const Alloc &al : all) {
            if (al.live)
                continue;
            g_rc.freed_miss += expect_not(a, al.base, al, "base", "freed", all);
            g_rc.freed_miss += expect_not(a, al.base + al.size / 2, al, "middle", "freed", all);
            g_rc.freed_miss += expect_not(a, al.base + al.size - 1, al, "last byte", "freed", all);
        }
    check_live(paths, all);
    // New allocations, likely where the freed were: new ids, their own ranges.
    size_t first_new = all.size();
    for (int i = 0; i < 40; i++)
        all.push_back(new_alloc(i % 10 == 9 ? 1 * MiB + 5 : 1000, ids));
    size_t reused = 0;
    for (size_t k = first_new; k < all.size(); k++)
        for (size_t j = 0; j < first_new; j++)
            reused += !all[j].live && all[j].base == all[k].base;
    check_live(paths, all);
    size_t n = all.size();
    for (Alloc &al : all)
        if (al.live) {
            CK(cudaFree((void *)(uintptr_t)al.base));
            al.live = false;
        }
    std::printf("VIEW ranges: %zu allocations, %zu paths, %ld queries (%ld answered as their "
                "own allocation), one past the end: %ld nobody's, %ld skipped (another of ours "
                "there); freed: %ld nobody's, %ld another's; %ld pairs in one 2 MiB region; "
                "%zu new allocations at a freed one's address\n",
                n, paths.size(), g_rc.queries, g_rc.hits, g_rc.past_miss, g_rc.past_skipped,
                g_rc.freed_miss, g_rc.other_hits, pairs, reused);
    if (pairs == 0)
        fail("no two allocations in one 2 MiB region: nothing inside a segment was asked about");
    char note[160];
    std::snprintf(note, sizeof note, "ranges %zu allocations, %ld queries, %ld pairs in 2 MiB", n,
                  g_rc.queries, pairs);
    return note;
}

// ---- pool -----------------------------------------------------------------------------

static const char *attr_name(cudaMemPoolAttr a)
{
    switch (a) {
    case cudaMemPoolAttrUsedMemCurrent: return "USED_MEM_CURRENT";
    case cudaMemPoolAttrUsedMemHigh: return "USED_MEM_HIGH";
    case cudaMemPoolAttrReservedMemCurrent: return "RESERVED_MEM_CURRENT";
    case cudaMemPoolAttrReservedMemHigh: return "RESERVED_MEM_HIGH";
    case cudaMemPoolAttrReleaseThreshold: return "RELEASE_THRESHOLD";
    default: return "?";
    }
}

// One 64-bit pool attribute through the runtime and every driver path, for
// both handles; they must agree.  Returns the runtime's answer.
static uint64_t pool_attr(const std::vector<Api> &paths, cudaMemPool_t def, cudaMemPool_t cur,
                          cudaMemPoolAttr attr)
{
    cuuint64_t v = 0, w = 0;
    CK(cudaMemPoolGetAttribute(def, attr, &v));
    CK(cudaMemPoolGetAttribute(cur, attr, &w));
    if (w != v)
        fail("%s: default pool %llu, cudaDeviceGetMemPool's %llu", attr_name(attr),
             (unsigned long long)v, (unsigned long long)w);
    for (const Api &a : paths) {
        cuuint64_t d = 0;
        CUresult r = a.pool_get((CUmemoryPool)def, (CUmemPool_attribute)attr, &d);
        if (r != CUDA_SUCCESS || d != v)
            fail("%s: cuMemPoolGetAttribute (%s) = %d, %llu; runtime %llu", attr_name(attr), a.name,
                 (int)r, (unsigned long long)d, (unsigned long long)v);
    }
    return (uint64_t)v;
}

static void pool_set(cudaMemPool_t pool, cudaMemPoolAttr attr, uint64_t value)
{
    cuuint64_t v = value;
    CK(cudaMemPoolSetAttribute(pool, attr, &v));
}

static std::string run_pool(const std::vector<Api> &paths)
{
    const size_t MiB = 1 << 20;
    cudaMemPool_t def = nullptr, cur = nullptr;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    CK(cudaDeviceGetMemPool(&cur, 0));
    if (def != cur)
        fail("cudaDeviceGetMemPool is not the default pool although none was set");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
#define ATTR(a) pool_attr(paths, def, cur, (a))
    const uint64_t u0 = ATTR(cudaMemPoolAttrUsedMemCurrent);
    const uint64_t r0 = ATTR(cudaMemPoolAttrReservedMemCurrent);
    pool_set(def, cudaMemPoolAttrUsedMemHigh, 0);
    pool_set(def, cudaMemPoolAttrReservedMemHigh, 0);
    if (ATTR(cudaMemPoolAttrUsedMemHigh) != u0)
        fail("USED_MEM_HIGH after a reset is not USED_MEM_CURRENT %llu", (unsigned long long)u0);

    const size_t sizes[] = {1000, 3 * MiB + 5, 1, 4099, 25 * MiB, 1000};
    const int n = (int)(sizeof sizes / sizeof *sizes);
    void *p[n];
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        CK(cudaMallocAsync(&p[i], sizes[i], s));
        CK(cudaMemsetAsync(p[i], i, sizes[i], s));
        sum += sizes[i];
    }
    uint64_t used = ATTR(cudaMemPoolAttrUsedMemCurrent); // before any sync
    if (used != u0 + sum)
        fail("USED_MEM_CURRENT %llu after cudaMallocAsync of %llu B in all (before: %llu)",
             (unsigned long long)used, (unsigned long long)sum, (unsigned long long)u0);
    CK(cudaStreamSynchronize(s));
    used = ATTR(cudaMemPoolAttrUsedMemCurrent);
    uint64_t reserved = ATTR(cudaMemPoolAttrReservedMemCurrent);
    if (used != u0 + sum)
        fail("USED_MEM_CURRENT %llu after a sync, want %llu", (unsigned long long)used,
             (unsigned long long)(u0 + sum));
    if (reserved < used)
        fail("RESERVED_MEM_CURRENT %llu < USED_MEM_CURRENT %llu", (unsigned long long)reserved,
             (unsigned long long)used);
    // Free two; USED drops at once, before any sync.
    CK(cudaFreeAsync(p[1], s));
    CK(cudaFreeAsync(p[4], s));
    used = ATTR(cudaMemPoolAttrUsedMemCurrent);
    const uint64_t after_free = u0 + sum - sizes[1] - sizes[4];
    if (used != after_free)
        fail("USED_MEM_CURRENT %llu right after cudaFreeAsync, want %llu", (unsigned long long)used,
             (unsigned long long)after_free);
    uint64_t uhigh = ATTR(cudaMemPoolAttrUsedMemHigh);
    uint64_t rhigh = ATTR(cudaMemPoolAttrReservedMemHigh);
    reserved = ATTR(cudaMemPoolAttrReservedMemCurrent);
    if (uhigh != u0 + sum)
        fail("USED_MEM_HIGH %llu, want the peak %llu", (unsigned long long)uhigh,
             (unsigned long long)(u0 + sum));
    if (rhigh < reserved || rhigh < uhigh)
        fail("RESERVED_MEM_HIGH %llu below RESERVED_MEM_CURRENT %llu or USED_MEM_HIGH %llu",
             (unsigned long long)rhigh, (unsigned long long)reserved, (unsigned long long)uhigh);
    // Resetting the highs: 0 sets them to the current values, anything else is refused.
    pool_set(def, cudaMemPoolAttrUsedMemHigh, 0);
    pool_set(def, cudaMemPoolAttrReservedMemHigh, 0);
    used = ATTR(cudaMemPoolAttrUsedMemCurrent);
    reserved = ATTR(cudaMemPoolAttrReservedMemCurrent);
    if (ATTR(cudaMemPoolAttrUsedMemHigh) != used)
        fail("USED_MEM_HIGH after reset is not USED_MEM_CURRENT %llu", (unsigned long long)used);
    if (ATTR(cudaMemPoolAttrReservedMemHigh) != reserved)
        fail("RESERVED_MEM_HIGH after reset is not RESERVED_MEM_CURRENT %llu",
             (unsigned long long)reserved);
    cuuint64_t one = 1;
    cudaError_t e = cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &one);
    cudaGetLastError();
    if (e != cudaErrorInvalidValue)
        fail("setting USED_MEM_HIGH to 1 gave %s, want cudaErrorInvalidValue", cudaGetErrorName(e));
    e = cudaMemPoolSetAttribute(def, cudaMemPoolAttrReservedMemHigh, &one);
    cudaGetLastError();
    if (e != cudaErrorInvalidValue)
        fail("setting RESERVED_MEM_HIGH to 1 gave %s, want cudaErrorInvalidValue",
             cudaGetErrorName(e));
    // The release threshold: 0 by default, round trips, restored.
    const uint64_t thr0 = ATTR(cudaMemPoolAttrReleaseThreshold);
    if (thr0 != 0)
        fail("RELEASE_THRESHOLD %llu by default, want 0", (unsigned long long)thr0);
    pool_set(def, cudaMemPoolAttrReleaseThreshold, 64 * MiB);
    if (ATTR(cudaMemPoolAttrReleaseThreshold) != 64 * MiB)
        fail("RELEASE_THRESHOLD set to 64 MiB reads %llu",
             (unsigned long long)ATTR(cudaMemPoolAttrReleaseThreshold));
    pool_set(def, cudaMemPoolAttrReleaseThreshold, thr0);
    if (ATTR(cudaMemPoolAttrReleaseThreshold) != thr0)
        fail("RELEASE_THRESHOLD not restored to %llu", (unsigned long long)thr0);
    // Free the rest; after a sync, trimming never raises RESERVED.
    for (int i = 0; i < n; i++)
        if (i != 1 && i != 4)
            CK(cudaFreeAsync(p[i], s));
    used = ATTR(cudaMemPoolAttrUsedMemCurrent);
    if (used != u0)
        fail("USED_MEM_CURRENT %llu after every cudaFreeAsync, want %llu", (unsigned long long)used,
             (unsigned long long)u0);
    CK(cudaStreamSynchronize(s));
    const uint64_t before_trim = ATTR(cudaMemPoolAttrReservedMemCurrent);
    CK(cudaMemPoolTrimTo(def, 0));
    const uint64_t after_trim = ATTR(cudaMemPoolAttrReservedMemCurrent);
    used = ATTR(cudaMemPoolAttrUsedMemCurrent);
    if (after_trim > before_trim || after_trim < used)
        fail("cudaMemPoolTrimTo(0): RESERVED %llu -> %llu (USED %llu)",
             (unsigned long long)before_trim, (unsigned long long)after_trim,
             (unsigned long long)used);
#undef ATTR
    CK(cudaStreamDestroy(s));
    std::printf("VIEW pool: used before %llu, requested %llu B in %d cudaMallocAsync; reserved "
                "before %llu, high %llu; reserved before trim %llu, after %llu (%s); release "
                "threshold %llu\n",
                (unsigned long long)u0, (unsigned long long)sum, n, (unsigned long long)r0,
                (unsigned long long)rhigh, (unsigned long long)before_trim,
                (unsigned long long)after_trim, after_trim < before_trim ? "lowered" : "same",
                (unsigned long long)thr0);
    char note[160];
    std::snprintf(note, sizeof note, "pool used %llu = sum, trim %llu -> %llu",
                  (unsigned long long)(u0 + sum), (unsigned long long)before_trim,
                  (unsigned long long)after_trim);
    return note;
}

// ---- graph --------------------------------------------------------------------------

__global__ void fill_kernel(int *p, int n, int salt)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = i * 3 + salt;
}

__global__ void twice_kernel(int *out, const int *in, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] * 2 + 1;
}

// Compares host[0..n) with (i*3+salt)*2+1; returns the number of wrong words.
static int wrong_words(const int *host, int n, int salt)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += host[i] != (i * 3 + salt) * 2 + 1;
    return bad;
}

// Counts the nodes of g of type t.
static int nodes_of(cudaGraph_t g, cudaGraphNodeType t, int *total)
{
    size_t n = 0;
    CK(cudaGraphGetNodes(g, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n)
        CK(cudaGraphGetNodes(g, nodes.data(), &n));
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        cudaGraphNodeType ty;
        CK(cudaGraphNodeGetType(nodes[i], &ty));
        k += ty == t;
    }
    *total = (int)n;
    return k;
}

static void launch_and_check(cudaGraphExec_t ge, cudaStream_t s, int *host, int n, int salt,
                             const char *what)
{
    for (int round = 0; round < 3; round++) {
        std::memset(host, 0, n * sizeof *host);
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        int bad = wrong_words(host, n, salt);
        if (bad)
            fail("%s graph, launch %d: %d of %d words wrong", what, round + 1, bad, n);
    }
}

static std::string run_graph()
{
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(int);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *host = nullptr;
    CK(cudaMallocHost(&host, bytes));

    // 1. cudaMallocAsync / cudaFreeAsync inside a global-mode capture.
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    int *a = nullptr, *b = nullptr;
    CK(cudaMallocAsync(&a, bytes, s));
    CK(cudaMallocAsync(&b, bytes + 4096, s));
    fill_kernel<<<256, 256, 0, s>>>(a, n, 17);
    twice_kernel<<<256, 256, 0, s>>>(b, a, n);
    CK(cudaMemcpyAsync(host, b, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(a, s));
    CK(cudaFreeAsync(b, s));
    CK(cudaStreamEndCapture(s, &g));
    int total = 0, frees_total = 0;
    int allocs = nodes_of(g, cudaGraphNodeTypeMemAlloc, &total);
    int frees = nodes_of(g, cudaGraphNodeTypeMemFree, &frees_total);
    std::printf("VIEW graph nodes: %d in all, %d allocation nodes, %d free nodes\n", total, allocs,
                frees);
    CK(cudaGraphInstantiate(&ge, g, 0));
    launch_and_check(ge, s, host, n, 17, "allocating");
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));

    // 2. A relaxed capture over a buffer from before it and one cudaMalloc'd during it.
    int *before = nullptr, *during = nullptr;
    CK(cudaMalloc(&before, bytes));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CK(cudaMalloc(&during, bytes));
    fill_kernel<<<256, 256, 0, s>>>(before, n, 5);
    twice_kernel<<<256, 256, 0, s>>>(during, before, n);
    CK(cudaMemcpyAsync(host, during, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    launch_and_check(ge, s, host, n, 5, "relaxed");
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(during));
    CK(cudaFree(before));
    CK(cudaFreeHost(host));
    CK(cudaStreamDestroy(s));
    return "graph 6 launches";
}

int main(int argc, char **argv)
{
    std::string mode = argc > 1 ? argv[1] : "all";
    if (mode != "all" && mode != "ranges" && mode != "pool" && mode != "graph") {
        std::printf("usage: driver_view [all|ranges|pool|graph]\n");
        return 2;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr)); // the primary context, current from here on
    if (cuCtxGetCurrent(&g_ctx) != CUDA_SUCCESS || !g_ctx) {
        std::printf("CHECK driver_view FAIL no current context after cudaFree(0)\n");
        return 1;
    }
    std::vector<Api> paths = driver_paths();
    std::string note;
    if (mode == "all" || mode == "ranges")
        note += run_ranges(paths) + "; ";
    if (mode == "all" || mode == "pool")
        note += run_pool(paths) + "; ";
    if (mode == "all" || mode == "graph")
        note += run_graph() + "; ";
    if (paths.size() != 3)
        fail("only %zu of the 3 ways to the driver were found", paths.size());
    if (g_failures) {
        std::printf("CHECK driver_view FAIL %d mismatches; first: %s\n", g_failures,
                    g_first.c_str());
        return 1;
    }
    std::printf("CHECK driver_view OK %s%zu paths\n", note.c_str(), paths.size());
    return 0;
}
