/* fp_assert.h - checks of fragpool's own invariants, at levels (as
 * mimalloc's mi_assert, mi_assert_internal and mi_assert_expensive):
 *
 *   FP_ASSERT_LEVEL 0  no check is compiled (release builds: the shim runs
 *                      inside other people's programs, and nothing of
 *                      fragpool's may abort them there);
 *                   1  the cheap O(1) checks at the points where an
 *                      invariant is relied on (builds without NDEBUG, and
 *                      the sanitizer builds CI runs the tests under);
 *                   2  also the expensive ones that walk a structure.
 *
 * The default follows NDEBUG (0 with it, 1 without); CMake's
 * -DFP_ASSERT_LEVEL=N sets it for every target.  A failed check prints one
 * line, "fragpool: internal check failed at FILE:LINE: COND (WHY)", and
 * aborts: it is a fragpool bug, never a user's mistake (bad input gets its
 * own message and goes on).
 */
#ifndef FP_ASSERT_H
#define FP_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#ifndef FP_ASSERT_LEVEL
#ifdef NDEBUG
#define FP_ASSERT_LEVEL 0
#else
#define FP_ASSERT_LEVEL 1
#endif
#endif

static inline void fp_assert_fail(const char *file, int line, const char *cond, const char *why)
{
    fprintf(stderr, "fragpool: internal check failed at %s:%d: %s (%s)\n", file, line, cond, why);
    abort();
}

#define FP_CHECK_(cond, why) ((cond) ? (void)0 : fp_assert_fail(__FILE__, __LINE__, #cond, why))

#if FP_ASSERT_LEVEL >= 1
#define fp_assert(cond, why) FP_CHECK_(cond, why)
#else /* not evaluated, but its names count as used */
#define fp_assert(cond, why) ((void)sizeof((cond) ? 1 : 0))
#endif

#if FP_ASSERT_LEVEL >= 2
#define fp_assert_expensive(cond, why) FP_CHECK_(cond, why)
#else
#define fp_assert_expensive(cond, why) ((void)sizeof((cond) ? 1 : 0))
#endif

#endif
