/* fp_file.c - opening fragpool's inputs and outputs safely (fp_file.h).
 *
 * Reading: open(O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC), then fstat; only
 * a regular file is kept, and then O_NONBLOCK is cleared.  A FIFO without
 * a writer, /dev/zero or a directory are refused at once.
 *
 * Writing: open(O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC).
 * When the name exists, it is opened again without O_CREAT (still
 * O_NOFOLLOW: a symlink fails with ELOOP), checked with fstat to be a
 * regular file owned by this user, and emptied with ftruncate on that
 * descriptor.  A FIFO without a reader fails with ENXIO, one with a reader
 * is refused by the check.
 */
#include "fp_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FP_FILE_RDFLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
#define FP_FILE_WRFLAGS (O_WRONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC)

static void say(char *why, size_t len, const char *a, const char *b)
{
    if (!len)
        return;
    size_t na = strlen(a), nb = b ? strlen(b) : 0;
    na = na < len - 1 ? na : len - 1;
    memcpy(why, a, na);
    nb = nb < len - 1 - na ? nb : len - 1 - na;
    if (nb)
        memcpy(why + na, b, nb);
    why[na + nb] = '\0';
}

const char *fp_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

static int not_regular(int fd, const struct stat *sb, char *why, size_t len)
{
    close(fd);
    say(why, len, fp_file_kind((unsigned)sb->st_mode), ", not a regular file");
    return S_ISDIR(sb->st_mode) ? EISDIR : EINVAL;
}

/* Clears O_NONBLOCK: regular files never block, and later writes should
 * not see EAGAIN from a flag they did not ask for. */
static int blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? errno : 0;
}

static int fail(int fd, int err, char *why, size_t len);

/* fd (just opened) must be a regular file: 0, or the error with fd
 * closed and why filled. */
static int check_regular(int fd, char *why, size_t len)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return fail(fd, errno, why, len);
    return S_ISREG(sb.st_mode) ? 0 : not_regular(fd, &sb, why, len);
}

static int fail(int fd, int err, char *why, size_t len)
{
    if (fd >= 0)
        close(fd);
    say(why, len, strerror(err), NULL);
    return err;
}

int fp_file_open_read(const char *path, int *fd, char *why, size_t len)
{
    int f = open(path, FP_FILE_RDFLAGS);
    if (f < 0)
        return fail(-1, errno, why, len);
    int err = check_regular(f, why, len);
    if (err)
        return err;
    err = blocking(f);
    if (err)
        return fail(f, err, why, len);
    *fd = f;
    return 0;
}

/* An existing name: reused only as a regular file of this user. */
static int reuse(const char *path, int *fd, char *why, size_t len)
{
    int f = open(path, FP_FILE_WRFLAGS);
    if (f < 0 && errno == ELOOP) {
        say(why, len, "a symbolic link (not followed)", NULL);
        return ELOOP;
    }
    if (f < 0 && errno == ENXIO) {
        say(why, len, "a FIFO without a reader, not a regular file", NULL);
        return ENXIO;
    }
    if (f < 0)
        return fail(-1, errno, why, len);
    int err = check_regular(f, why, len);
    if (err)
        return err;
    struct stat sb;
    if (fstat(f, &sb) != 0)
        return fail(f, errno, why, len);
    if (sb.st_uid != geteuid()) {
        close(f);
        say(why, len, "a file of another user (not overwritten)", NULL);
        return EPERM;
    }
    if (ftruncate(f, 0) != 0)
        return fail(f, errno, why, len);
    *fd = f;
    return 0;
}

int fp_file_create(const char *path, int *fd, char *why, size_t len)
{
    int f = open(path, FP_FILE_WRFLAGS | O_CREAT | O_EXCL, 0644);
    if (f < 0 && errno == EEXIST)
        return reuse(path, fd, why, len);
    if (f < 0)
        return fail(-1, errno, why, len);
    int err = blocking(f);
    if (err)
        return fail(f, err, why, len);
    *fd = f;
    return 0;
}
