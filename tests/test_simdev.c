/* tests/test_simdev.c: the simulated device (simdev/, libcuda.so.1) on its
 * own, linked as -lcuda, with two devices (FRAGPOOL_SIM_DEVICES=2, set in
 * main before the first driver call).
 *
 * Timing-based checks use a host function that sleeps 50 ms as a "slow
 * kernel"; they only assert orderings that hold however slow the machine
 * is (e.g. "not finished right after submission" is checked against work
 * that cannot finish before a later barrier releases it).  The one
 * exception: "cuStreamDestroy returned before the queued 100 ms host
 * function ran" assumes the destroy takes less than 100 ms.
 *
 * "test_simdev destroy-exit" is a child mode: it destroys streams with
 * work in flight and exits (test_destroy_many_and_exit).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp_cuda.h"
#include "fpsim.h"

#define MiB ((size_t)1 << 20)
#define OK(call) assert_int_equal((call), CUDA_SUCCESS)

static CUcontext g_ctx0;   /* primary context of device 0, current */

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- host functions used as kernels --------------------------------------- */

typedef struct gate {            /* a host function that blocks until opened */
  atomic_int open;
  atomic_int ran;
} gate;

static void gate_fn(void *arg)
{
  gate *g = arg;
  while (!atomic_load(&g->open))
    sleep_ms(1);
  atomic_store(&g->ran, 1);
}

typedef struct slow_write {      /* sleeps, then writes a value */
  int ms;
  int *where;
  int value;
  atomic_int done;
} slow_write;

static void slow_write_fn(void *arg)
{
  slow_write *w = arg;
  sleep_ms(w->ms);
  if (w->where != NULL)
    *w->where = w->value;
  atomic_store(&w->done, 1);
}

typedef struct observe {         /* records whether a flag was set */
  atomic_int *flag;
  atomic_int seen;
  atomic_int ran;
} observe;

static void observe_fn(void *arg)
{
  observe *o = arg;
  atomic_store(&o->seen, atomic_load(o->flag));
  atomic_store(&o->ran, 1);
}

static void set_flag_fn(void *arg)
{
  sleep_ms(50);
  atomic_store((atomic_int *)arg, 1);
}

static fpsim_counts stats(int dev)
{
  fpsim_counts c;
  assert_int_equal(fpsim_stats(dev, &c), 0);
  return c;
}

/* ---- before cuInit ------------------------------------------------------------ */

static void test_before_init(void **state)
{
  (void)state;
  CUdeviceptr p = 0;
  int v = 0;
  void *fn = NULL;
  assert_int_equal(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(cuDeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED);
  OK(cuDriverGetVersion(&v));
  assert_int_equal(v, 13000);
  OK(cuGetProcAddress_v2("cuInit", &fn, 12000, 0, NULL));   /* pre-init ok */
  assert_ptr_equal(fn, dlsym(RTLD_DEFAULT, "cuInit"));
  assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

/* ---- devices -------------------------------------------------------------------- */

static void test_devices(void **state)
{
  (void)state;
  int n = 0, v = 0;
  char name[64];
  size_t total = 0;
  CUdevice d = -1;
  CUuuid u0, u1;
  OK(cuDeviceGetCount(&n));
  assert_int_equal(n, 2);
  assert_int_equal(fpsim_device_count(), 2);
  OK(cuDeviceGet(&d, 1));
  assert_int_equal(d, 1);
  assert_int_equal(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  OK(cuDeviceGetName(name, sizeof name, 0));
  assert_string_equal(name, "fragpool simulated device");
  OK(cuDeviceGetName(name, 9, 0));
  assert_string_equal(name, "fragpool");
  OK(cuDeviceTotalMem_v2(&total, 1));
  assert_int_equal(total, (size_t)16384 * MiB);
  OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  assert_int_equal(v, 9);
  OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  assert_int_equal(v, 0);
  OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0));
  assert_int_equal(v, 512);
  OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1));
  assert_true(v > 0);
  assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5),
                   CUDA_ERROR_INVALID_DEVICE);
  OK(cuDeviceGetUuid(&u0, 0));
  OK(cuDeviceGetUuid_v2(&u1, 1));
  assert_memory_not_equal(u0.bytes, u1.bytes, 16);
}

static void test_error_strings(void **state)
{
  (void)state;
  const char *s = NULL;
  OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
  OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
  assert_string_equal(s, "invalid argument");
  OK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, &s));
  assert_int_equal(cuGetErrorString((CUresult)12345, &s),
                   CUDA_ERROR_INVALID_VALUE);
  assert_null(s);
  assert_int_equal(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- memory ---------------------------------------------------------------------- */

static void test_alloc_copy_roundtrip(void **state)
{
  (void)state;
  CUdeviceptr a = 0, b = 0, big = 0, base = 0;
  size_t size = 0;
  unsigned char host[4096], back[4096];
  for (size_t i = 0; i < sizeof host; i++)
    host[i] = (unsigned char)(i * 7 + 3);
  fpsim_counts c0 = stats(0);
  OK(cuMemAlloc_v2(&a, sizeof host));
  OK(cuMemAlloc_v2(&b, sizeof host));
  assert_int_equal(a % 512, 0);
  OK(cuMemAlloc_v2(&big, 3 * MiB));
  assert_int_equal(big % (2 * MiB), 0);
  OK(cuMemcpyHtoD_v2(a, host, sizeof host));
  OK(cuMemcpyDtoD_v2(b, a, sizeof host));
  OK(cuMemcpyDtoH_v2(back, b, sizeof host));
  assert_memory_equal(host, back, sizeof host);
  assert_memory_equal((void *)(uintptr_t)a, host, sizeof host); /* ptr == host */
  OK(cuMemcpy(big + 100, a, sizeof host));                       /* unified */
  OK(cuMemcpy((CUdeviceptr)(uintptr_t)back, big + 100, 16));
  assert_memory_equal(back, host, 16);
  OK(cuMemsetD8_v2(a, 0xab, 10));
  OK(cuMemsetD32_v2(a + 16, 0x01020304u, 4));
  OK(cuMemcpyDtoH_v2(back, a, 32));
  assert_int_equal(back[9], 0xab);
  assert_int_equal(back[10], host[10]);
  unsigned w;
  memcpy(&w, back + 20, 4);
  assert_int_equal(w, 0x01020304u);
  assert_int_equal(cuMemsetD32_v2(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyHtoD_v2(a + 4000, host, 200), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyHtoD_v2(a, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  OK(cuMemcpyHtoD_v2(a, NULL, 0));
  OK(cuMemGetAddressRange_v2(&base, &size, big + 12345));
  assert_int_equal(base, big);
  assert_int_equal(size, 3 * MiB);
  OK(cuMemGetAddressRange_v2(NULL, &size, a + 1));
  assert_int_equal(size, sizeof host);
  assert_int_equal(cuMemGetAddressRange_v2(&base, &size, 16), CUDA_ERROR_NOT_FOUND);
  fpsim_counts c1 = stats(0);
  assert_int_equal(c1.live_allocations, c0.live_allocations + 3);
  assert_int_equal(c1.bytes_in_use, c0.bytes_in_use + 2 * 4096 + 4 * MiB);
  OK(cuMemFree_v2(a));
  OK(cuMemFree_v2(b));
  OK(cuMemFree_v2(big));
  fpsim_counts c2 = stats(0);
  assert_int_equal(c2.live_allocations, c0.live_allocations);
  assert_int_equal(c2.bytes_in_use, c0.bytes_in_use);
  assert_int_equal(c2.free_calls, c0.free_calls + 3);
}

static void test_pointer_attributes(void **state)
{
  (void)state;
  CUdeviceptr d = 0, m = 0, start = 0, dp = 0;
  void *h = NULL, *hp = NULL;
  CUcontext ctx = NULL;
  unsigned type = 0, managed = 7;
  int ordinal = -1;
  size_t range = 0;
  OK(cuMemAlloc_v2(&d, 1000));
  OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d));
  assert_ptr_equal(ctx, g_ctx0);
  OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
  assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
  OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 10));
  assert_int_equal(dp, d + 10);
  OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 999));
  assert_int_equal(start, d);
  OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 999));
  assert_int_equal(range, 1000);
  OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
  assert_int_equal(ordinal, 0);
  OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
  assert_int_equal(managed, 0);
  assert_int_equal(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 1000),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_CONTEXT, d),
                   CUDA_ERROR_INVALID_VALUE);
  OK(cuMemAllocManaged(&m, 64, CU_MEM_ATTACH_GLOBAL));
  OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
  assert_int_equal(managed, 1);
  assert_int_equal(cuMemAllocManaged(&m, 64, 0), CUDA_ERROR_INVALID_VALUE);
  OK(cuMemAllocHost_v2(&h, 100));
  OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                           (CUdeviceptr)(uintptr_t)h));
  assert_int_equal(type, CU_MEMORYTYPE_HOST);
  OK(cuMemHostGetDevicePointer_v2(&dp, h, 0));
  assert_int_equal(dp, (CUdeviceptr)(uintptr_t)h);
  /* plural form: unknown pointers read as zero */
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  void *data[2] = {&type, &start};
  OK(cuPointerGetAttributes(2, attrs, data, 8));
  assert_int_equal(type, 0);
  assert_int_equal(start, 0);
  OK(cuPointerGetAttributes(2, attrs, data, d + 5));
  assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
  assert_int_equal(start, d);
  assert_int_equal(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
  OK(cuMemFreeHost(h));
  OK(cuMemFree_v2(m));
  OK(cuMemFree_v2(d));
}

