/* shim_exitlock.h - how the exit handler takes a lock: it never waits for
 * one without a bound.
 *
 * exit() may be called from a signal handler that interrupted this very
 * thread inside fragpool, holding one of its locks; waiting for that lock
 * would hang the program for good.  The exit handler sets one deadline
 * (FP_EXIT_WAIT_MS from its start) and every lock it needs is tried until
 * then, with short naps: a lock another thread holds is given back in
 * time, one held by the interrupted frame never is, and the handler then
 * skips what needed it (and says so in one line).
 *
 * Header only (static inline), no allocation, no stdio: safe at exit.
 */
#ifndef FP_SHIM_EXITLOCK_H
#define FP_SHIM_EXITLOCK_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#define FP_EXIT_WAIT_MS 500 /* the whole exit handler's patience */

/* by = now + FP_EXIT_WAIT_MS (CLOCK_MONOTONIC). */
static inline void fp_exit_deadline(struct timespec *by)
{
    clock_gettime(CLOCK_MONOTONIC, by);
    by->tv_nsec += (long)FP_EXIT_WAIT_MS * 1000000L;
    by->tv_sec += by->tv_nsec / 1000000000L;
    by->tv_nsec %= 1000000000L;
}

static inline bool fp_exit_past(const struct timespec *by)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > by->tv_sec || (now.tv_sec == by->tv_sec && now.tv_nsec >= by->tv_nsec);
}

/* Calls free_now(ud) until it returns true (true) or until by (false),
 * napping 0.1 ms, doubling to 10 ms, between calls; errno is kept. */
static inline bool fp_exit_wait(bool (*free_now)(void *ud), void *ud, const struct timespec *by)
{
    int saved = errno;
    struct timespec nap = {0, 100000};
    bool ok;
    while (!(ok = free_now(ud)) && !fp_exit_past(by)) {
        nanosleep(&nap, NULL);
        if (nap.tv_nsec < 10000000L)
            nap.tv_nsec *= 2;
    }
    errno = saved;
    return ok;
}

static inline bool fp_exit_trylock_once(void *m)
{
    return pthread_mutex_trylock((pthread_mutex_t *)m) == 0;
}

/* Takes m by the deadline (true), or gives up (false, m not taken). */
static inline bool fp_exit_lock(pthread_mutex_t *m, const struct timespec *by)
{
    return fp_exit_wait(fp_exit_trylock_once, m, by);
}

#endif
