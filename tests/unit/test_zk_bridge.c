/*
 * test_zk_bridge.c — the bridge to zookeeper_mt (sidecar/zk*.c) driven
 * through exact orders of events, with the client library replaced by the
 * fakes below (this binary's definitions win over libzookeeper_mt's) and
 * the clock by one the test moves.  What the integration suites cannot
 * time: a process stopped (SIGSTOP, a paused VM) with answers and session
 * events queued for its loop.
 *
 * The fakes record each asynchronous call; the test answers it by calling
 * its completion, as the library's completion thread would, then drains
 * the queue as the loop would.
 */
#include "unit.h"
#include "config.h"
#include "log.h"
#include "zk_impl.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* --- the clock: the test's while `fake_clock`, else libuv's ------------- */

static int fake_clock;
static uint64_t fake_ns;

uint64_t uv_hrtime(void)
{
    if (fake_clock)
        return fake_ns;
    uint64_t (*real)(void) = (uint64_t(*)(void))dlsym(RTLD_NEXT, "uv_hrtime");
    return real ? real() : 0;
}

static void advance_ms(double ms)
{
    fake_ns += (uint64_t)(ms * 1e6);
}

/* metrics.c is not linked: the bridge's histograms go nowhere. */
void metrics_histo_add(struct metrics_histo *h, double s)
{
    (void)h;
    (void)s;
}

/* --- the client library ------------------------------------------------ */

static int lib_state;
static clientid_t lib_client;
static watcher_fn lib_watcher;
static void *lib_watcher_ctx;
static int lib_handle;

struct call {
    const void *completion;
    const void *data;
};
static struct call calls[16];
static int ncalls, multis;

zhandle_t *zookeeper_init(const char *host, watcher_fn fn, int recv_timeout,
                          const clientid_t *clientid, void *context, int flags)
{
    lib_watcher = fn;
    lib_watcher_ctx = context;
    lib_state = ZOO_CONNECTING_STATE;
    return (zhandle_t *)&lib_handle;
}

int zoo_set_servers_resolution_delay(zhandle_t *zh, int delay_ms)
{
    return ZOK;
}

const clientid_t *zoo_client_id(zhandle_t *zh)
{
    return &lib_client;
}

int zoo_recv_timeout(zhandle_t *zh)
{
    return 10000;
}

struct sockaddr *zookeeper_get_connected_host(zhandle_t *zh,
                                              struct sockaddr *addr,
                                              socklen_t *addr_len)
{
    return NULL;
}

int zoo_state(zhandle_t *zh)
{
    return lib_state;
}

int zookeeper_close(zhandle_t *zh)
{
    return ZOK;
}

static int record(const void *completion, const void *data)
{
    if (ncalls == (int)(sizeof calls / sizeof calls[0]))
        return ZSYSTEMERROR;
    calls[ncalls].completion = completion;
    calls[ncalls].data = data;
    ncalls++;
    return ZOK;
}

int zoo_aget(zhandle_t *zh, const char *path, int watch,
             data_completion_t completion, const void *data)
{
    return record((const void *)completion, data);
}

int zoo_acreate2(zhandle_t *zh, const char *path, const char *value,
                 int valuelen, const struct ACL_vector *acl, int mode,
                 string_stat_completion_t completion, const void *data)
{
    return record((const void *)completion, data);
}

/* The last multi's operations and results (the bridge's, until answered). */
static const zoo_op_t *multi_ops;
static zoo_op_result_t *multi_res;
static int multi_n, sets;

int zoo_amulti(zhandle_t *zh, int count, const zoo_op_t *ops,
               zoo_op_result_t *results, void_completion_t completion,
               const void *data)
{
    multis++;
    multi_ops = ops;
    multi_res = results;
    multi_n = count;
    return record((const void *)completion, data);
}

int zoo_aset(zhandle_t *zh, const char *path, const char *buffer, int buflen,
             int version, stat_completion_t completion, const void *data)
{
    sets++;
    return record((const void *)completion, data);
}

/* --- the bridge's user ------------------------------------------------- */

static int answers, last_rc;

static void on_done(const struct zk_result *res, void *arg)
{
    answers++;
    last_rc = res->rc;
}

static void on_event(const char *event, int64_t session, void *arg)
{
}

static void session_event(int state)
{
    lib_watcher((zhandle_t *)&lib_handle, ZOO_SESSION_EVENT, state, NULL,
                lib_watcher_ctx);
}

