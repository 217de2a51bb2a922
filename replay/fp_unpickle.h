/* fp_unpickle.h - a small, strict reader of the pickles that hold plain
 * data: PyTorch's memory snapshots (torch.cuda.memory._dump_snapshot,
 * Python's pickle protocol 2 to 5, and the C++ writer's protocol 2).
 *
 * It builds a tree of values: None, bools, integers of up to 64 bits (and
 * their sign), floats, strings, lists, tuples and dicts.  Any opcode that
 * builds anything else - a class, a function call, bytes, a set - is
 * refused with one line naming it and its byte: nothing is ever executed.
 * Memo references (BINGET) share a node, so the tree may be a DAG.
 *
 * Dicts are read as Python builds them: a key set twice keeps the value
 * set last.  Once parsed, every string gets the id of the first string of
 * the same bytes, and every dict holds each string key once, sorted by
 * that id (fp_pkeys.c), so a lookup is a hash and a binary search: many
 * duplicate keys, or one big dict shared by many entries, cost n log n in
 * all, never n^2.
 */
#ifndef FP_UNPICKLE_H
#define FP_UNPICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    FP_PV_NONE,
    FP_PV_BOOL,
    FP_PV_INT,
    FP_PV_FLOAT,
    FP_PV_STR,
    FP_PV_LIST,
    FP_PV_TUPLE,
    FP_PV_DICT
};

typedef struct fp_pv {
    uint8_t type;
    uint8_t neg;     /* INT: negative (u is the magnitude)          */
    uint32_t n, cap; /* containers: items (a dict: key, value, ...) */
    uint32_t key;    /* STR: its id, the first string node of the
                             same bytes; DICT: its leading pairs whose key
                             is a string, one per key, sorted by key id
                             (pairs with other keys follow, as read)     */
    union {
        uint64_t u; /* INT magnitude; BOOL 0/1                     */
        double f;
        struct {
            size_t off, len;
        } s;             /* STR: bytes of the input     */
        uint32_t *items; /* node indices                                */
    } v;
} fp_pv;

typedef struct fp_pdoc {
    const unsigned char *data; /* the input, which strings point into */
    size_t len;
    fp_pv *node;
    size_t n, cap;
    uint32_t root;
    struct fp_pstr *strs; /* the strings' ids by their bytes' hash       */
    size_t nstrs;         /* slots of strs: a power of two, or 0         */
} fp_pdoc;

/* Parses data[0..len) (kept: strings point into it).  0, or EINVAL /
 * ENOMEM with one line in err[errlen] prefixed by name ("NAME: byte 17:
 * ..."); on failure the document is empty. */
int fp_unpickle(const unsigned char *data, size_t len, const char *name, fp_pdoc *d, char *err,
                size_t errlen);
void fp_pdoc_free(fp_pdoc *d);

const fp_pv *fp_pdoc_node(const fp_pdoc *d, uint32_t i);
/* After parsing (fp_unpickle calls it): the strings' ids, and each dict's
 * string keys once (the last value set), sorted.  0 or ENOMEM. */
int fp_pdoc_index(fp_pdoc *d);
void fp_pdoc_index_free(fp_pdoc *d);
/* The longest run of occupied slots of the string table (a probe never
 * walks further): for the tests. */
size_t fp_pdoc_longest_probe(const fp_pdoc *d);
/* The value of key in dict v, or NULL (not a dict, or no such key). */
const fp_pv *fp_pdoc_get(const fp_pdoc *d, const fp_pv *v, const char *key);
/* Item i of a list or tuple, or NULL. */
const fp_pv *fp_pdoc_item(const fp_pdoc *d, const fp_pv *v, size_t i);
/* v is a string equal to s. */
bool fp_pdoc_str_is(const fp_pdoc *d, const fp_pv *v, const char *s);
/* v is a non-negative integer: 0 and *out, else EINVAL. */
int fp_pdoc_u64(const fp_pv *v, uint64_t *out);

#endif
