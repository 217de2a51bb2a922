/* shim_sanitizer.h - CUDA tools injected into the process (compute-
 * sanitizer, Nsight Systems, Nsight Compute): see shim_sanitizer.c. */
#ifndef FP_SHIM_SANITIZER_H
#define FP_SHIM_SANITIZER_H

#include <stdatomic.h>
#include <stdbool.h>

/* At setup: looks for an injected tool; with tools:passthrough (the
 * default) and one found, says so in one line and turns the pool off. */
void fp_tools_detect(void);
/* Set once at setup, read by fp_tools_passthrough. */
extern atomic_bool fp_tools_to_driver;
/* True when every allocation goes to the driver (a tool is injected).
 * Inline, one relaxed load: it sits on every allocation's path. */
static inline bool fp_tools_passthrough(void)
{
    return atomic_load_explicit(&fp_tools_to_driver, memory_order_relaxed);
}

#endif