static struct config cfg;
static uv_loop_t loop;

/* A bridge whose session (10 s) has connected. */
static struct zk *connected(void)
{
    log_set_level(LOG_ERROR); /* its connects and closes are the test's */
    fake_clock = 1;
    fake_ns = 1000000000000ull;
    ncalls = multis = sets = answers = 0;
    last_rc = 999;
    lib_client.client_id = 0x1234;
    cfg.zk = "127.0.0.1:1";
    cfg.root = "/r";
    cfg.session_timeout = 10000;
    cfg.zk_group_max = 16;
    cfg.zk_max_request = 1000000;
    uv_loop_init(&loop);
    char err[256];
    struct zk *z = zk_create(&loop, &cfg, on_event, NULL, err, sizeof err);
    if (!z || zk_start(z, err, sizeof err) < 0)
        return NULL;
    lib_state = ZOO_CONNECTED_STATE;
    session_event(ZOO_CONNECTED_STATE);
    zk_drain(z);
    return z;
}

static void finish(struct zk *z)
{
    zk_free(z);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    fake_clock = 0;
    log_set_level(LOG_INFO);
}

static void create(struct zk *z, const char *path, int flags)
{
    struct zk_op op = {.type = ZK_OP_CREATE, .path = path, .flags = flags};
    zk_submit(z, ZK_OP_CREATE, &op, 1, zk_now() + 5000, 0, on_done, NULL);
}

static void answer_create(int i)
{
    string_stat_completion_t done =
        (string_stat_completion_t)calls[i].completion;
    done(ZOK, "/r/lock", NULL, calls[i].data);
}

/* A waiter's read ahead of /r/d on /r/w's watch; the watch fires (the
 * read goes out from the completion thread) and the loop drains the event. */
static void read_ahead_fired(struct zk *z)
{
    zk_read_ahead(z, "/r/w", "/r/d");
    lib_watcher((zhandle_t *)&lib_handle, ZOO_DELETED_EVENT,
                ZOO_CONNECTED_STATE, "/r/w", lib_watcher_ctx);
    zk_drain(z);
}

static void answer_read(int i)
{
    data_completion_t done = (data_completion_t)calls[i].completion;
    done(ZOK, "v", 1, NULL, calls[i].data);
}

/* The control: an answer drained in time is delivered as it came. */
TEST(zk_bridge_delivers_an_answer_in_time)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    create(z, "/r/lock", ZOO_EPHEMERAL);
    ASSERT_INT_EQ(ncalls, 1);
    advance_ms(1);
    answer_create(0);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 1);
    ASSERT_INT_EQ(last_rc, ZOK);
    finish(z);
}

/* The connection drops and comes back on the same session; a create sent
 * before the loop saw either is answered; then the process stops for 60 s,
 * past the session (10 s), before the loop drains any of it.  The lease
 * restarts from when the reconnection came, not from the loop's waking,
 * so the create's answer may speak for a session over since: unknown. */
TEST(zk_bridge_lease_restarts_from_the_event_not_the_drain)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    advance_ms(1000);
    session_event(ZOO_CONNECTING_STATE);
    session_event(ZOO_CONNECTED_STATE);
    create(z, "/r/lock", ZOO_EPHEMERAL);
    ASSERT_INT_EQ(ncalls, 1);
    advance_ms(1);
    answer_create(0);
    advance_ms(60000);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 1);
    ASSERT_INT_EQ(last_rc, ZCONNECTIONLOSS);
    ASSERT(zk_lease_end(z) < zk_now());
    finish(z);
}

/* A read ahead whose answer waited in the queue through a 60 s stop is an
 * unknown outcome for its taker, as any answer is. */
TEST(zk_bridge_read_ahead_answer_after_a_stop_is_unknown)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    read_ahead_fired(z);
    ASSERT_INT_EQ(ncalls, 1); /* the read went out with the event */
    const struct zk_result *now = NULL;
    int slot = -1;
    ASSERT_INT_EQ(
        zk_take_ahead(z, "/r/d", zk_now() + 100000, on_done, NULL, &now, &slot),
        2); /* waiting for it */
    answer_read(0);
    advance_ms(60000);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 1);
    ASSERT_INT_EQ(last_rc, ZCONNECTIONLOSS);
    finish(z);
}

/* A read ahead's answer kept for a taker, then the session expires (a new
 * handle): the kept answer is the old session's and is never taken. */
