/* shim_sanitizer.h - CUDA tools injected into the process (compute-
 * sanitizer, Nsight Systems, Nsight Compute): see shim_sanitizer.c. */
#ifndef FP_SHIM_SANITIZER_H
#define FP_SHIM_SANITIZER_H

#include <stdbool.h>

/* At setup: looks for an injected tool; with tools:passthrough (the
 * default) and one found, says so in one line and turns the pool off. */
void fp_tools_detect(void);
/* True when every allocation goes to the driver (a tool is injected). */
bool fp_tools_passthrough(void);

#endif
