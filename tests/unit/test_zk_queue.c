/*
 * test_zk_queue.c — the bridge's completion queue (sidecar/zk_queue.c),
 * without ZooKeeper: records pushed from other threads reach the loop
 * thread through one eventfd, each once, in each pusher's order, and
 * pushes made before the loop wakes are taken by one wake-up.
 */
#include "unit.h"
#include "zk_queue.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct item {
    struct zk_qnode qnode; /* first: a node is its item */
    int producer;
    int seq;
};

#define PRODUCERS 8
#define PER_PRODUCER 10000

struct world {
    struct zk_queue q;
    uv_loop_t loop;
    int wakes;           /* on_wake calls */
    int taken;           /* records taken */
    int expected;        /* stop the loop once this many were taken */
    int next[PRODUCERS]; /* each producer's next expected seq */
    int out_of_order, foreign;
    struct item *seen[64]; /* the first records taken, in order */
};

static void on_wake(struct zk_queue *q)
{
    struct world *w = q->data;
    w->wakes++;
    for (struct zk_qnode *n = zk_queue_take(&w->q); n; n = n->next) {
        struct item *it = (struct item *)n;
        if (w->taken < 64)
            w->seen[w->taken] = it;
        w->taken++;
        if (it->producer < 0 || it->producer >= PRODUCERS)
            w->foreign++;
        else if (it->seq != w->next[it->producer]++)
            w->out_of_order++;
    }
    if (w->expected && w->taken >= w->expected)
        uv_stop(&w->loop);
}

static int world_init(struct world *w)
{
    memset(w, 0, sizeof *w);
    uv_loop_init(&w->loop);
    return zk_queue_init(&w->q, &w->loop, on_wake, w);
}

static void world_close(struct world *w)
{
    zk_queue_close(&w->q, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    zk_queue_destroy(&w->q);
}

TEST(zk_queue_coalesces_wakeups_and_keeps_order)
{
    struct world w;
    ASSERT_INT_EQ(world_init(&w), 0);
    struct item items[50];
    ASSERT(zk_queue_empty(&w.q));
    ASSERT(zk_queue_take(&w.q) == NULL);
    /* Pushed before the loop runs: one wake-up takes them all, in order. */
    for (int i = 0; i < 50; i++) {
        items[i].producer = 0;
        items[i].seq = i;
        zk_queue_push(&w.q, &items[i].qnode);
    }
    ASSERT(!zk_queue_empty(&w.q));
    uv_run(&w.loop, UV_RUN_NOWAIT);
    int wakes = w.wakes, taken = w.taken, bad = w.out_of_order;
    int first = w.seen[0] == &items[0], last = w.seen[49] == &items[49];
    int empty = zk_queue_empty(&w.q);
    /* Nothing queued: no wake-up. */
    uv_run(&w.loop, UV_RUN_NOWAIT);
    int wakes_after = w.wakes;
    /* A push after the drain wakes the loop again. */
    items[0].seq = 50;
    zk_queue_push(&w.q, &items[0].qnode);
    uv_run(&w.loop, UV_RUN_NOWAIT);
    world_close(&w);
    ASSERT_INT_EQ(wakes, 1);
    ASSERT_INT_EQ(taken, 50);
    ASSERT_INT_EQ(bad, 0);
    ASSERT(first && last);
    ASSERT(empty);
    ASSERT_INT_EQ(wakes_after, 1);
    ASSERT_INT_EQ(w.wakes, 2);
    ASSERT_INT_EQ(w.taken, 51);
    ASSERT_INT_EQ(w.out_of_order, 0);
}

struct producer {
    struct world *w;
    struct item *items;
    int id;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        p->items[i].producer = p->id;
        p->items[i].seq = i;
        zk_queue_push(&p->w->q, &p->items[i].qnode);
    }
    return NULL;
}

TEST(zk_queue_many_producers_lose_and_double_nothing)
{
    struct world w;
    ASSERT_INT_EQ(world_init(&w), 0);
    w.expected = PRODUCERS * PER_PRODUCER;
    struct item *items = calloc((size_t)w.expected, sizeof *items);
    ASSERT(items != NULL);
    struct producer ps[PRODUCERS];
    pthread_t th[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++) {
        ps[p] = (struct producer){&w, items + p * PER_PRODUCER, p};
        pthread_create(&th[p], NULL, produce, &ps[p]);
    }
    /* Runs until every record was taken (on_wake stops the loop). */
    uv_run(&w.loop, UV_RUN_DEFAULT);
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    /* A wake-up sent after the last take finds the queue empty. */
    uv_run(&w.loop, UV_RUN_NOWAIT);
    world_close(&w);
    free(items);
    ASSERT_INT_EQ(w.taken, PRODUCERS * PER_PRODUCER);
    ASSERT_INT_EQ(w.foreign, 0);
    ASSERT_INT_EQ(w.out_of_order, 0);
    for (int p = 0; p < PRODUCERS; p++)
        ASSERT_INT_EQ(w.next[p], PER_PRODUCER);
    /* Coalesced: never more wake-ups than pushes. */
    ASSERT(w.wakes >= 1 && w.wakes <= w.taken);
}