TEST(zk_bridge_kept_read_ahead_answer_dies_with_its_session)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    read_ahead_fired(z);
    ASSERT_INT_EQ(ncalls, 1);
    answer_read(0);
    uint64_t gen = zk_generation(z);
    session_event(ZOO_EXPIRED_SESSION_STATE);
    zk_drain(z); /* the answer kept, then the expiry: a new handle */
    ASSERT(zk_generation(z) != gen);
    const struct zk_result *now = NULL;
    int slot = -1;
    int how =
        zk_take_ahead(z, "/r/d", zk_now() + 1000, on_done, NULL, &now, &slot);
    if (how == 1)
        zk_ahead_taken(z, slot);
    ASSERT_INT_EQ(how, 0); /* none: the waiter reads for itself */
    finish(z);
}

/* Create flags the library does not know as a mode (7) are refused before
 * a multi reaches it: inside zoo_amulti they would free memory it does not
 * own for every later operation. */
TEST(zk_bridge_refuses_unknown_create_modes)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    struct zk_op ops[] = {
        {.type = ZK_OP_CREATE, .path = "/a/", .flags = 7},
        {.type = ZK_OP_DELETE, .path = "/b", .version = -1},
    };
    zk_submit(z, ZK_OP_MULTI, ops, 2, zk_now() + 5000, 0, on_done, NULL);
    zk_drain(z);
    ASSERT_INT_EQ(multis, 0);
    ASSERT_INT_EQ(answers, 1);
    ASSERT_INT_EQ(last_rc, ZBADARGUMENTS);
    /* a sequential mode the library knows (3) may end in '/' */
    create(z, "/r/q/", ZOO_EPHEMERAL | ZOO_SEQUENCE);
    ASSERT_INT_EQ(ncalls, 1);
    finish(z);
}

/* A session that expires with a request of background work in flight (no
 * deadline): the closed handle never answers it, so the bridge does, as a
 * connection loss (an unknown outcome), not never. */
TEST(zk_bridge_answers_what_a_replaced_session_had_in_flight)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    create(z, "/r/lock", ZOO_EPHEMERAL);
    struct zk_op op = {.type = ZK_OP_CREATE, .path = "/r/bg", .flags = 0};
    zk_submit(z, ZK_OP_CREATE, &op, 1, 0, 0, on_done, NULL);
    ASSERT_INT_EQ(ncalls, 2);
    answer_create(0); /* the first is answered before the expiry */
    session_event(ZOO_EXPIRED_SESSION_STATE);
    zk_drain(z); /* the answer, then the expiry: the handle replaced */
    zk_drain(z);
    ASSERT_INT_EQ(answers, 2);
    ASSERT_INT_EQ(last_rc, ZCONNECTIONLOSS);
    finish(z);
}

/* --- versions that wrap (zk.c's wrap_sets) ------------------------------ */

/* What the last answer delivered. */
static struct zk_result got;
static int got_stat_version[4], got_rc[4];

static void on_result(const struct zk_result *res, void *arg)
{
    answers++;
    got = *res;
    for (int i = 0; i < res->nmulti && i < 4; i++) {
        got_rc[i] = res->multi[i].rc;
        got_stat_version[i] =
            res->multi[i].has_stat ? res->multi[i].stat.version : -999;
    }
}

/* The server answers the last multi: rc, and each set's version after it
 * (from -2: -1, then 0), or each operation's code when it failed. */
static void answer_multi(int rc, const int *errs)
{
    int version = -2;
    for (int i = 0; i < multi_n; i++) {
        multi_res[i].err = errs ? errs[i] : ZOK;
        if (rc == ZOK && multi_ops[i].type == ZOO_SETDATA_OP)
            multi_ops[i].set_op.stat->version = ++version;
    }
    void_completion_t done = (void_completion_t)calls[ncalls - 1].completion;
    done(rc, calls[ncalls - 1].data);
}

/* A set at the version before -1 ("any") goes with a second set at -1 in
 * one multi, so the node goes on to 0 and is never read at -1 (where the
 * next compare-and-set would apply whatever changed); it answers as the
 * one set asked, with the node's version after both. */
