/*
 * zk_queue.c — the bridge's completion queue (zk_queue.h): a mutex-guarded
 * list and a uv_async_t.
 */
#include "zk_queue.h"

#include <stddef.h>

void zk_queue_init(struct zk_queue *q, uv_loop_t *loop, uv_async_cb on_wake,
                   void *data)
{
    q->head = q->tail = NULL;
    pthread_mutex_init(&q->mu, NULL);
    uv_async_init(loop, &q->async, on_wake);
    q->async.data = data;
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
    pthread_mutex_unlock(&q->mu);
    uv_async_send(&q->async);
}

struct zk_qnode *zk_queue_take(struct zk_queue *q)
{
    pthread_mutex_lock(&q->mu);
    struct zk_qnode *n = q->head;
    q->head = q->tail = NULL;
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
    uv_close((uv_handle_t *)&q->async, on_closed);
}

void zk_queue_destroy(struct zk_queue *q)
{
    pthread_mutex_destroy(&q->mu);
}
