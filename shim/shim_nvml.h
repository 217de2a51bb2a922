/* shim_nvml.h - the other processes on a GPU, from NVML (shim_nvml.c).
 *
 * Invariant: called only after an OOM that no setting fixes, never at exit
 * and never on the failing path; without NVML it writes nothing.
 */
#ifndef FP_SHIM_NVML_H
#define FP_SHIM_NVML_H

#include "fp_cuda.h"
#include "fp_text.h"

/* One line "fragpool: processes on this GPU (NVML): pid P N MiB, ...\n"
 * into s, for device dev; nothing when NVML or the device's PCI bus id
 * cannot be had. */
void fp_nvml_put_processes(CUdevice dev, fp_sink *s);

#endif
