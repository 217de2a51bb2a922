/* fp_lock.h - the mutex for a lock that many threads take for a short
 * time (a pool's lock, held for a best-fit lookup: ~100 ns).
 *
 * A default mutex puts a waiter to sleep at once, and the holder's unlock
 * then pays a futex wake: under contention each hand-over costs
 * microseconds, and the rate of all threads together falls as threads are
 * added.  glibc's adaptive mutex first retries for a bounded number of
 * spins, so a lock held briefly passes to a waiter that is still running.
 * Elsewhere (no PTHREAD_MUTEX_ADAPTIVE_NP) it is the default mutex.
 *
 * Invariant: the mutex behaves as a default one in every other respect
 * (not recursive, no error checking); fork handlers re-make it with
 * fp_mutex_init_brief too.
 */
#ifndef FP_LOCK_H
#define FP_LOCK_H

#include <pthread.h>
#include <stdbool.h>

static inline void fp_mutex_init_brief(pthread_mutex_t *m)
{
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) == 0) {
        int ok = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP) == 0 &&
                 pthread_mutex_init(m, &a) == 0;
        pthread_mutexattr_destroy(&a);
        if (ok)
            return;
    }
#endif
    pthread_mutex_init(m, NULL);
}

/* One step of a spin-wait: tells the core that this thread waits, so a
 * sibling hyperthread runs on. */
static inline void fp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* After fork, a mutex the prepare handler took: given back in the parent,
 * made new in the child (whose threads, all but one, are gone). */
static inline void fp_mutex_fork_after(pthread_mutex_t *m, bool child)
{
    if (child)
        pthread_mutex_init(m, NULL);
    else
        pthread_mutex_unlock(m);
}

#endif
