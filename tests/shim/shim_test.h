/* shim_test.h - helpers shared by the test clients that run under the
 * shim on the simulated device: CUDA calls that must succeed, a context,
 * and a check that a symbol really resolves into libfragpool.so.
 */
#ifndef SHIM_TEST_H
#define SHIM_TEST_H

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>
#include <string.h>
#include "fp_cuda.h"

#define CU(call) assert_int_equal((call), CUDA_SUCCESS)

static inline int in_fragpool(const void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libfragpool");
}

/* 1 when this run serves from classic segments (FRAGPOOL_CONF has
 * expandable_segments:False or :0, or the simulated device has no virtual
 * memory management); 0 under the default, virtual-memory segments. */
static inline int fp_test_classic(void)
{
    const char *c = getenv("FRAGPOOL_CONF"), *v = getenv("FRAGPOOL_SIM_VMM");
    return (c && (strstr(c, "expandable_segments:False") || strstr(c, "expandable_segments:0") ||
                  strstr(c, "expandable_segments:false"))) ||
           (v && !strcmp(v, "0"));
}

#endif
