/* fp_pickle.h - a small, strict writer of Python pickles (protocol 2).
 *
 * Only plain data: dicts, lists, tuples, ints, floats, strings, None and
 * bools, the types of a PyTorch memory snapshot.  Containers are written
 * as EMPTY_DICT/EMPTY_LIST MARK ... SETITEMS/APPENDS, so any number of
 * items costs no memory here; no memo is kept (Python's loader needs
 * none).  Every byte goes through an fp_sink, whose first error sticks.
 *
 * Invariant: the caller opens and closes containers in pairs; a dict's
 * items are key, value, key, value.  fp_pk_done says whether they paired.
 */
#ifndef FP_PICKLE_H
#define FP_PICKLE_H

#include "fp_report.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fp_pk {
    fp_sink *s;
    unsigned depth; /* open containers                             */
    int bad;        /* EINVAL: a close without its open, or > 64 deep */
} fp_pk;

void fp_pk_begin(fp_pk *k, fp_sink *s); /* PROTO 2 */
/* STOP; 0, EINVAL when containers did not pair, or the sink's error. */
int fp_pk_done(fp_pk *k);

void fp_pk_dict(fp_pk *k);
void fp_pk_list(fp_pk *k);
void fp_pk_tuple(fp_pk *k);
void fp_pk_end_dict(fp_pk *k);
void fp_pk_end_list(fp_pk *k);
void fp_pk_end_tuple(fp_pk *k);

void fp_pk_int(fp_pk *k, int64_t v);
void fp_pk_uint(fp_pk *k, uint64_t v);
void fp_pk_float(fp_pk *k, double v);
void fp_pk_str(fp_pk *k, const char *s); /* UTF-8; NULL writes None */
void fp_pk_strn(fp_pk *k, const char *s, size_t n);
void fp_pk_none(fp_pk *k);
void fp_pk_bool(fp_pk *k, bool v);

/* A dict's key (a string), to be followed by its value. */
#define fp_pk_key fp_pk_str

#endif
