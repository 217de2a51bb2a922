/* shim_framework.h - what the shim learns from the process around it:
 * where its configuration came from (FRAGPOOL_CONF, or PyTorch's own
 * variables when that is unset) and whether PyTorch's caching allocator
 * sits in front of it.  shim_framework.c holds the why.
 *
 * Invariants: each thing is said at most once per process on stderr; the
 * summary's notes are written once, at the first CUDA call, before any
 * summary can read them.
 */
#ifndef FP_SHIM_FRAMEWORK_H
#define FP_SHIM_FRAMEWORK_H

#include "fp_conf.h"
#include <stdbool.h>
#include <stddef.h>

/* Before main: parses the configuration from the environment into c
 * (fp_conf_from_env) and remembers its source.  Returns the problems. */
int fp_fw_read_conf(fp_conf *c, fp_conf_report_fn report, void *ud);

/* "FRAGPOOL_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", or
 * "defaults" when none of them is set. */
const char *fp_fw_conf_source(void);

/* At the first CUDA call: says where a PyTorch variable's keys were taken
 * from, and deals with PyTorch's own cache (see shim_framework.c). */
void fp_fw_first_call(const fp_conf *c);

/* 1 when PyTorch's own caching allocator sits in front of fragpool (so
 * fragpool sees its segments, not the tensors), as found at the first call. */
bool fp_fw_cache_in_front(void);

/* The notes for the summary (one line each); returns how many, <= max. */
size_t fp_fw_notes(const char **notes, size_t max);

#endif