static void test_bad_frees_and_args(void **state)
{
  (void)state;
  CUdeviceptr p = 0;
  int local = 0;
  OK(cuMemAlloc_v2(&p, 4096));
  assert_int_equal(cuMemFree_v2(p + 512), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree_v2((CUdeviceptr)(uintptr_t)&local),
                   CUDA_ERROR_INVALID_VALUE);
  OK(cuMemFree_v2(p));
  assert_int_equal(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);   /* double */
  OK(cuMemFree_v2(0));
  assert_int_equal(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc_v2(&p, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
}

static void test_capacity_oom(void **state)
{
  (void)state;
  CUdeviceptr a = 0, b = 0;
  size_t free_b = 0, total_b = 0;
  fpsim_counts c0 = stats(0);
  assert_int_equal(fpsim_set_capacity(0, c0.bytes_in_use + 8 * MiB), 0);
  OK(cuMemAlloc_v2(&a, 6 * MiB));
  assert_int_equal(cuMemAlloc_v2(&b, 4 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
  OK(cuMemGetInfo_v2(&free_b, &total_b));
  assert_int_equal(free_b, 2 * MiB);
  assert_int_equal(total_b, c0.bytes_in_use + 8 * MiB);
  OK(cuMemGetInfo_v2(NULL, &total_b));
  OK(cuMemGetInfo_v2(NULL, NULL));
  OK(cuMemAlloc_v2(&b, 2 * MiB));             /* exactly fills it */
  OK(cuMemGetInfo_v2(&free_b, NULL));
  assert_int_equal(free_b, 0);
  fpsim_counts c1 = stats(0);
  assert_int_equal(c1.alloc_failures, c0.alloc_failures + 1);
  assert_int_equal(c1.alloc_calls, c0.alloc_calls + 3);
  assert_int_equal(fpsim_set_capacity(7, MiB), -1);   /* no such device */
  OK(cuMemFree_v2(a));
  OK(cuMemFree_v2(b));
  assert_int_equal(fpsim_set_capacity(0, 16384 * MiB), 0);
}

static void test_fail_nth(void **state)
{
  (void)state;
  CUdeviceptr p[4] = {0};
  size_t pitch = 0;
  fpsim_fail_nth(3);
  OK(cuMemAlloc_v2(&p[0], 100));
  OK(cuMemAllocPitch_v2(&p[1], &pitch, 64, 4, 4));
  assert_int_equal(cuMemAlloc_v2(&p[2], 100), CUDA_ERROR_OUT_OF_MEMORY);
  OK(cuMemAlloc_v2(&p[2], 100));                  /* only once */
  OK(cuMemAllocManaged(&p[3], 100, CU_MEM_ATTACH_GLOBAL));
  for (int i = 0; i < 4; i++)
    OK(cuMemFree_v2(p[i]));
  fpsim_fail_nth(1);
  assert_int_equal(cuMemAllocAsync(&p[0], 100, NULL), CUDA_ERROR_OUT_OF_MEMORY);
  fpsim_fail_nth(0);
}

static void test_pitch(void **state)
{
  (void)state;
  CUdeviceptr p = 0, base = 0;
  size_t pitch = 0, size = 0;
  OK(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 4));
  assert_int_equal(pitch, 512);
  OK(cuMemGetAddressRange_v2(&base, &size, p));
  assert_int_equal(size, 512 * 10);
  OK(cuMemFree_v2(p));
  OK(cuMemAllocPitch_v2(&p, &pitch, 513, 3, 16));
  assert_int_equal(pitch, 1024);
  OK(cuMemFree_v2(p));
  assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, 100, 0, 8), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAllocPitch_v2(&p, NULL, 100, 1, 8), CUDA_ERROR_INVALID_VALUE);
  /* widths past 2^31 - 1, as the H200's driver takes them (issue 15, 18a):
   * 2^31 succeeds with pitch 2^31, 2^40 is out of memory, and a width
   * whose rounding would wrap is out of memory too, not a crash */
  OK(cuMemAllocPitch_v2(&p, &pitch, (size_t)1 << 31, 1, 4));
  assert_int_equal(pitch, (size_t)1 << 31);
  OK(cuMemFree_v2(p));
  assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, (size_t)1 << 40, 1, 4),
                   CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, SIZE_MAX - 10, 1, 4),
                   CUDA_ERROR_OUT_OF_MEMORY);
}

/* ---- cuGetProcAddress -------------------------------------------------------------- */

static void *sim_sym(const char *name)
{
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(lib);
  void *p = dlsym(lib, name);
  dlclose(lib);
  return p;
}

static void expect_proc(const char *sym, int ver, cuuint64_t flags,
                        const char *want)
{
  void *fn = (void *)1;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  OK(cuGetProcAddress_v2(sym, &fn, ver, flags, &st));
  assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
  assert_non_null(sim_sym(want));
  assert_ptr_equal(fn, sim_sym(want));
}

