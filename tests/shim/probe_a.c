/* probe_a.c - first of two libraries defining fp_probe; fp_probe_next asks
 * dlsym(RTLD_NEXT) for the next definition, which must be probe_b's.  If
 * the shim's dlsym were not a tail call, glibc would take the shim as the
 * caller and the answer would differ. */
#include <dlfcn.h>

__attribute__((visibility("default"))) int fp_probe(void)
{
    return 1;
}

__attribute__((visibility("default"))) int fp_probe_next(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "fp_probe");
    return next ? next() : -1;
}
