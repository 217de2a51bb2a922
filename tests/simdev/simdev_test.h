/* tests/simdev/simdev_test.h - what the test programs of the simulated
 * device (simdev/, libcuda.so.1, linked as -lcuda) share: host functions
 * used as kernels, the device's counters, and the start every program
 * makes (two devices, FRAGPOOL_SIM_DEVICES=2, set before the first driver
 * call; device 0's primary context current).
 *
 * Timing-based checks use a host function that sleeps 50 ms as a "slow
 * kernel"; they only assert orderings that hold however slow the machine
 * is (e.g. "not finished right after submission" is checked against work
 * that cannot finish before a later barrier releases it).  The one
 * exception: "cuStreamDestroy returned before the queued 100 ms host
 * function ran" assumes the destroy takes less than 100 ms.
 */
#ifndef FP_SIMDEV_TEST_H
#define FP_SIMDEV_TEST_H

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

#define MiB      ((size_t)1 << 20)
#define OK(call) assert_int_equal((call), CUDA_SUCCESS)

extern CUcontext g_ctx0; /* primary context of device 0, current */

void sleep_ms(int ms);

/* ---- host functions used as kernels ---------------------------------------- */

typedef struct gate { /* a host function that blocks until opened */
    atomic_int open;
    atomic_int ran;
} gate;
void gate_fn(void *arg);

typedef struct slow_write { /* sleeps, then writes a value */
    int ms;
    int *where;
    int value;
    atomic_int done;
} slow_write;
void slow_write_fn(void *arg);

typedef struct observe { /* records whether a flag was set */
    atomic_int *flag;
    atomic_int seen;
    atomic_int ran;
} observe;
void observe_fn(void *arg);

void set_flag_fn(void *arg); /* sleeps 50 ms, then sets *(atomic_int *)arg */

/* The simulated device's counters (fpsim_stats), asserted to be had. */
fpsim_counts stats(int dev);

/* ---- the start ---------------------------------------------------------------- */

/* Two devices, no capacity or failure injection from the caller's
 * environment; call before the first driver call. */
void simdev_env(void);
/* cmocka group setup: cuInit, device 0's primary context current. */
int simdev_setup(void **state);

#endif