TEST(zk_bridge_takes_a_node_past_version_minus_one)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    struct zk_op op = {.type = ZK_OP_SET,
                       .path = "/r/t",
                       .data = "grants",
                       .datalen = 6,
                       .version = -2};
    zk_submit(z, ZK_OP_SET, &op, 1, zk_now() + 5000, 0, on_result, NULL);
    ASSERT_INT_EQ(sets, 0);
    ASSERT_INT_EQ(multis, 1);
    ASSERT_INT_EQ(multi_n, 2);
    for (int i = 0; i < 2; i++) {
        ASSERT_INT_EQ(multi_ops[i].type, ZOO_SETDATA_OP);
        ASSERT_STR_EQ(multi_ops[i].set_op.path, "/r/t");
        ASSERT_INT_EQ(multi_ops[i].set_op.datalen, 6);
        ASSERT(memcmp(multi_ops[i].set_op.data, "grants", 6) == 0);
    }
    ASSERT_INT_EQ(multi_ops[0].set_op.version, -2);
    ASSERT_INT_EQ(multi_ops[1].set_op.version, -1);
    answer_multi(ZOK, NULL);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 1);
    ASSERT_INT_EQ(got.type, ZK_OP_SET);
    ASSERT_INT_EQ(got.rc, ZOK);
    ASSERT_INT_EQ(got.nmulti, 0);
    ASSERT(got.has_stat);
    ASSERT_INT_EQ(got.stat.version, 0);

    /* stale: the set's own code, as a set alone answers it */
    zk_submit(z, ZK_OP_SET, &op, 1, zk_now() + 5000, 0, on_result, NULL);
    int stale[] = {ZBADVERSION, ZRUNTIMEINCONSISTENCY};
    answer_multi(ZBADVERSION, stale);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 2);
    ASSERT_INT_EQ(got.type, ZK_OP_SET);
    ASSERT_INT_EQ(got.rc, ZBADVERSION);
    ASSERT(!got.has_stat);

    /* any other version: a plain set */
    op.version = -3;
    zk_submit(z, ZK_OP_SET, &op, 1, zk_now() + 5000, 0, on_result, NULL);
    op.version = -1;
    zk_submit(z, ZK_OP_SET, &op, 1, zk_now() + 5000, 0, on_result, NULL);
    ASSERT_INT_EQ(sets, 2);
    ASSERT_INT_EQ(multis, 2);
    finish(z);
}

/* Inside a multi, the added set follows its set and its result folds back:
 * the caller sees its own operations, in its order. */
TEST(zk_bridge_multi_answers_its_own_operations_past_version_minus_one)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    struct zk_op ops[] = {
        {.type = ZK_OP_DELETE, .path = "/r/t/a-1", .version = 0},
        {.type = ZK_OP_SET,
         .path = "/r/t",
         .data = "g",
         .datalen = 1,
         .version = -2},
        {.type = ZK_OP_CHECK, .path = "/r/g", .version = 7}};
    zk_submit(z, ZK_OP_MULTI, ops, 3, zk_now() + 5000, 0, on_result, NULL);
    ASSERT_INT_EQ(multi_n, 4);
    ASSERT_INT_EQ(multi_ops[0].type, ZOO_DELETE_OP);
    ASSERT_INT_EQ(multi_ops[1].set_op.version, -2);
    ASSERT_INT_EQ(multi_ops[2].type, ZOO_SETDATA_OP);
    ASSERT_INT_EQ(multi_ops[2].set_op.version, -1);
    ASSERT_INT_EQ(multi_ops[3].type, ZOO_CHECK_OP);
    answer_multi(ZOK, NULL);
    zk_drain(z);
    ASSERT_INT_EQ(got.type, ZK_OP_MULTI);
    ASSERT_INT_EQ(got.rc, ZOK);
    ASSERT_INT_EQ(got.nmulti, 3);
    ASSERT_INT_EQ(got_rc[1], ZOK);
    ASSERT_INT_EQ(got_stat_version[1], 0);
    ASSERT_INT_EQ(got_stat_version[0], -999);

    /* the check fails: the set before it answers ZOK (nothing applied) */
    zk_submit(z, ZK_OP_MULTI, ops, 3, zk_now() + 5000, 0, on_result, NULL);
    int errs[] = {ZOK, ZOK, ZOK, ZBADVERSION};
    answer_multi(ZBADVERSION, errs);
    zk_drain(z);
    ASSERT_INT_EQ(got.rc, ZBADVERSION);
    ASSERT_INT_EQ(got.nmulti, 3);
    ASSERT_INT_EQ(got_rc[1], ZOK);
    ASSERT_INT_EQ(got_rc[2], ZBADVERSION);
    finish(z);
}

/* A set at -2 grouped with another command's write (group commit): its
 * second set goes out right after it in the group's multi, and it answers
 * as the one set asked; its own failure is its own. */
