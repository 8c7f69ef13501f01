/*
 * zk_queue.c — the bridge's completion queue (zk_queue.h): a mutex-guarded
 * list, an eventfd and a uv_poll_t on it.
 *
 * Not a uv_async_t: libuv 1.44's (Debian 12's) loop thread, woken by
 * uv_async_send's write, spins until the sending thread has marked the send
 * done, and that thread is the one the wake-up just preempted when the
 * cores are few: the loop burned up to ~50 us in pause instructions per
 * answer (a tenth of a sidecar's CPU in the native handoff bench) before it
 * yielded.  Here the record is in the list before the write, so the loop
 * has nothing to wait for.  `signaled` keeps the writes to one per wake-up.
 */
#include "zk_queue.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void on_readable(uv_poll_t *h, int status, int events)
{
    struct zk_queue *q = h->data;
    uint64_t count;
    /* Reset the counter before taking: a push from now on either finds
     * `signaled` still set (its record is taken below) or writes again. */
    while (read(q->efd, &count, sizeof count) < 0 && errno == EINTR)
        ;
    q->on_wake(q);
}

int zk_queue_init(struct zk_queue *q, uv_loop_t *loop,
                  void (*on_wake)(struct zk_queue *), void *data)
{
    q->head = q->tail = NULL;
    q->signaled = 0;
    q->on_wake = on_wake;
    q->data = data;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0)
        return -errno;
    int rc = uv_poll_init(loop, &q->poll, q->efd);
    if (rc < 0) {
        close(q->efd);
        return rc;
    }
    pthread_mutex_init(&q->mu, NULL);
    q->poll.data = q;
    uv_poll_start(&q->poll, UV_READABLE, on_readable);
    return 0;
}

void zk_queue_push(struct zk_queue *q, struct zk_qnode *n)
{
    n->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
    int wake = !q->signaled;
    q->signaled = 1;
    pthread_mutex_unlock(&q->mu);
    if (wake) {
        uint64_t one = 1;
        /* Cannot fail but for EINTR: the counter never nears its limit. */
        while (write(q->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
}

struct zk_qnode *zk_queue_take(struct zk_queue *q)
{
    pthread_mutex_lock(&q->mu);
    struct zk_qnode *n = q->head;
    q->head = q->tail = NULL;
    q->signaled = 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

int zk_queue_empty(struct zk_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int empty = q->head == NULL;
    pthread_mutex_unlock(&q->mu);
    return empty;
}

void zk_queue_close(struct zk_queue *q, uv_close_cb on_closed)
{
    uv_poll_stop(&q->poll);
    q->poll.data = q->data;
    uv_close((uv_handle_t *)&q->poll, on_closed);
}

void zk_queue_destroy(struct zk_queue *q)
{
    close(q->efd);
    pthread_mutex_destroy(&q->mu);
}