static void test_proc_address(void **state)
{
  (void)state;
  const cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  expect_proc("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
  expect_proc("cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemAlloc_v2");
  expect_proc("cuMemAlloc", 12000, PT, "cuMemAlloc_v2");       /* no ptsz form */
  expect_proc("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
  expect_proc("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
  expect_proc("cuCtxSynchronize", 12080, 0, "cuCtxSynchronize");
  expect_proc("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2");
  expect_proc("cuStreamSynchronize", 12000, 0, "cuStreamSynchronize");
  expect_proc("cuStreamSynchronize", 12000, PT, "cuStreamSynchronize_ptsz");
  expect_proc("cuStreamSynchronize", 6050, PT, "cuStreamSynchronize"); /* ptsz: 7000 */
  expect_proc("cuMemcpyHtoD", 12000, PT, "cuMemcpyHtoD_v2_ptds");
  expect_proc("cuMemcpyHtoDAsync", 12000, PT, "cuMemcpyHtoDAsync_v2_ptsz");
  expect_proc("cuMemAllocAsync", 11020, PT, "cuMemAllocAsync_ptsz");
  expect_proc("cuMemFreeAsync", 12000, 0, "cuMemFreeAsync");
  expect_proc("cuLaunchHostFunc", 12000, PT, "cuLaunchHostFunc_ptsz");
  expect_proc("cuEventRecord", 12000, PT, "cuEventRecord_ptsz");
  expect_proc("cuMemsetD8Async", 12000, PT, "cuMemsetD8Async_ptsz");
  expect_proc("cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture");
  expect_proc("cuStreamBeginCapture", 12000, PT, "cuStreamBeginCapture_v2_ptsz");
  expect_proc("cuStreamGetCaptureInfo", 11030, 0, "cuStreamGetCaptureInfo_v2");
  expect_proc("cuStreamGetCaptureInfo", 12030, PT, "cuStreamGetCaptureInfo_v3_ptsz");
  expect_proc("cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2");
  expect_proc("cuDevicePrimaryCtxRelease", 10020, 0, "cuDevicePrimaryCtxRelease");

  void *fn = (void *)1;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  assert_int_equal(cuGetProcAddress_v2("cuMemAlloc", &fn, 2000, 0, &st),
                   CUDA_ERROR_NOT_FOUND);
  assert_null(fn);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  fn = (void *)1;
  assert_int_equal(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 12000, 0, &st),
                   CUDA_ERROR_NOT_FOUND);
  assert_null(fn);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  assert_int_equal(cuGetProcAddress_v2("cuMemAlloc_v2", &fn, 12000, 0, &st),
                   CUDA_ERROR_NOT_FOUND);                /* base names only */
  assert_int_equal(cuGetProcAddress("cuGetExportTable", &fn, 12000, 0),
                   CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuGetProcAddress_v2("cuInit", &fn, 12000, 4, &st),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGetProcAddress_v2("cuInit", &fn, 13010, 0, &st),
                   CUDA_ERROR_INVALID_VALUE);            /* newer than driver */
  assert_int_equal(cuGetProcAddress_v2(NULL, &fn, 12000, 0, &st),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGetProcAddress_v2("cuInit", NULL, 12000, 0, &st),
                   CUDA_ERROR_INVALID_VALUE);
  assert_null(sim_sym("cuGetExportTable"));
  assert_null(sim_sym("sim_setup"));                     /* nothing internal */

  /* the pointers work */
  fp_PFN_cuMemAlloc_v2 alloc = NULL;
  fp_PFN_cuMemFree_v2 release = NULL;
  OK(cuGetProcAddress("cuMemAlloc", (void **)&alloc, 12000, 0));
  OK(cuGetProcAddress("cuMemFree", (void **)&release, 12000, 0));
  CUdeviceptr p = 0;
  OK(alloc(&p, 64));
  OK(release(p));
}

/* ---- streams ---------------------------------------------------------------------- */

static void test_stream_async_and_events(void **state)
{
  (void)state;
  CUstream s = NULL;
  CUevent start = NULL, end = NULL;
  CUdeviceptr d = 0;
  int out = 0;
  gate g = {0};
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  OK(cuEventCreate(&end, CU_EVENT_DEFAULT));
  OK(cuEventQuery(end));                           /* never recorded */
  OK(cuMemAlloc_v2(&d, sizeof(int)));
  OK(cuMemsetD32_v2(d, 0, 1));
  slow_write w = {.ms = 50, .where = (int *)(uintptr_t)d, .value = 42};
  OK(cuEventRecord(start, s));
  OK(cuLaunchHostFunc(s, gate_fn, &g));
  OK(cuLaunchHostFunc(s, slow_write_fn, &w));
  OK(cuMemcpyDtoHAsync_v2(&out, d, sizeof out, s));
  OK(cuEventRecord(end, s));
  assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  assert_int_equal(cuEventQuery(end), CUDA_ERROR_NOT_READY);
  OK(cuEventSynchronize(start));    /* earlier work completes, later waits */
  sleep_ms(20);
  assert_int_equal(cuEventQuery(end), CUDA_ERROR_NOT_READY);  /* gate shut */
  assert_int_equal(atomic_load(&w.done), 0);
  atomic_store(&g.open, 1);
  OK(cuEventSynchronize(end));
  assert_int_equal(out, 42);
  OK(cuStreamQuery(s));
  float ms = 0;
  OK(cuEventElapsedTime(&ms, start, end));
  assert_true(ms >= 45.0f);
  OK(cuEventDestroy_v2(start));
  OK(cuEventDestroy_v2(end));
  assert_int_equal(cuEventQuery(end), CUDA_ERROR_INVALID_HANDLE);
  OK(cuStreamDestroy_v2(s));
  assert_int_equal(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  OK(cuMemFree_v2(d));
}

typedef struct order_probe {
  CUevent e[8];
  atomic_int stop;
  atomic_int violations;
} order_probe;

static void *order_poller(void *arg)
{
  order_probe *p = arg;
  while (!atomic_load(&p->stop))
    for (int i = 1; i < 8; i++)
      if (cuEventQuery(p->e[i]) == CUDA_SUCCESS &&
          cuEventQuery(p->e[i - 1]) != CUDA_SUCCESS)
        atomic_fetch_add(&p->violations, 1);
  return NULL;
}

static void test_events_in_stream_order(void **state)
{
  (void)state;
  CUstream s = NULL;
  order_probe p = {0};
  slow_write w[8];
  OK(cuStreamCreate(&s, 0));
  for (int i = 0; i < 8; i++) {
    OK(cuEventCreate(&p.e[i], CU_EVENT_DISABLE_TIMING));
    w[i] = (slow_write){.ms = 5};
  }
  gate g = {0};
  /* record everything first: a never-recorded event counts as complete */
  OK(cuLaunchHostFunc(s, gate_fn, &g));
  for (int i = 0; i < 8; i++) {
    OK(cuLaunchHostFunc(s, slow_write_fn, &w[i]));
    OK(cuEventRecord(p.e[i], s));
  }
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, order_poller, &p), 0);
  atomic_store(&g.open, 1);
  OK(cuStreamSynchronize(s));
  atomic_store(&p.stop, 1);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&p.violations), 0);
  float ms;
  assert_int_equal(cuEventElapsedTime(&ms, p.e[0], p.e[1]), CUDA_ERROR_INVALID_HANDLE);
  for (int i = 0; i < 8; i++)
    OK(cuEventDestroy_v2(p.e[i]));
  OK(cuStreamDestroy_v2(s));
}

