/*
 * amulti_stall.c -- an LD_PRELOAD shim for test_99_lifetimes: the loop
 * thread stops inside zoo_amulti, after zkresp's zk_handle_usable() said
 * yes, for as long as the test wants (what a preemption or a SIGSTOP at
 * that instant does).  Armed by the file $AMULTI_STALL_ARM: the next
 * zoo_amulti removes it, creates $AMULTI_STALL_ARM.in, waits for
 * $AMULTI_STALL_ARM.go, then calls the real zoo_amulti.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

typedef int (*amulti_fn)(zhandle_t *, int, const zoo_op_t *, zoo_op_result_t *,
                         void_completion_t, const void *);

int zoo_amulti(zhandle_t *zh, int count, const zoo_op_t *ops,
               zoo_op_result_t *results, void_completion_t cb, const void *data)
{
    static amulti_fn real;
    if (!real)
        real = (amulti_fn)dlsym(RTLD_NEXT, "zoo_amulti");
    const char *arm = getenv("AMULTI_STALL_ARM");
    if (arm && unlink(arm) == 0) {
        char in[4096], go[4096];
        snprintf(in, sizeof in, "%s.in", arm);
        snprintf(go, sizeof go, "%s.go", arm);
        int fd = open(in, O_CREAT | O_WRONLY, 0600);
        if (fd >= 0)
            close(fd);
        for (int i = 0; i < 6000 && access(go, F_OK) != 0; i++)
            usleep(5000);
    }
    return real(zh, count, ops, results, cb, data);
}

/* The library's IO thread (any thread but the main one) stops in poll
 * while $IO_STALL_ARM exists, after creating $IO_STALL_ARM.in: the process
 * is as good as stopped for ZooKeeper (no pings, its state not updated),
 * while the loop thread still runs, as after a SIGCONT the loop thread may
 * run first. */
#include <poll.h>
#include <sys/syscall.h>

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    static poll_fn real;
    if (!real)
        real = (poll_fn)dlsym(RTLD_NEXT, "poll");
    const char *arm = getenv("IO_STALL_ARM");
    if (arm && syscall(SYS_gettid) != getpid() && access(arm, F_OK) == 0) {
        char in[4096];
        snprintf(in, sizeof in, "%s.in", arm);
        int fd = open(in, O_CREAT | O_WRONLY, 0600);
        if (fd >= 0)
            close(fd);
        for (int i = 0; i < 6000 && access(arm, F_OK) == 0; i++)
            usleep(5000);
    }
    return real(fds, n, timeout);
}
