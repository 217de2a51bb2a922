/* tests/pool/pool_test.h - what every test program of pool/ shares.
 *
 * A mock backend, a pool opened on it (pool_fixture), pool calls that run
 * the invariant checker (fp_pool_check) after every operation, a walk of
 * the pool's segments and blocks that verifies itself, and the size rules
 * written again independently of pool/ (ref_*), for the tests to compare.
 *
 * The mock hands out increasing, 2 MiB-aligned, never reused addresses,
 * and counts any release that does not name exactly one live reservation,
 * and any reserve of a size that no rule can produce (0, or not a multiple
 * of 2 MiB); mock_ok() asserts that neither happened.
 *
 * Include it after <cmocka.h>'s prerequisites; pool_test.c is linked into
 * every program.
 */
#ifndef FP_POOL_TEST_H
#define FP_POOL_TEST_H

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fp_pool.h"

#define KiB FP_KIB
#define MiB FP_MIB
#define GiB FP_GIB

/* ---- failure reporting ------------------------------------------------- */

/* The phase and operation of the randomized test, in every failure line. */
extern char g_where[160];

#define EQ(a, b) eq_((uintmax_t)(a), (uintmax_t)(b), #a, #b, __FILE__, __LINE__)
#define TRUE(c)  true_((c) != 0, #c, __FILE__, __LINE__)
void eq_(uintmax_t a, uintmax_t b, const char *sa, const char *sb, const char *file, int line);
void true_(int ok, const char *what, const char *file, int line);

/* Fails the test when fp_pool_check finds a broken invariant. */
void check_pool(fp_pool *p);
uint64_t rng_next(uint64_t *s); /* xorshift64* */
void nap(void);                 /* 20 ms: lets a GC age tell two frees apart */

/* ---- the mock backend ------------------------------------------------- */

#define MOCK_BASE 0x7f0000000000ull
#define SEG_ALIGN (2 * MiB)

typedef struct mseg {
    uint64_t addr; /* start of a live reservation */
    size_t size;   /* its size                    */
} mseg;

typedef struct mock {
    pthread_mutex_t mu;
    uint64_t next;     /* next free address (before alignment)       */
    size_t capacity;   /* bytes it can hold at once; SIZE_MAX: no end */
    size_t live_bytes; /* bytes reserved and not released            */
    mseg *live;        /* live reservations, by address              */
    size_t nlive, caplive;
    int fail_next;     /* refuse this many reserves ...               */
    int fail_err;      /* ... with this errno                          */
    uint64_t injected; /* refusals handed out through fail_next        */
    uint64_t reserve_calls, reserve_ok, release_calls, sync_calls;
    uint64_t reserved_total, released_total;
    uint64_t bad_reserve, bad_release; /* pool errors seen */
} mock;

void mock_init(mock *m, size_t capacity);
void mock_fini(mock *m);
void mock_ok(const mock *m); /* no bad reserve, no bad release */

/* ---- a pool on a mock ------------------------------------------------- */

typedef struct pool_fixture {
    mock m;
    fp_backend be;
    fp_pool_opts o;
    fp_pool *p;
} pool_fixture;

/* o NULL: the defaults.  Close checks that everything went back. */
void fixture_open(pool_fixture *f, const fp_pool_opts *o, size_t capacity);
void fixture_close(pool_fixture *f);
fp_pool_opts opts_max_split(size_t max_split);

/* Pool calls, each followed by the checker.  The _ok ones fail the test
 * unless the call succeeds. */
uint64_t alloc_ok(fp_pool *p, size_t size);
int alloc_try(fp_pool *p, size_t size, uint64_t *a); /* its return code */
void free_ok(fp_pool *p, uint64_t a);
void empty_cache_ok(fp_pool *p);
fp_pool_stats stats_of(fp_pool *p);
int owns_size(fp_pool *p, uint64_t a, size_t *size); /* fp_pool_owns */
int owns_addr(fp_pool *p, uint64_t a);               /* the same, no size */
size_t idle_bytes(fp_pool *p);
fp_grant grant_ok(fp_pool *p, size_t size, uint64_t unsafe_from);
uint64_t free_stamped(fp_pool *p, uint64_t addr); /* its free stamp */
/* Fails unless x and y are equal, OOM/retry counts (ooms) or the invalid
 * free count (invalid) aside. */
void stats_equal_except(fp_pool_stats x, fp_pool_stats y, int ooms, int invalid);

/* ---- walking ----------------------------------------------------------- */

typedef struct walk_seg {
    uint64_t addr;
    size_t size;
    int small;
    size_t first, n; /* its blocks in walk_dump.blk */
} walk_seg;

typedef struct walk_dump {
    walk_seg *seg;
    size_t nseg, capseg;
    fp_block_info *blk;
    size_t nblk, capblk;
} walk_dump;

/* Walks the pool and verifies the walk on its own: segments in address
 * order without overlap, blocks tiling each segment, free blocks with
 * requested 0, allocated ones with 0 < requested <= size. */
void walk_take(fp_pool *p, walk_dump *w);
void walk_free(walk_dump *w);
const walk_seg *walk_segment_at(const walk_dump *w, uint64_t addr);
const fp_block_info *walk_block_at(const walk_dump *w, uint64_t addr, const walk_seg **segout);
int walk_same(const walk_dump *a, const walk_dump *b);

/* Expected layout of one segment. */
typedef struct expect_block {
    size_t size;
    int state; /* 0 free, 1 allocated */
} expect_block;

void expect_seg(fp_pool *p, uint64_t seg, size_t segsize, int small, const expect_block *x,
                size_t n);
size_t segment_count(fp_pool *p);

/* ---- the rules, written independently of the pool -------------------- */

size_t ref_round(const fp_pool_opts *o, size_t s);
size_t ref_segment_size(size_t r);
int ref_splits(const fp_pool_opts *o, int small, size_t bsize, size_t r);
/* 1 when a best-fit block of bsize may not serve a request rounded to r. */
int ref_refuses(const fp_pool_opts *o, size_t r, size_t bsize);

#endif
