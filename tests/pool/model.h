/* tests/pool/model.h - the model checker's one entry: run a phase of
 * random operations on a fresh pool, cross-checked against the model after
 * every operation (model.c).
 */
#ifndef FP_POOL_MODEL_H
#define FP_POOL_MODEL_H

#include "pool_test.h"

typedef struct rphase {
    const char *name;
    uint64_t seed;
    int ops;
    size_t capacity; /* the mock's */
    size_t max_split;
    size_t non_split; /* 0: default */
    int div;          /* 0 none, 1 mixed, 2 all 4 */
    size_t max_reserved;
    double gc;
    size_t maxlive;
} rphase;

/* Fails the test on the first disagreement; prints one line of counts. */
void model_run_phase(const rphase *ph);

#endif