TEST(zk_bridge_group_takes_a_node_past_version_minus_one)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    struct zk_op create_op = {.type = ZK_OP_CREATE, .path = "/r/k"};
    struct zk_op set_op = {.type = ZK_OP_SET,
                           .path = "/r/t",
                           .data = "g",
                           .datalen = 1,
                           .version = -2};
    zk_submit(z, ZK_OP_CREATE, &create_op, 1, zk_now() + 5000, ZK_GROUPED,
              on_done, NULL);
    zk_submit(z, ZK_OP_SET, &set_op, 1, zk_now() + 5000, ZK_GROUPED, on_result,
              NULL);
    ASSERT_INT_EQ(multis, 0);
    zk_group_send(z);
    ASSERT_INT_EQ(multis, 1);
    ASSERT_INT_EQ(multi_n, 3);
    ASSERT_INT_EQ(multi_ops[0].type, ZOO_CREATE_OP);
    ASSERT_INT_EQ(multi_ops[1].set_op.version, -2);
    ASSERT_INT_EQ(multi_ops[2].set_op.version, -1);
    answer_multi(ZOK, NULL);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 2);
    ASSERT_INT_EQ(got.type, ZK_OP_SET);
    ASSERT_INT_EQ(got.rc, ZOK);
    ASSERT_INT_EQ(got.stat.version, 0);

    zk_submit(z, ZK_OP_CREATE, &create_op, 1, zk_now() + 5000, ZK_GROUPED,
              on_done, NULL);
    zk_submit(z, ZK_OP_SET, &set_op, 1, zk_now() + 5000, ZK_GROUPED, on_result,
              NULL);
    zk_group_send(z);
    int stale[] = {ZOK, ZBADVERSION, ZRUNTIMEINCONSISTENCY};
    answer_multi(ZBADVERSION, stale);
    zk_drain(z);
    ASSERT_INT_EQ(got.type, ZK_OP_SET);
    ASSERT_INT_EQ(got.rc, ZBADVERSION);
    finish(z);
}

/* zk_seen_zxid: the newest zxid of any stat answered (a create's, a read's,
 * a multi's operations'), never lowered by an older one or by an answer
 * with none. */
TEST(zk_bridge_seen_zxid_is_the_newest_answered)
{
    struct zk *z = connected();
    ASSERT(z != NULL);
    ASSERT_INT_EQ(zk_seen_zxid(z), 0);
    create(z, "/r/a", 0);
    struct Stat st = {.czxid = 7, .mzxid = 7, .pzxid = 7};
    ((string_stat_completion_t)calls[0].completion)(ZOK, "/r/a", &st,
                                                    calls[0].data);
    zk_drain(z);
    ASSERT_INT_EQ(zk_seen_zxid(z), 7);

    struct zk_op get = {.type = ZK_OP_GET, .path = "/r/b"};
    zk_submit(z, ZK_OP_GET, &get, 1, zk_now() + 5000, 0, on_done, NULL);
    st = (struct Stat){.czxid = 2, .mzxid = 3, .pzxid = 9};
    ((data_completion_t)calls[1].completion)(ZOK, "v", 1, &st, calls[1].data);
    zk_submit(z, ZK_OP_GET, &get, 1, zk_now() + 5000, 0, on_done, NULL);
    st = (struct Stat){.czxid = 4, .mzxid = 4, .pzxid = 4};
    ((data_completion_t)calls[2].completion)(ZOK, "v", 1, &st, calls[2].data);
    create(z, "/r/c", 0);
    ((string_stat_completion_t)calls[3].completion)(ZCONNECTIONLOSS, NULL, NULL,
                                                    calls[3].data);
    zk_drain(z);
    ASSERT_INT_EQ(answers, 4);
    ASSERT_INT_EQ(zk_seen_zxid(z), 9);

    struct zk_op set = {.type = ZK_OP_SET,
                        .path = "/r/t",
                        .data = "g",
                        .datalen = 1,
                        .version = -2};
    zk_submit(z, ZK_OP_SET, &set, 1, zk_now() + 5000, 0, on_result, NULL);
    ASSERT_INT_EQ(multi_n, 2);
    multi_ops[0].set_op.stat->mzxid = 12;
    multi_ops[1].set_op.stat->mzxid = 12;
    answer_multi(ZOK, NULL);
    zk_drain(z);
    ASSERT_INT_EQ(zk_seen_zxid(z), 12);
    finish(z);
}