static void test_stream_wait_event(void **state)
{
  (void)state;
  CUstream a = NULL, b = NULL;
  CUevent e = NULL;
  gate g = {0};
  atomic_int flag = 0;
  observe o = {.flag = &flag};
  OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  OK(cuLaunchHostFunc(a, gate_fn, &g));
  OK(cuLaunchHostFunc(a, set_flag_fn, &flag));
  OK(cuEventRecord(e, a));
  OK(cuStreamWaitEvent(b, e, 0));
  OK(cuLaunchHostFunc(b, observe_fn, &o));
  assert_int_equal(cuStreamQuery(b), CUDA_ERROR_NOT_READY);  /* gate shut */
  atomic_store(&g.open, 1);
  OK(cuStreamSynchronize(b));
  assert_int_equal(atomic_load(&o.seen), 1);
  assert_int_equal(cuStreamWaitEvent(b, e, 2), CUDA_ERROR_INVALID_VALUE);
  OK(cuEventDestroy_v2(e));
  OK(cuStreamDestroy_v2(a));
  OK(cuStreamDestroy_v2(b));
}

static void test_legacy_stream_semantics(void **state)
{
  (void)state;
  CUstream blocking = NULL, nonblocking = NULL;
  atomic_int a = 0, b = 0, c = 0;
  gate g = {0};
  observe oa = {.flag = &a}, ob = {.flag = &b}, oc = {.flag = &c};
  OK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  OK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
  /* legacy work waits for earlier work of blocking streams ... */
  OK(cuLaunchHostFunc(blocking, set_flag_fn, &a));
  OK(cuLaunchHostFunc(NULL, observe_fn, &oa));
  /* ... but not for non-blocking streams */
  OK(cuLaunchHostFunc(nonblocking, gate_fn, &g));
  OK(cuLaunchHostFunc(nonblocking, set_flag_fn, &b));
  OK(cuLaunchHostFunc(CU_STREAM_LEGACY, observe_fn, &ob));
  OK(cuStreamSynchronize(NULL));
  assert_int_equal(atomic_load(&oa.seen), 1);
  assert_int_equal(atomic_load(&ob.ran), 1);
  assert_int_equal(atomic_load(&ob.seen), 0);
  assert_int_equal(atomic_load(&g.ran), 0);     /* still blocked */
  /* work on a blocking stream waits for earlier legacy work */
  OK(cuLaunchHostFunc(NULL, set_flag_fn, &c));
  OK(cuLaunchHostFunc(blocking, observe_fn, &oc));
  OK(cuStreamSynchronize(blocking));
  assert_int_equal(atomic_load(&oc.seen), 1);
  /* a synchronous copy waits for earlier blocking-stream work */
  CUdeviceptr d = 0;
  int out = 0;
  OK(cuMemAlloc_v2(&d, sizeof(int)));
  OK(cuMemsetD32_v2(d, 0, 1));
  slow_write w = {.ms = 50, .where = (int *)(uintptr_t)d, .value = 7};
  OK(cuLaunchHostFunc(blocking, slow_write_fn, &w));
  OK(cuMemcpyDtoH_v2(&out, d, sizeof out));
  assert_int_equal(out, 7);
  /* cuMemFree synchronizes the whole device, non-blocking streams too */
  fpsim_counts c0 = stats(0);
  atomic_store(&g.open, 1);
  OK(cuMemFree_v2(d));
  assert_int_equal(atomic_load(&b), 1);
  assert_int_equal(stats(0).device_syncs, c0.device_syncs + 1);
  OK(cuStreamDestroy_v2(blocking));
  OK(cuStreamDestroy_v2(nonblocking));
}

