/*
 * zk_queue.h — the bridge's completion queue: records handed from
 * zookeeper_mt's threads to the loop thread.
 *
 *   any thread                            loop thread
 *   zk_queue_push(n): lock, append,       on_wake (uv_poll on an eventfd):
 *   unlock, write the eventfd ─────────►  zk_queue_take takes everything
 *   (unless a wake-up is pending)         queued, oldest first, in one go
 *
 * The mutex guards the list and `signaled` only: it is held for an append
 * or a take, never while a record is handled.  Wake-ups coalesce: pushes
 * after the first and before the next take write nothing, and one on_wake
 * call takes them all.
 * This file takes the bridge's only lock (zk_log.c has one of its own, for
 * the client's log lines).
 */
#ifndef ZKRESP_ZK_QUEUE_H
#define ZKRESP_ZK_QUEUE_H

#include <pthread.h>
#include <uv.h>

/* A queued record embeds one (a record is in the queue at most once). */
struct zk_qnode {
    struct zk_qnode *next;
};

struct zk_queue {
    pthread_mutex_t mu; /* guards head, tail and signaled */
    struct zk_qnode *head, *tail;
    int signaled; /* a push wrote the eventfd since the last take */
    int efd;      /* the eventfd the loop polls */
    uv_poll_t poll;
    void (*on_wake)(struct zk_queue *q);
    void *data; /* the `data` of zk_queue_init */
};

/* On the loop thread: on_wake(q) runs on the loop after pushes, and should
 * take what is queued.  0, or a negative errno (no eventfd) and nothing to
 * destroy. */
int zk_queue_init(struct zk_queue *q, uv_loop_t *loop,
                  void (*on_wake)(struct zk_queue *q), void *data);

/* From any thread: appends n and wakes the loop. */
void zk_queue_push(struct zk_queue *q, struct zk_qnode *n);

/* Loop thread: takes every queued record, as a list linked by next in
 * push order (per pushing thread), or NULL when the queue is empty. */
struct zk_qnode *zk_queue_take(struct zk_queue *q);

/* Whether nothing is queued (a snapshot: a push may follow at once). */
int zk_queue_empty(struct zk_queue *q);

/* Closes the poll handle; on_closed(handle) when done, its data the
 * `data` of zk_queue_init.  The queue must be left alone by every thread
 * from now on. */
void zk_queue_close(struct zk_queue *q, uv_close_cb on_closed);

/* After the close completed: releases the mutex. */
void zk_queue_destroy(struct zk_queue *q);

#endif
