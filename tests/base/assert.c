/* tests/base/assert.c - base/fp_assert.h at level 1: a failed check prints
 * its one line (where, what, why) on stderr and aborts; a check that holds
 * does nothing and evaluates its condition once.
 */
#define FP_ASSERT_LEVEL 1
#include "fp_assert.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* Runs a failing check in a child; returns its stderr in buf. */
static int failing_child(char *buf, size_t len)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        int two = 2;
        fp_assert(two + 1 == 4, "arithmetic holds");
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < len && (got = read(fds[0], buf + n, len - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void failed_check_says_where_and_aborts(void **state)
{
    (void)state;
    char out[512];
    int status = failing_child(out, sizeof out);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_non_null(strstr(out, "fragpool: internal check failed at "));
    assert_non_null(strstr(out, "assert.c:"));
    assert_non_null(strstr(out, ": two + 1 == 4 (arithmetic holds)\n"));
}

static void holding_check_evaluates_once(void **state)
{
    (void)state;
    int calls = 0;
    fp_assert(++calls == 1, "evaluated once");
    assert_int_equal(calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_check_says_where_and_aborts),
        cmocka_unit_test(holding_check_evaluates_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