static void test_per_thread_stream(void **state)
{
  (void)state;
  gate g = {0};
  atomic_int flag = 0;
  observe o = {.flag = &flag};
  CUdeviceptr d = 0;
  unsigned flags = 99;
  OK(cuLaunchHostFunc_ptsz(NULL, gate_fn, &g));
  assert_int_equal(cuStreamQuery_ptsz(NULL), CUDA_ERROR_NOT_READY);
  assert_int_equal(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  OK(cuStreamGetFlags_ptsz(NULL, &flags));
  assert_int_equal(flags, 0);
  /* the per-thread stream is blocking: legacy work waits for it */
  OK(cuLaunchHostFunc_ptsz(NULL, set_flag_fn, &flag));
  OK(cuLaunchHostFunc(NULL, observe_fn, &o));
  atomic_store(&g.open, 1);
  OK(cuStreamSynchronize(NULL));
  assert_int_equal(atomic_load(&o.seen), 1);
  OK(cuStreamSynchronize_ptsz(NULL));
  OK(cuMemAllocAsync_ptsz(&d, 256, NULL));
  OK(cuMemsetD8Async_ptsz(d, 1, 256, NULL));
  OK(cuMemFreeAsync_ptsz(d, NULL));
  OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

static void test_stream_ordered_alloc(void **state)
{
  (void)state;
  CUstream s = NULL;
  CUdeviceptr d = 0;
  gate g = {0};
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  fpsim_counts c0 = stats(0);
  OK(cuMemAllocAsync(&d, 3000, s));
  OK(cuMemsetD8Async(d, 0x5a, 3000, s));
  OK(cuLaunchHostFunc(s, gate_fn, &g));
  OK(cuMemFreeAsync(d, s));
  fpsim_counts c1 = stats(0);
  assert_int_equal(c1.async_alloc_calls, c0.async_alloc_calls + 1);
  assert_int_equal(c1.live_allocations, c0.live_allocations + 1); /* pending */
  assert_int_equal(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE);
  atomic_store(&g.open, 1);
  OK(cuStreamSynchronize(s));
  fpsim_counts c2 = stats(0);
  assert_int_equal(c2.live_allocations, c0.live_allocations);
  assert_int_equal(c2.bytes_in_use, c0.bytes_in_use);
  assert_int_equal(c2.async_free_calls, c0.async_free_calls + 1);
  /* cuMemFree of a stream-ordered allocation does not synchronize */
  OK(cuMemAllocAsync(&d, 100, s));
  OK(cuStreamSynchronize(s));
  OK(cuMemFree_v2(d));
  assert_int_equal(stats(0).device_syncs, c2.device_syncs);
  OK(cuStreamDestroy_v2(s));
}

/* Polls until device dev has no draining stream left: their workers reap
 * them after the last queued operation.  False after about 10 s. */
static bool drained(int dev)
{
  for (int i = 0; i < 10000; i++) {
    if (stats(dev).streams_draining == 0)
      return true;
    sleep_ms(1);
  }
  return false;
}

/* Like the real driver, cuStreamDestroy returns at once; the queued work
 * still runs, in order, and an event recorded before completes later. */
static void test_stream_destroy_returns(void **state)
{
  (void)state;
  CUstream s = NULL;
  CUevent e = NULL;
  CUdeviceptr d = 0, a = 0;
  int prio = 1, lo = 1, hi = 1, out = 0, back = 0;
  unsigned flags = 0;
  OK(cuCtxGetStreamPriorityRange(&lo, &hi));
  OK(cuStreamCreateWithPriority(&s, 0, -100));
  OK(cuStreamGetPriority(s, &prio));
  assert_int_equal(prio, hi);
  OK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  OK(cuMemAlloc_v2(&d, sizeof(int)));
  slow_write w = {.ms = 100, .where = (int *)(uintptr_t)d, .value = 42};
  fpsim_counts c0 = stats(0);
  OK(cuMemAllocAsync(&a, sizeof(int), s));
  OK(cuLaunchHostFunc(s, slow_write_fn, &w));           /* d = 42 */
  OK(cuMemcpyDtoDAsync_v2(a, d, sizeof(int), s));       /* a = 42 */
  OK(cuMemsetD32Async(d, 7, 1, s));                     /* d = 7 */
  OK(cuMemcpyDtoHAsync_v2(&out, a, sizeof out, s));     /* out = 42 */
  OK(cuMemFreeAsync(a, s));
  OK(cuEventRecord(e, s));
  OK(cuStreamDestroy_v2(s));
  assert_int_equal(atomic_load(&w.done), 0);            /* did not wait */
  fpsim_counts c1 = stats(0);
  assert_int_equal(c1.streams_live, c0.streams_live - 1);
  assert_int_equal(c1.streams_draining, c0.streams_draining + 1);
  assert_int_equal(c1.live_allocations, c0.live_allocations + 1);  /* a */
  /* the handle is invalid at once */
  assert_int_equal(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuStreamGetFlags(s, &flags), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuLaunchHostFunc(s, slow_write_fn, &w),
                   CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuMemsetD32Async(d, 1, 1, s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  /* the event recorded before the destroy completes after the work */
  assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  OK(cuEventSynchronize(e));
  assert_int_equal(atomic_load(&w.done), 1);
  assert_int_equal(out, 42);
  OK(cuMemcpyDtoH_v2(&back, d, sizeof back));
  assert_int_equal(back, 7);
  OK(cuEventQuery(e));
  assert_true(drained(0));
  assert_int_equal(stats(0).live_allocations, c0.live_allocations);
  /* an idle stream goes at once, with nothing to drain */
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  OK(cuLaunchHostFunc(s, slow_write_fn, &(slow_write){.ms = 0}));
  OK(cuStreamSynchronize(s));
  OK(cuStreamDestroy_v2(s));
  assert_int_equal(stats(0).streams_draining, c0.streams_draining);
  OK(cuEventDestroy_v2(e));
  OK(cuMemFree_v2(d));
  assert_int_equal(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuStreamCreate(&s, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchHostFunc((CUstream)&w, slow_write_fn, &w),
                   CUDA_ERROR_INVALID_HANDLE);
}

/* Device-wide waits and legacy ordering still see a destroyed stream's
 * queued work. */
static void test_destroyed_stream_syncs(void **state)
{
  (void)state;
  CUstream s = NULL, b = NULL;
  CUevent e = NULL;
  CUdeviceptr d = 0;
  slow_write w1 = {.ms = 100}, w2 = {.ms = 100};
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  OK(cuLaunchHostFunc(s, slow_write_fn, &w1));
  OK(cuStreamDestroy_v2(s));
  assert_int_equal(atomic_load(&w1.done), 0);
  OK(cuCtxSynchronize());
  assert_int_equal(atomic_load(&w1.done), 1);
  /* cuMemFree synchronizes the device, destroyed streams included */
  OK(cuMemAlloc_v2(&d, 64));
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  OK(cuLaunchHostFunc(s, slow_write_fn, &w2));
  OK(cuStreamDestroy_v2(s));
  assert_int_equal(atomic_load(&w2.done), 0);
  OK(cuMemFree_v2(d));
  assert_int_equal(atomic_load(&w2.done), 1);
  /* legacy work, and a wait on its event, wait for a destroyed blocking
   * stream; the destroy itself returns with the gate still shut */
  gate g = {0};
  atomic_int flag = 0;
  observe ol = {.flag = &flag}, ow = {.flag = &flag};
  OK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
  OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  OK(cuLaunchHostFunc(s, gate_fn, &g));
  OK(cuLaunchHostFunc(s, set_flag_fn, &flag));
  OK(cuEventRecord(e, s));
  OK(cuStreamDestroy_v2(s));
  assert_int_equal(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
  OK(cuLaunchHostFunc(NULL, observe_fn, &ol));
  OK(cuStreamWaitEvent(b, e, 0));
  OK(cuLaunchHostFunc(b, observe_fn, &ow));
  sleep_ms(20);
  assert_int_equal(atomic_load(&ol.ran) + atomic_load(&ow.ran), 0);
  atomic_store(&g.open, 1);
  OK(cuStreamSynchronize(NULL));
  OK(cuStreamSynchronize(b));
  assert_int_equal(atomic_load(&ol.seen), 1);
  assert_int_equal(atomic_load(&ow.seen), 1);
  OK(cuEventDestroy_v2(e));
  OK(cuStreamDestroy_v2(b));
  assert_true(drained(0));
}

enum { kDrainStreams = 8 };

/* Queues slow work on kDrainStreams new streams of the current context and
 * destroys them at once. */
static void destroy_busy_streams(slow_write w[kDrainStreams])
{
  for (int i = 0; i < kDrainStreams; i++) {
    CUstream s = NULL;
    w[i] = (slow_write){.ms = 10 * (i + 1)};
    OK(cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0));
    OK(cuLaunchHostFunc(s, slow_write_fn, &w[i]));
    OK(cuStreamDestroy_v2(s));
  }
  assert_int_equal(atomic_load(&w[kDrainStreams - 1].done), 0);
}

static void assert_all_ran(slow_write w[kDrainStreams])
{
  for (int i = 0; i < kDrainStreams; i++)
    assert_int_equal(atomic_load(&w[i].done), 1);
}

/* Tearing a context down waits for its destroyed, still draining streams. */
static void test_destroyed_streams_ctx_teardown(void **state)
{
  (void)state;
  CUcontext made = NULL, p1 = NULL;
  slow_write w[kDrainStreams];
  fpsim_counts d0 = stats(1);
  OK(cuCtxCreate_v2(&made, 0, 1));
  destroy_busy_streams(w);
  assert_true(stats(1).streams_draining > d0.streams_draining);
  OK(cuCtxDestroy_v2(made));
  assert_all_ran(w);
  assert_int_equal(stats(1).streams_draining, d0.streams_draining);
  /* the same for a primary context reset */
  OK(cuDevicePrimaryCtxRetain(&p1, 1));
  OK(cuCtxPushCurrent_v2(p1));
  destroy_busy_streams(w);
  OK(cuCtxPopCurrent_v2(NULL));
  OK(cuDevicePrimaryCtxReset_v2(1));
  assert_all_ran(w);
  fpsim_counts d1 = stats(1);
  assert_int_equal(d1.streams_draining, d0.streams_draining);
  assert_int_equal(d1.streams_live, d0.streams_live);
}

/* ---- capture ---------------------------------------------------------------------- */

static void test_capture_basics(void **state)
{
  (void)state;
  CUstream s = NULL;
  CUgraph graph = NULL;
  CUdeviceptr ga = 0, gb = 0, base = 0;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  cuuint64_t id = 0;
  atomic_int flag = 0;
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  assert_int_equal(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
                   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  assert_int_equal(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED),
                   CUDA_ERROR_ILLEGAL_STATE);
  OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  OK(cuStreamGetCaptureInfo(s, &st, &id));
  assert_true(id != 0);
  fpsim_counts c0 = stats(0);
  OK(cuLaunchHostFunc(s, set_flag_fn, &flag));     /* captured, not run */
  OK(cuMemAllocAsync(&ga, 1000, s));                /* graph allocation */
  OK(cuMemAllocAsync(&gb, 1000, s));
  OK(cuMemFreeAsync(gb, s));                        /* freed inside the graph */
  assert_int_equal(cuMemGetAddressRange_v2(&base, NULL, gb), CUDA_ERROR_NOT_FOUND);
  OK(cuMemGetAddressRange_v2(&base, NULL, ga));
  fpsim_counts c1 = stats(0);
  assert_int_equal(c1.async_alloc_calls, c0.async_alloc_calls + 2);
  assert_int_equal(c1.live_allocations, c0.live_allocations + 1);
  CUdeviceptr plain = 0;
  OK(cuMemAlloc_v2(&plain, 64));                    /* relaxed: allowed */
  OK(cuStreamEndCapture(s, &graph));
  assert_non_null(graph);
  assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
  OK(cuStreamSynchronize(s));
  assert_int_equal(atomic_load(&flag), 0);
  OK(cuGraphDestroy(graph));
  OK(cuMemFree_v2(ga));                             /* graph memory frees */
  OK(cuMemFree_v2(plain));
  assert_int_equal(stats(0).live_allocations, c0.live_allocations);
  OK(cuStreamDestroy_v2(s));
}

static void test_capture_rules(void **state)
{
  (void)state;
  CUstream s = NULL;
  CUgraph graph = (CUgraph)1;
  CUdeviceptr p = 0;
  CUstreamCaptureStatus st;
  OK(cuStreamCreate(&s, CU_STREAM_DEFAULT));       /* blocking */
  /* a global capture forbids cuMemAlloc and is invalidated by it */
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  assert_int_equal(cuMemAlloc_v2(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &graph),
                   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_null(graph);
  /* legacy work would depend on the capturing blocking stream */
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  assert_int_equal(cuStreamIsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  assert_int_equal(cuMemsetD8_v2(0, 0, 0), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  assert_int_equal(cuStreamEndCapture(s, &graph),
                   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  /* synchronizing a capturing stream is not allowed */
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &graph),
                   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  /* thread mode exchange */
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  OK(cuThreadExchangeStreamCaptureMode(&mode));
  assert_int_equal(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(cuMemAlloc_v2(&p, 64));                       /* this thread: relaxed */
  OK(cuMemFree_v2(p));
  OK(cuThreadExchangeStreamCaptureMode(&mode));
  OK(cuStreamEndCapture(s, &graph));
  OK(cuGraphDestroy(graph));
  assert_int_equal(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE);
  OK(cuStreamDestroy_v2(s));
}

typedef struct other_thread {
  CUcontext ctx;
  CUresult rc;
  CUstream s;
} other_thread;

static void *alloc_elsewhere(void *arg)
{
  other_thread *o = arg;
  CUdeviceptr p = 0;
  cuCtxSetCurrent(o->ctx);
  o->rc = cuMemAlloc_v2(&p, 64);
  if (o->rc == CUDA_SUCCESS)
    cuMemFree_v2(p);
  return NULL;
}

static void *end_elsewhere(void *arg)
{
  other_thread *o = arg;
  CUgraph g = NULL;
  cuCtxSetCurrent(o->ctx);
  o->rc = cuStreamEndCapture(o->s, &g);
  return NULL;
}

static CUresult run_in_thread(void *(*fn)(void *), other_thread *o)
{
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fn, o), 0);
  pthread_join(t, NULL);
  return o->rc;
}

static void test_capture_threads(void **state)
{
  (void)state;
  CUstream s = NULL;
  CUgraph graph = NULL;
  other_thread o = {.ctx = g_ctx0};
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  o.s = s;
  /* a thread-local capture does not restrict other threads */
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  OK(run_in_thread(alloc_elsewhere, &o));
  assert_int_equal(run_in_thread(end_elsewhere, &o),
                   CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  OK(cuStreamEndCapture(s, &graph));
  OK(cuGraphDestroy(graph));
  /* a global capture does, and is invalidated */
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  assert_int_equal(run_in_thread(alloc_elsewhere, &o),
                   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &graph),
                   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  OK(cuStreamDestroy_v2(s));
}

static void test_capture_fork_join(void **state)
{
  (void)state;
  CUstream a = NULL, b = NULL;
  CUevent fork = NULL, join = NULL;
  CUgraph graph = NULL;
  CUstreamCaptureStatus st;
  OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  OK(cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(cuEventRecord(fork, a));
  assert_int_equal(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
  OK(cuStreamWaitEvent(b, fork, 0));                /* b joins */
  OK(cuStreamIsCapturing(b, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUdeviceptr g = 0;
  OK(cuMemAllocAsync(&g, 128, b));                  /* graph alloc via b */
  OK(cuEventRecord(join, b));
  OK(cuStreamWaitEvent(a, join, 0));
  assert_int_equal(cuStreamEndCapture(b, &graph),
                   CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  OK(cuStreamEndCapture(a, &graph));
  OK(cuStreamIsCapturing(b, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  OK(cuEventQuery(fork));
  OK(cuGraphDestroy(graph));
  OK(cuMemFree_v2(g));
  OK(cuEventDestroy_v2(fork));
  OK(cuEventDestroy_v2(join));
  OK(cuStreamDestroy_v2(a));
  OK(cuStreamDestroy_v2(b));
}

/* ---- contexts ------------------------------------------------------------------------ */

static void test_contexts_two_devices(void **state)
{
  (void)state;
  CUcontext p1 = NULL, cur = NULL, made = NULL, popped = NULL;
  CUdevice dev = -1;
  CUdeviceptr a = 0, b = 0;
  unsigned flags = 9;
  int active = 9, ordinal = -1;
  OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  assert_int_equal(active, 0);
  OK(cuDevicePrimaryCtxRetain(&p1, 1));
  OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  assert_int_equal(active, 1);
  OK(cuCtxPushCurrent_v2(p1));
  OK(cuCtxGetDevice(&dev));
  assert_int_equal(dev, 1);
  fpsim_counts d1 = stats(1);
  OK(cuMemAlloc_v2(&a, 4096));
  OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a));
  assert_int_equal(ordinal, 1);
  assert_int_equal(stats(1).live_allocations, d1.live_allocations + 1);
  /* a created context on device 1: pushed, owns its memory */
  OK(cuCtxCreate_v2(&made, 0, 1));
  OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, made);
  OK(cuMemAlloc_v2(&b, 4096));
  OK(cuCtxGetDevice_v2(&dev, made));
  assert_int_equal(dev, 1);
  OK(cuCtxDestroy_v2(made));                      /* frees b, pops itself */
  assert_int_equal(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuCtxPushCurrent_v2(made), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxDestroy_v2(made), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxDestroy_v2(p1), CUDA_ERROR_INVALID_CONTEXT); /* primary */
  OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, p1);
  OK(cuCtxSynchronize());
  OK(cuCtxSynchronize_v2(g_ctx0));
  OK(cuCtxPopCurrent_v2(&popped));
  assert_ptr_equal(popped, p1);
  OK(cuCtxGetDevice(&dev));
  assert_int_equal(dev, 0);
  /* releasing the last reference destroys the primary context's memory */
  OK(cuDevicePrimaryCtxRelease_v2(1));
  assert_int_equal(stats(1).live_allocations, d1.live_allocations);
  assert_int_equal(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxGetDevice_v2(&dev, p1), CUDA_ERROR_INVALID_CONTEXT);
  OK(cuDevicePrimaryCtxSetFlags_v2(1, CU_CTX_SCHED_BLOCKING_SYNC));
  assert_int_equal(cuDevicePrimaryCtxSetFlags_v2(1, 3), CUDA_ERROR_INVALID_VALUE);
  OK(cuDevicePrimaryCtxReset_v2(1));
  /* the stack */
  OK(cuCtxPushCurrent_v2(g_ctx0));
  OK(cuCtxPopCurrent_v2(NULL));
  assert_int_equal(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxSetCurrent((CUcontext)&flags), CUDA_ERROR_INVALID_CONTEXT);
}

static void *no_context_thread(void *arg)
{
  CUresult *rc = arg;
  CUdeviceptr p = 0;
  CUstream s = NULL;
  CUcontext c = (CUcontext)1;
  rc[0] = cuMemAlloc_v2(&p, 16);
  rc[1] = cuStreamCreate(&s, 0);
  rc[2] = cuCtxGetCurrent(&c);
  rc[3] = c == NULL ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  rc[4] = cuStreamSynchronize(NULL);
  return NULL;
}

static void test_no_context(void **state)
{
  (void)state;
  CUresult rc[5];
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, no_context_thread, rc), 0);
  pthread_join(t, NULL);
  assert_int_equal(rc[0], CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(rc[1], CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(rc[2], CUDA_SUCCESS);
  assert_int_equal(rc[3], CUDA_SUCCESS);
  assert_int_equal(rc[4], CUDA_ERROR_INVALID_CONTEXT);
}

/* ---- threads ------------------------------------------------------------------------- */

enum { kThreads = 8, kRounds = 150 };

typedef struct worker_arg {
  int id;
  int dev;
  int failures;
} worker_arg;

static int worker_round(CUstream s, unsigned *seed, int round)
{
  size_t n = 64 + (size_t)(rand_r(seed) % 20000);
  CUdeviceptr d = 0;
  unsigned char *buf = malloc(n);
  int bad = buf == NULL;
  bool async = round % 2 == 0;
  if (!bad)
    bad |= (async ? cuMemAllocAsync(&d, n, s) : cuMemAlloc_v2(&d, n)) != 0;
  if (!bad) {
    bad |= cuMemsetD8Async(d, (unsigned char)round, n, s) != CUDA_SUCCESS;
    bad |= cuMemcpyDtoHAsync_v2(buf, d, n, s) != CUDA_SUCCESS;
    bad |= cuStreamSynchronize(s) != CUDA_SUCCESS;
    bad |= buf[0] != (unsigned char)round || buf[n - 1] != (unsigned char)round;
    bad |= (async ? cuMemFreeAsync(d, s) : cuMemFree_v2(d)) != CUDA_SUCCESS;
  }
  free(buf);
  return bad;
}

static void *worker_main(void *arg)
{
  worker_arg *w = arg;
  CUcontext ctx = NULL;
  CUstream s = NULL;
  unsigned seed = (unsigned)w->id * 7919u + 1;
  if (cuDevicePrimaryCtxRetain(&ctx, w->dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuStreamCreate(&s, w->id % 2 ? CU_STREAM_NON_BLOCKING : 0) != 0) {
    w->failures = 1;
    return NULL;
  }
  for (int r = 0; r < kRounds; r++)
    w->failures += worker_round(w->id % 3 == 0 ? CU_STREAM_PER_THREAD : s,
                                &seed, r);
  w->failures += cuStreamDestroy_v2(s) != CUDA_SUCCESS;
  w->failures += cuDevicePrimaryCtxRelease_v2(w->dev) != CUDA_SUCCESS;
  return NULL;
}

static void test_threads(void **state)
{
  (void)state;
  pthread_t t[kThreads];
  worker_arg w[kThreads];
  CUcontext keep = NULL;
  OK(cuDevicePrimaryCtxRetain(&keep, 1));        /* keep device 1 alive */
  fpsim_counts c0 = stats(0), d0 = stats(1);
  for (int i = 0; i < kThreads; i++) {
    w[i] = (worker_arg){.id = i, .dev = i % 2};
    assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < kThreads; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].failures, 0);
  }
  fpsim_counts c1 = stats(0), d1 = stats(1);
  assert_int_equal(c1.live_allocations, c0.live_allocations);
  assert_int_equal(c1.bytes_in_use, c0.bytes_in_use);
  assert_int_equal(d1.live_allocations, d0.live_allocations);
  assert_int_equal(c1.alloc_calls, c0.alloc_calls + kThreads / 2 * kRounds);
  OK(cuDevicePrimaryCtxRelease_v2(1));
}

/* ---- fork ----------------------------------------------------------------------------- */

/* ThreadSanitizer (gcc's by default) refuses to start threads in the child
 * of a multi-threaded fork, which is exactly what this test does. */
#if defined(__SANITIZE_THREAD__)
#define FP_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FP_UNDER_TSAN 1
#endif
#endif

/* The child of a fork has no worker threads; the sim starts new ones. */
static int fork_child_work(void)
{
  CUstream s = NULL;
  CUdeviceptr d = 0;
  int out = 0;
  atomic_int flag = 0;
  if (cuStreamCreate(&s, 0) != CUDA_SUCCESS ||
      cuLaunchHostFunc(s, set_flag_fn, &flag) != CUDA_SUCCESS ||
      cuMemAlloc_v2(&d, sizeof out) != CUDA_SUCCESS ||
      cuMemsetD32_v2(d, 5, 1) != CUDA_SUCCESS ||        /* legacy stream */
      cuMemcpyDtoH_v2(&out, d, sizeof out) != CUDA_SUCCESS || out != 5)
    return 1;
  if (atomic_load(&flag) != 1)        /* legacy work waited for s */
    return 2;
  if (cuMemFree_v2(d) != CUDA_SUCCESS || cuStreamDestroy_v2(s) != CUDA_SUCCESS)
    return 3;
  return 0;
}

static void test_fork_child(void **state)
{
  (void)state;
#ifdef FP_UNDER_TSAN
  skip();
#endif
  CUstream s = NULL;
  atomic_int flag = 0;
  OK(cuStreamCreate(&s, 0));
  OK(cuLaunchHostFunc(s, set_flag_fn, &flag));
  OK(cuStreamSynchronize(s));          /* s and legacy have live workers */
  OK(cuMemsetD8_v2(0, 0, 0));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    _exit(fork_child_work());
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  OK(cuStreamDestroy_v2(s));
}

/* ---- configuration from the environment (read once, so in a child) ------------------ */

/* Child side: "env-check DEVICES CAPACITY_MB FAIL_NTH" are the expected
 * values; exits 0 when the driver agrees. */
static int env_child(char **argv)
{
  int want_dev = atoi(argv[2]);
  size_t cap_mb = strtoull(argv[3], NULL, 10), total = 0;
  unsigned nth = (unsigned)atoi(argv[4]);
  int n = -1;
  CUcontext c = NULL;
  CUresult rc = cuInit(0);
  if (want_dev == 0)
    return rc == CUDA_ERROR_NO_DEVICE ? 0 : 1;
  if (rc != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS || n != want_dev)
    return 2;
  if (cuDeviceTotalMem_v2(&total, want_dev - 1) != CUDA_SUCCESS ||
      total != cap_mb * MiB)
    return 3;
  if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(c) != CUDA_SUCCESS)
    return 4;
  for (unsigned i = 1; i <= nth + 1; i++) {
    CUdeviceptr p = 0;
    if ((cuMemAlloc_v2(&p, 16) == CUDA_ERROR_OUT_OF_MEMORY) != (i == nth))
      return 5;
  }
  return 0;
}

/* Reads the child's stderr from fd into err, then reaps it: its exit
 * status, or 100 when it did not exit normally. */
static int collect_child(pid_t pid, int fd, char *err, size_t errlen)
{
  size_t len = 0;
  for (ssize_t n; len + 1 < errlen &&
                  (n = read(fd, err + len, errlen - 1 - len)) > 0;)
    len += (size_t)n;
  err[len] = '\0';
  close(fd);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

/* Runs the env-check child with env set (NAME=VALUE or NAME= to unset) and
 * returns its exit status; its stderr goes to err. */
static int run_env_child(const char *const env[3], const char *want[3],
                         char *err, size_t errlen)
{
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    for (int i = 0; i < 3; i++) {
      char name[64];
      const char *eq = strchr(env[i], '=');
      snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
      if (eq[1] != '\0')
        setenv(name, eq + 1, 1);
      else
        unsetenv(name);
    }
    dup2(fds[1], 2);
    execl("/proc/self/exe", "test_simdev", "env-check", want[0], want[1],
          want[2], (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  return collect_child(pid, fds[0], err, errlen);
}

static void test_env_config(void **state)
{
  (void)state;
  char err[1024];
  const char *set[3] = {"FRAGPOOL_SIM_DEVICES=3", "FRAGPOOL_SIM_CAPACITY_MB=64",
                        "FRAGPOOL_SIM_FAIL_NTH=2"};
  const char *want[3] = {"3", "64", "2"};
  assert_int_equal(run_env_child(set, want, err, sizeof err), 0);
  assert_string_equal(err, "");
  const char *bad[3] = {"FRAGPOOL_SIM_DEVICES=abc", "FRAGPOOL_SIM_CAPACITY_MB=0",
                        "FRAGPOOL_SIM_FAIL_NTH=-1"};
  const char *defaults[3] = {"1", "16384", "0"};
  assert_int_equal(run_env_child(bad, defaults, err, sizeof err), 0);
  assert_non_null(strstr(err, "FRAGPOOL_SIM_DEVICES=\"abc\" is not valid"));
  assert_non_null(strstr(err, "FRAGPOOL_SIM_CAPACITY_MB=\"0\""));
  assert_non_null(strstr(err, "FRAGPOOL_SIM_FAIL_NTH=\"-1\""));
  const char *none[3] = {"FRAGPOOL_SIM_DEVICES=0", "FRAGPOOL_SIM_CAPACITY_MB=",
                         "FRAGPOOL_SIM_FAIL_NTH="};
  const char *want_none[3] = {"0", "0", "0"};
  assert_int_equal(run_env_child(none, want_none, err, sizeof err), 0);
}

/* ---- exit with destroyed streams still draining (in a child) ---------------------- */

enum { kExitStreams = 32 };

/* Child side of "destroy-exit": destroys many streams with work queued
 * and returns while most of it is still running.  Exits 0 when every call
 * worked; the parent checks that exit is clean (no sanitizer report). */
static int destroy_exit_child(void)
{
  static slow_write w[kExitStreams];
  CUcontext c = NULL;
  CUdeviceptr d = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != 0 ||
      cuCtxSetCurrent(c) != CUDA_SUCCESS ||
      cuMemAlloc_v2(&d, kExitStreams * 4096) != CUDA_SUCCESS)
    return 1;
  for (int i = 0; i < kExitStreams; i++) {
    CUstream s = NULL;
    CUevent e = NULL;
    CUdeviceptr a = 0, mine = d + (CUdeviceptr)i * 4096;
    w[i] = (slow_write){.ms = 10 * i};
    if (cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0) != 0 ||
        cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        cuMemAllocAsync(&a, 1000, s) != CUDA_SUCCESS ||
        cuLaunchHostFunc(s, slow_write_fn, &w[i]) != CUDA_SUCCESS ||
        cuMemsetD8Async(mine, (unsigned char)i, 4096, s) != CUDA_SUCCESS ||
        cuMemcpyDtoDAsync_v2(a, mine, 1000, s) != CUDA_SUCCESS ||
        cuMemFreeAsync(a, s) != CUDA_SUCCESS ||
        cuEventRecord(e, s) != CUDA_SUCCESS ||
        cuStreamDestroy_v2(s) != CUDA_SUCCESS ||
        cuEventDestroy_v2(e) != CUDA_SUCCESS)     /* with its record queued */
      return 2;
  }
  fpsim_counts ct;
  if (fpsim_stats(0, &ct) != 0 || ct.streams_draining == 0 ||
      atomic_load(&w[kExitStreams - 1].done))
    return 3;                           /* nothing left in flight to test */
  sleep_ms(50);                         /* let some of it finish first */
  return 0;
}

static void test_destroy_many_and_exit(void **state)
{
  (void)state;
  char err[4096];
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    execl("/proc/self/exe", "test_simdev", "destroy-exit", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  int rc = collect_child(pid, fds[0], err, sizeof err);
  if (rc != 0 || err[0] != '\0')
    fprintf(stderr, "destroy-exit child: status %d, stderr:\n%s\n", rc, err);
  assert_int_equal(rc, 0);
  assert_string_equal(err, "");
}

/* ---- main ------------------------------------------------------------------------------ */

static int setup_driver(void **state)
{
  (void)state;
  if (cuInit(0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&g_ctx0, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(g_ctx0) != CUDA_SUCCESS)
    return -1;
  return 0;
}

int main(int argc, char **argv)
{
  if (argc == 5 && strcmp(argv[1], "env-check") == 0)
    return env_child(argv);
  if (argc == 2 && strcmp(argv[1], "destroy-exit") == 0)
    return destroy_exit_child();
  setenv("FRAGPOOL_SIM_DEVICES", "2", 1);
  unsetenv("FRAGPOOL_SIM_CAPACITY_MB");
  unsetenv("FRAGPOOL_SIM_FAIL_NTH");
  const struct CMUnitTest pre[] = {cmocka_unit_test(test_before_init)};
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_devices),
    cmocka_unit_test(test_error_strings),
    cmocka_unit_test(test_alloc_copy_roundtrip),
    cmocka_unit_test(test_pointer_attributes),
    cmocka_unit_test(test_bad_frees_and_args),
    cmocka_unit_test(test_capacity_oom),
    cmocka_unit_test(test_fail_nth),
    cmocka_unit_test(test_pitch),
    cmocka_unit_test(test_proc_address),
    cmocka_unit_test(test_stream_async_and_events),
    cmocka_unit_test(test_events_in_stream_order),
    cmocka_unit_test(test_stream_wait_event),
    cmocka_unit_test(test_legacy_stream_semantics),
    cmocka_unit_test(test_per_thread_stream),
    cmocka_unit_test(test_stream_ordered_alloc),
    cmocka_unit_test(test_stream_destroy_returns),
    cmocka_unit_test(test_destroyed_stream_syncs),
    cmocka_unit_test(test_destroyed_streams_ctx_teardown),
    cmocka_unit_test(test_capture_basics),
    cmocka_unit_test(test_capture_rules),
    cmocka_unit_test(test_capture_threads),
    cmocka_unit_test(test_capture_fork_join),
    cmocka_unit_test(test_contexts_two_devices),
    cmocka_unit_test(test_no_context),
    cmocka_unit_test(test_threads),
    cmocka_unit_test(test_fork_child),
    cmocka_unit_test(test_env_config),
    cmocka_unit_test(test_destroy_many_and_exit),
  };
  int failed = cmocka_run_group_tests_name("simdev before cuInit", pre, NULL, NULL);
  failed += cmocka_run_group_tests_name("simdev", tests, setup_driver, NULL);
  return failed;
}
