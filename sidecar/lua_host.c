/*
 * lua_host.c — the Lua 5.4 VM, its coroutines and the zk/host bindings.
 *
 *   lua_host_run ──► new coroutine: M.dispatch(args)
 *                      │ zk.get(...)  ──► zk_submit ... yield
 *                      │                      (loop runs other work)
 *                      │ ◄── on_zk_done: push results, lua_resume
 *                      ▼
 *                    returns a reply value ──► client_ops.encode ──► task->done
 *
 * Each coroutine has a struct co record (its task, deadline, what it waits
 * for), reachable from the thread through lua_getextraspace() and anchored
 * in the registry while it runs.  The VM belongs to the loop thread.
 *
 * A command's thread that returned normally is kept (up to SPARE_THREADS)
 * for a later command: its stack and call records have already grown to a
 * command's depth, which a new thread would allocate again, call level by
 * call level.  Only commands reuse them, and M.dispatch clears the Lua
 * state kept per coroutine (util.lua's per_command) before it starts;
 * background coroutines get new threads.
 */
#include "lua_host.h"

#include "config.h"
#include "keyenc.h"
#include "log.h"
#include "lua_alloc.h"
#include "lua_pattern.h"
#include "zk.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <uv.h>
#include <zookeeper/zookeeper.h>

#define SPARE_THREADS 64

enum co_wait {
    WAIT_NONE,
    WAIT_ZK,
    WAIT_SLEEP,
    WAIT_WAKE,
    WAIT_READY,
    WAIT_SLICE /* a script's code paused between slices (host.caps) */
};

/* The caps of an EVAL script's client code (host.caps).  Once `killed` is
 * set it stays set until the command ends: from then on no client function
 * may run a single instruction (see caps_hook). */
struct caps {
    int on;             /* watching: client code runs */
    const char *killed; /* "time", "memory" or "killed" (SCRIPT KILL) */
    double deadline;    /* host.busy() ms */
    double mem0_kb, limit_kb;
    double slice_ms; /* run this long, then let the loop serve others */
    int count, time_every, ticks;
};

struct co {
    struct lua_host *h;
    lua_State *L;          /* the coroutine */
    struct lua_task *task; /* NULL: background, or the requester left */
    double started;
    double deadline;    /* started + --zk-request-timeout */
    uint64_t lease_gen; /* host.lease_wait: the session it may wait for */
    double yielded_at;  /* when it last yielded (0: running) */
    double waited;      /* ms spent yielded: host.busy() leaves them out */
    double paused;      /* ms spent between slices: host.busy() too */
    double resumed_at;  /* when it was last resumed */
    enum co_wait wait;
    int nargs; /* values waiting on the stack for the next resume */
    struct co *next_ready;
    int reusable; /* a command's thread, to keep if it returns normally */
    int command;  /* runs a command (its requester may have left) */
    int sliced;   /* paused between slices: the VM is busy (host.caps) */
    struct co *busy_prev, *busy_next; /* h->busy, while sliced */
    struct caps caps;
};

struct sleep_rec {
    uv_timer_t timer;
    struct co *co; /* NULL once the coroutine is gone */
};

struct host_timer {
    uv_timer_t timer;
    struct lua_host *h;
    int fn_ref;
    int closed;
};

struct lua_host {
    lua_State *L;
    struct lua_alloc *alloc; /* L's memory; freed after lua_close */
    uv_loop_t *loop;
    struct zk *zk;
    const struct config *cfg;
    int ref_module;  /* the table scripts/zkresp.lua returned */
    int ref_anchors; /* lightuserdata(thread) -> thread, while it is ours */
    size_t running;  /* coroutines with a task */
    size_t commands; /* coroutines of commands, requester gone or not */
    size_t coroutines;
    unsigned long long activity;    /* coroutines started and finished */
    unsigned long long collections; /* lua_host_collect runs */
    struct co *ready_head, *ready_tail;
    uv_idle_t idle;
    int idle_on;
    int stopped; /* lua_host_stop: nothing runs any more */
    char instance[16];
    struct lua_client_ops client_ops;
    lua_State *spare[SPARE_THREADS]; /* finished commands' threads, still
                                        anchored */
    int nspare;
    struct co *busy; /* scripts paused between slices (host.busy_scripts) */
    void (*fatal)(void *arg, const char *reason);
    void *fatal_arg;
};

static const char NULL_KEY = 0; /* address used as host.null */

int lua_host_is_null(lua_State *L, int idx)
{
    return lua_islightuserdata(L, idx) &&
           lua_touserdata(L, idx) == (void *)&NULL_KEY;
}

static struct co *co_of(lua_State *L)
{
    return *(struct co **)lua_getextraspace(L);
}

static struct co *co_check(lua_State *L, const char *fn)
{
    struct co *c = co_of(L);
    if (c == NULL || !lua_isyieldable(L))
        luaL_error(L, "%s must be called from a command coroutine", fn);
    return c;
}

/* --- coroutine lifecycle ------------------------------------------------- */

static void busy_remove(struct co *c)
{
    struct lua_host *h = c->h;
    if (!c->sliced)
        return;
    c->sliced = 0;
    if (c->busy_prev)
        c->busy_prev->busy_next = c->busy_next;
    else
        h->busy = c->busy_next;
    if (c->busy_next)
        c->busy_next->busy_prev = c->busy_prev;
    c->busy_prev = c->busy_next = NULL;
}

static void busy_add(struct co *c)
{
    struct lua_host *h = c->h;
    c->sliced = 1;
    c->busy_prev = NULL;
    c->busy_next = h->busy;
    if (h->busy)
        h->busy->busy_prev = c;
    h->busy = c;
}

/* Anchors the thread on top of h->L's stack (and pops it): it is ours
 * until unanchor.  Keyed by address, so that it can be let go of without
 * pushing it.  The table is replaced by a copy when idle (lua_host_collect):
 * a Lua table keeps the room it once needed, as the registry's reference
 * array did. */
static void anchor(struct lua_host *h)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_anchors);
    lua_pushvalue(L, -2);
    lua_rawsetp(L, -2, lua_tothread(L, -1));
    lua_pop(L, 2);
}

static void unanchor(struct lua_host *h, lua_State *co)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_anchors);
    lua_pushnil(L);
    lua_rawsetp(L, -2, co);
    lua_pop(L, 1);
}

static void co_finish(struct co *c)
{
    struct lua_host *h = c->h;
    busy_remove(c);
    if (c->task) {
        c->task->priv = NULL;
        h->running--;
    }
    h->coroutines--;
    h->activity++;
    if (c->command)
        h->commands--;
    if (c->reusable && h->nspare < SPARE_THREADS &&
        lua_status(c->L) == LUA_OK) {
        lua_settop(c->L, 0);
        lua_sethook(c->L, NULL, 0, 0);
        *(struct co **)lua_getextraspace(c->L) = NULL;
        h->spare[h->nspare++] = c->L;
    } else {
        unanchor(h, c->L);
    }
    free(c);
}

static void co_deliver(struct co *c, int status, int nres)
{
    struct lua_task *t = c->task;
    lua_State *L = c->L;
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 0);
        char q[1024];
        const char *tb = lua_tostring(L, -1);
        log_error("lua.error", "task=%s msg=%s", t ? "command" : "background",
                  log_quote(tb, strlen(tb), q, sizeof q));
        if (t && t->done) {
            char line[512];
            snprintf(line, sizeof line, "ERR internal error: %s",
                     msg ? msg : "unknown");
            c->h->client_ops.encode_error(t->out, line);
        }
        c->reusable = 0;
    } else if (t && t->done) {
        c->h->client_ops.encode(L, nres >= 1 ? lua_absindex(L, -nres) : 0,
                                t->out, t->proto);
    }
    if (t && t->done) {
        t->priv = NULL;
        c->task = NULL;
        c->h->running--;
        t->done(t);
    }
    co_finish(c);
}

static void make_ready(struct lua_host *h, struct co *c, int nargs);
static size_t caps_limit(const struct co *c);
static void caps_verdict(struct co *c);

/* Resumes c with the nargs values on its stack.  While c's client code is
 * watched (host.caps), the allocator refuses growth past the script's
 * memory cap; a script whose count hook paused it at the end of a slice is
 * queued to run again after the loop has served everyone else. */
static void co_resume(struct co *c, int nargs)
{
    struct lua_host *h = c->h;
    if (h->stopped)
        return;
    int nres = 0;
    c->wait = WAIT_NONE;
    double now = zk_now();
    if (c->yielded_at > 0) {
        if (c->sliced)
            c->paused += now - c->yielded_at;
        else
            c->waited += now - c->yielded_at;
        c->yielded_at = 0;
    }
    busy_remove(c);
    c->resumed_at = now;
    size_t limit = lua_alloc_set_limit(h->alloc, caps_limit(c));
    int status = lua_resume(c->L, h->L, nargs, &nres);
    if (c->caps.on)
        caps_verdict(c);
    lua_alloc_set_limit(h->alloc, limit);
    if (status == LUA_YIELD) {
        c->yielded_at = zk_now();
        if (c->wait == WAIT_SLICE) {
            lua_pop(c->L, nres);
            busy_add(c);
            make_ready(h, c, 0);
            return;
        }
        if (c->wait == WAIT_NONE) {
            /* Something called coroutine.yield directly: a bug in Lua code. */
            lua_pop(c->L, nres);
            lua_pushstring(c->L, "coroutine.yield called in a command");
            co_deliver(c, LUA_ERRRUN, 0);
        }
        return;
    }
    co_deliver(c, status, nres);
}

/* Creates a coroutine calling the function on top of h->L's stack with the
 * nargs values below... (function first, then args, already on co's stack)
 * Returns the record; the caller pushes function and args onto c->L. */
static struct co *co_new(struct lua_host *h, struct lua_task *t)
{
    struct co *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->h = h;
    if (t && h->nspare > 0) {
        h->nspare--;
        c->L = h->spare[h->nspare];
    } else {
        c->L = lua_newthread(h->L);
        anchor(h);
    }
    c->reusable = t != NULL;
    c->command = t != NULL;
    h->commands += t != NULL;
    h->activity++;
    *(struct co **)lua_getextraspace(c->L) = c;
    c->task = t;
    c->started = zk_now();
    c->deadline = c->started + h->cfg->zk_request_timeout;
    h->coroutines++;
    if (t) {
        t->priv = c;
        h->running++;
    }
    return c;
}

static void on_idle(uv_idle_t *idle)
{
    struct lua_host *h = idle->data;
    struct co *c = h->ready_head;
    h->ready_head = h->ready_tail = NULL;
    while (c) {
        struct co *next = c->next_ready;
        co_resume(c, c->nargs);
        c = next;
    }
    if (!h->ready_head) {
        uv_idle_stop(&h->idle);
        h->idle_on = 0;
    }
}

static void make_ready(struct lua_host *h, struct co *c, int nargs)
{
    c->wait = WAIT_READY;
    c->nargs = nargs;
    c->next_ready = NULL;
    if (h->ready_tail)
        h->ready_tail->next_ready = c;
    else
        h->ready_head = c;
    h->ready_tail = c;
    if (!h->idle_on) {
        uv_idle_start(&h->idle, on_idle);
        h->idle_on = 1;
    }
}

/* --- zk.* ---------------------------------------------------------------- */

static void push_stat(lua_State *L, const struct zk_stat *s)
{
    lua_createtable(L, 0, 11);
#define F(name, v)                                                             \
    lua_pushinteger(L, (lua_Integer)(v));                                      \
    lua_setfield(L, -2, name)
    F("czxid", s->czxid);
    F("mzxid", s->mzxid);
    F("ctime", s->ctime);
    F("mtime", s->mtime);
    F("version", s->version);
    F("cversion", s->cversion);
    F("aversion", s->aversion);
    F("ephemeralOwner", s->ephemeral_owner);
    F("dataLength", s->data_length);
    F("numChildren", s->num_children);
    F("pzxid", s->pzxid);
#undef F
}

static void push_stat_or_nil(lua_State *L, const struct zk_result *r)
{
    if (r->has_stat)
        push_stat(L, &r->stat);
    else
        lua_pushnil(L);
}

/* Pushes the results of r onto L as the zk.* call's return values. */
static int push_result(lua_State *L, const struct zk_result *r)
{
    lua_pushinteger(L, r->rc);
    switch (r->type) {
    case ZK_OP_GET:
        if (r->rc == ZOK && r->data)
            lua_pushlstring(L, r->data, (size_t)r->datalen);
        else if (r->rc == ZOK)
            lua_pushliteral(L, "");
        else
            lua_pushnil(L);
        push_stat_or_nil(L, r);
        return 3;
    case ZK_OP_EXISTS:
    case ZK_OP_SET:
        push_stat_or_nil(L, r);
        return 2;
    case ZK_OP_CHILDREN:
        if (r->rc != ZOK) {
            lua_pushnil(L);
            return 2;
        }
        lua_createtable(L, r->nchildren, 0);
        for (int i = 0; i < r->nchildren; i++) {
            lua_pushstring(L, r->children[i] ? r->children[i] : "");
            lua_rawseti(L, -2, i + 1);
        }
        push_stat_or_nil(L, r);
        return 3;
    case ZK_OP_CREATE:
        if (r->path)
            lua_pushstring(L, r->path);
        else
            lua_pushnil(L);
        push_stat_or_nil(L, r);
        return 3;
    case ZK_OP_MULTI:
        lua_createtable(L, r->nmulti, 0);
        for (int i = 0; i < r->nmulti; i++) {
            const struct zk_result *m = &r->multi[i];
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, m->rc);
            lua_setfield(L, -2, "rc");
            if (m->path) {
                lua_pushstring(L, m->path);
                lua_setfield(L, -2, "path");
            }
            if (m->has_stat) {
                push_stat(L, &m->stat);
                lua_setfield(L, -2, "stat");
            }
            lua_rawseti(L, -2, i + 1);
        }
        return 2;
    case ZK_OP_GET_ACL:
        if (r->rc != ZOK) {
            lua_pushnil(L);
            return 2;
        }
        lua_createtable(L, r->nacl, 0);
        for (int i = 0; i < r->nacl; i++) {
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, r->acl[i].perms);
            lua_setfield(L, -2, "perms");
            lua_pushstring(L, r->acl[i].scheme ? r->acl[i].scheme : "");
            lua_setfield(L, -2, "scheme");
            lua_pushstring(L, r->acl[i].id ? r->acl[i].id : "");
            lua_setfield(L, -2, "id");
            lua_rawseti(L, -2, i + 1);
        }
        return 2;
    default:
        return 1;
    }
}

static void on_zk_done(const struct zk_result *res, void *arg)
{
    struct co *c = arg;
    int n = push_result(c->L, res);
    co_resume(c, n);
}

/* Until when c's ZooKeeper requests may wait: --zk-request-timeout of
 * waiting in all (the time the coroutine spent running, a script's own work,
 * does not count), or, for a command that host.lease_wait marked, as long
 * as the session it marked may still be alive (the local lease). */
static double co_deadline(const struct co *c)
{
    double now = zk_now();
    double running = c->yielded_at > 0 ? c->yielded_at : now;
    double d = c->deadline + (running - c->started - c->waited);
    if (c->lease_gen && c->lease_gen == zk_generation(c->h->zk)) {
        /* The lease moves on with every answer and reconnection; a command
         * waits at most one session timeout from its start for it. */
        double lease = zk_lease_end(c->h->zk);
        double cap = c->started + zk_negotiated_timeout(c->h->zk);
        if (lease > cap)
            lease = cap;
        if (lease > d)
            d = lease;
    }
    return d;
}

/* Submits c's operation; grouped: the write may go out with other
 * commands' writes in one multi (ZK_GROUPED), which the Lua caller asks for
 * with a trailing true.  A command's requests are answered by its deadline
 * even once sent (ZK_BOUNDED); background work waits for its answers. */
static void zk_send(struct co *c, enum zk_op_type type, const struct zk_op *ops,
                    int nops, int grouped)
{
    c->wait = WAIT_ZK;
    int flags = (grouped ? ZK_GROUPED : 0) | (c->task ? ZK_BOUNDED : 0);
    zk_submit(c->h->zk, type, ops, nops, co_deadline(c), flags, on_zk_done, c);
}

static int zk_call(lua_State *L, const char *fn, enum zk_op_type type,
                   struct zk_op *ops, int nops, int grouped)
{
    zk_send(co_check(L, fn), type, ops, nops, grouped);
    return lua_yield(L, 0);
}

static int l_zk_get(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_GET, .path = luaL_checkstring(L, 1)};
    op.watch = lua_toboolean(L, 2);
    return zk_call(L, "zk.get", ZK_OP_GET, &op, 1, 0);
}

static int l_zk_exists(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_EXISTS, .path = luaL_checkstring(L, 1)};
    op.watch = lua_toboolean(L, 2);
    return zk_call(L, "zk.exists", ZK_OP_EXISTS, &op, 1, 0);
}

static int l_zk_children(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_CHILDREN, .path = luaL_checkstring(L, 1)};
    op.watch = lua_toboolean(L, 2);
    return zk_call(L, "zk.children", ZK_OP_CHILDREN, &op, 1, 0);
}

/* zk.get_acl(path) -> rc, {{perms =, scheme =, id =}, ...} */
static int l_zk_get_acl(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_GET_ACL, .path = luaL_checkstring(L, 1)};
    return zk_call(L, "zk.get_acl", ZK_OP_GET_ACL, &op, 1, 0);
}

static int l_zk_sync(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_SYNC, .path = luaL_checkstring(L, 1)};
    return zk_call(L, "zk.sync", ZK_OP_SYNC, &op, 1, 0);
}

static int l_zk_create(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_CREATE, .path = luaL_checkstring(L, 1)};
    op.data = luaL_optlstring(L, 2, "", &op.datalen);
    op.flags = (int)luaL_optinteger(L, 3, 0);
    return zk_call(L, "zk.create", ZK_OP_CREATE, &op, 1, lua_toboolean(L, 4));
}

static int l_zk_set(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_SET, .path = luaL_checkstring(L, 1)};
    op.data = luaL_checklstring(L, 2, &op.datalen);
    op.version = (int)luaL_optinteger(L, 3, -1);
    return zk_call(L, "zk.set", ZK_OP_SET, &op, 1, lua_toboolean(L, 4));
}

static int l_zk_delete(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_DELETE, .path = luaL_checkstring(L, 1)};
    op.version = (int)luaL_optinteger(L, 2, -1);
    return zk_call(L, "zk.delete", ZK_OP_DELETE, &op, 1, lua_toboolean(L, 3));
}

/* Field k of the table at index t if it is a string, else NULL.  The value
 * is popped: the pointer stays valid because the table still references the
 * string (and Lua strings never move). */
static const char *field_string(lua_State *L, int t, int k, size_t *len)
{
    const char *s = NULL;
    if (lua_rawgeti(L, t, k) == LUA_TSTRING)
        s = lua_tolstring(L, -1, len);
    lua_pop(L, 1);
    return s;
}

static int field_int(lua_State *L, int t, int k, int dflt)
{
    int v = dflt;
    if (lua_rawgeti(L, t, k) == LUA_TNUMBER && lua_isinteger(L, -1))
        v = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

/* zk.multi({{"create", path, data, flags}, {"delete", path, version},
 *           {"set", path, data, version}, {"check", path, version}}
 *          [, grouped])
 * Each operation's table is popped once read, so the stack stays small
 * whatever the number of operations; the strings stay referenced through
 * the list at index 1 until zk_submit has copied them. */
/* Reads the operation list at index 1 (the stack holds only it) into
 * *out (the caller frees it); raises for a malformed list. */
static int read_ops(lua_State *L, const char *fn, struct zk_op **out)
{
    int n = (int)luaL_len(L, 1);
    if (n < 1 || n > 10000)
        return luaL_error(L, "%s needs 1 to 10000 operations", fn);
    struct zk_op *ops = calloc((size_t)n, sizeof *ops);
    if (!ops)
        return luaL_error(L, "out of memory");
    const char *bad = NULL;
    int bad_at = 0;
    for (int i = 0; i < n && !bad; i++) {
        bad_at = i + 1;
        if (lua_rawgeti(L, 1, i + 1) != LUA_TTABLE) {
            bad = "is not a table";
            break;
        }
        const char *kind = field_string(L, 2, 1, NULL);
        ops[i].path = field_string(L, 2, 2, NULL);
        if (!kind || !ops[i].path) {
            bad = "needs a kind and a path (strings)";
        } else if (strcmp(kind, "create") == 0 || strcmp(kind, "set") == 0) {
            ops[i].type = kind[0] == 'c' ? ZK_OP_CREATE : ZK_OP_SET;
            ops[i].data = field_string(L, 2, 3, &ops[i].datalen);
            if (!ops[i].data) {
                lua_rawgeti(L, 2, 3);
                if (!lua_isnil(L, -1))
                    bad = "has data that is not a string";
                lua_pop(L, 1);
                ops[i].data = "";
                ops[i].datalen = 0;
            }
            if (ops[i].type == ZK_OP_CREATE)
                ops[i].flags = field_int(L, 2, 4, 0);
            else
                ops[i].version = field_int(L, 2, 4, -1);
        } else if (strcmp(kind, "delete") == 0 || strcmp(kind, "check") == 0) {
            ops[i].type = kind[0] == 'd' ? ZK_OP_DELETE : ZK_OP_CHECK;
            ops[i].version = field_int(L, 2, 3, -1);
        } else {
            bad = "has an unknown kind";
        }
        if (!bad)
            lua_pop(L, 1); /* the operation's table */
    }
    if (bad) {
        free(ops);
        return luaL_error(L, "%s: operation %d %s", fn, bad_at, bad);
    }
    *out = ops;
    return n;
}

static int l_zk_multi(lua_State *L)
{
    struct co *c = co_check(L, "zk.multi");
    luaL_checktype(L, 1, LUA_TTABLE);
    int grouped = lua_toboolean(L, 2);
    lua_settop(L, 1);
    struct zk_op *ops = NULL;
    int n = read_ops(L, "zk.multi", &ops);
    zk_send(c, ZK_OP_MULTI, ops, n, grouped);
    free(ops);
    lua_settop(L, 0);
    return lua_yield(L, 0);
}

/* zk.request_size(ops) -> the bytes ZooKeeper would read for
 * zk.multi(ops) (zk_request_size); does not yield. */
static int l_zk_request_size(lua_State *L)
{
    struct lua_host *h =
        *(struct lua_host **)lua_touserdata(L, lua_upvalueindex(1));
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    struct zk_op *ops = NULL;
    int n = read_ops(L, "zk.request_size", &ops);
    size_t bytes = zk_request_size(h->zk, ZK_OP_MULTI, ops, n);
    free(ops);
    lua_pushinteger(L, (lua_Integer)bytes);
    return 1;
}

/* zk.max_request() -> the largest request the bridge sends, bytes; a
 * larger one answers zk.TOOBIG (zk_max_request). */
static int l_zk_max_request(lua_State *L)
{
    struct lua_host *h =
        *(struct lua_host **)lua_touserdata(L, lua_upvalueindex(1));
    lua_pushinteger(L, (lua_Integer)zk_max_request(h->zk));
    return 1;
}

static int l_zk_session(lua_State *L)
{
    struct lua_host *h =
        *(struct lua_host **)lua_touserdata(L, lua_upvalueindex(1));
    lua_pushinteger(L, (lua_Integer)zk_session_id(h->zk));
    lua_pushboolean(L, zk_connected(h->zk));
    return 2;
}

/* --- host.* -------------------------------------------------------------- */

static struct lua_host *host_of(lua_State *L)
{
    return *(struct lua_host **)lua_touserdata(L, lua_upvalueindex(1));
}

static int l_host_now(lua_State *L)
{
    lua_pushnumber(L, zk_now());
    return 1;
}

/* --- the caps of client code (host.caps) -------------------------------
 *
 * What sandbox.lua describes, in C, since it runs every few instructions of
 * a script.  While a command's client code runs, a count hook:
 *   - every time_every calls, compares host.busy() with the deadline (past
 *     it: killed, "time") and, once the script has run slice_ms since it was
 *     last resumed, yields it (the loop serves the others, then resumes it:
 *     meanwhile it is in h->busy, and commands are answered -BUSY);
 *   - kills it ("memory") when the allocator refused it memory (the limit
 *     is armed only while its client code runs, see co_resume);
 *   - kills it ("killed") when SCRIPT KILL asked, or its client left.
 * A kill is sticky: from then until the command ends, the hook fires on
 * every call and instruction and raises again in any client function (one
 * whose source is the script's chunk name, or any chunk it loaded), so no
 * __close handler of the script runs, whether the script unwinds from the
 * kill or from its own error, and no pcall of its can go on.  System code
 * (sources "@<file>") and C functions are left to finish.  Raising calls
 * the kill function given to host.caps, which builds the error object. */
static const char caps_kill_key = 'k';
static const char caps_client_key = 'c';

/* The allocator limit for c: armed only while its client code runs. */
static size_t caps_limit(const struct co *c)
{
    if (!c->caps.on || c->caps.limit_kb <= 0)
        return 0;
    double b = (c->caps.mem0_kb + c->caps.limit_kb) * 1024.0;
    return b < 1 ? 1 : (size_t)b;
}

/* An allocation refused while c's client code ran kills c ("memory"). */
static void caps_verdict(struct co *c)
{
    if (lua_alloc_take_refused(c->h->alloc) && !c->caps.killed)
        c->caps.killed = "memory";
}

/* Whether the function of ar (after lua_getinfo "S") is client code. */
static int caps_is_client(lua_State *L, const lua_Debug *ar)
{
    if (ar->what[0] == 'C' || !ar->source)
        return 0;
    if (ar->source[0] != '@')
        return 1; /* a chunk the script loaded (sandbox.lua renames "@") */
    lua_rawgetp(L, LUA_REGISTRYINDEX, &caps_client_key);
    const char *name = lua_tostring(L, -1);
    int client = name && strcmp(ar->source, name) == 0;
    lua_pop(L, 1);
    return client;
}

/* Whether a client function is on L's stack (a kill raised where there is
 * none would only unwind the system code around the script's call). */
static int caps_client_on_stack(lua_State *L)
{
    lua_Debug ar;
    for (int level = 0; lua_getstack(L, level, &ar); level++)
        if (lua_getinfo(L, "S", &ar) && caps_is_client(L, &ar))
            return 1;
    return 0;
}

/* Raises the kill function's error for reason why; never returns. */
static void caps_raise(lua_State *L, const char *why)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &caps_kill_key);
    lua_pushstring(L, why);
    lua_call(L, 1, 0);
    luaL_error(L, "script killed (%s)", why); /* if kill returned */
}

static void caps_hook(lua_State *L, lua_Debug *ar);

/* Marks c killed (sticky) and, while its client code is watched, watches
 * every call and instruction of its thread. */
static void caps_mark(struct co *c, const char *why)
{
    if (!c->caps.killed)
        c->caps.killed = why;
    if (c->caps.on)
        lua_sethook(c->L, caps_hook, LUA_MASKCALL | LUA_MASKCOUNT, 1);
}

static void caps_hook(lua_State *L, lua_Debug *ar)
{
    struct co *c = co_of(L);
    if (!c || !c->caps.on)
        return;
    struct caps *k = &c->caps;
    if (!k->killed) {
        caps_verdict(c);
        if (!k->killed && !c->task)
            k->killed = "killed"; /* the client left: nobody waits for it */
        if (!k->killed && ar->event == LUA_HOOKCOUNT &&
            ++k->ticks >= k->time_every) {
            k->ticks = 0;
            double now = zk_now();
            if (now - c->waited - c->paused > k->deadline) {
                k->killed = "time";
            } else if (now - c->resumed_at >= k->slice_ms &&
                       lua_isyieldable(L)) {
                c->wait = WAIT_SLICE;
                lua_yield(L, 0); /* co_resume queues it again */
                return;
            }
        }
        if (!k->killed)
            return;
        caps_mark(c, k->killed);
        if (caps_client_on_stack(L))
            caps_raise(L, k->killed);
        return;
    }
    if (lua_getinfo(L, "S", ar) && caps_is_client(L, ar))
        caps_raise(L, k->killed);
}

/* host.caps(deadline, mem0_kb, limit_kb, kill, count, time_every, slice_ms,
 * client_source) watches the running command's client code (see above):
 * deadline in host.busy() ms, memory growth past mem0_kb by more than
 * limit_kb (0: none) refused, the hook every `count` instructions, time
 * looked at every time_every hook calls, a slice of slice_ms (0: never
 * yield), client_source the chunk name of the script.  kill(why) raises
 * the error a kill gives.  host.caps() stops watching (system code runs);
 * a kill stays recorded (host.killed) until the command ends. */
static int l_host_caps(lua_State *L)
{
    struct co *c = co_of(L);
    if (c == NULL) {
        lua_sethook(L, NULL, 0, 0);
        return 0;
    }
    if (lua_gettop(L) == 0) {
        if (c->caps.on)
            caps_verdict(c);
        c->caps.on = 0;
        lua_sethook(L, NULL, 0, 0);
        lua_alloc_set_limit(c->h->alloc, 0);
        return 0;
    }
    c->caps.deadline = luaL_checknumber(L, 1);
    c->caps.mem0_kb = luaL_checknumber(L, 2);
    c->caps.limit_kb = luaL_optnumber(L, 3, 0);
    luaL_checktype(L, 4, LUA_TFUNCTION);
    int count = (int)luaL_checkinteger(L, 5);
    c->caps.count = count > 0 ? count : 1;
    c->caps.time_every = (int)luaL_checkinteger(L, 6);
    c->caps.slice_ms = luaL_optnumber(L, 7, 0);
    if (c->caps.slice_ms <= 0)
        c->caps.slice_ms = HUGE_VAL;
    luaL_checkstring(L, 8);
    c->caps.ticks = 0;
    lua_pushvalue(L, 4);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &caps_kill_key);
    lua_pushvalue(L, 8);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &caps_client_key);
    c->caps.on = 1;
    if (c->caps.killed)
        caps_mark(c, c->caps.killed);
    else
        lua_sethook(L, caps_hook, LUA_MASKCOUNT, c->caps.count);
    lua_alloc_set_limit(c->h->alloc, caps_limit(c));
    return 0;
}

/* Pattern matching (lua_pattern.h): client code gets the bounded Lua 5.1
 * functions, each call at most SCRIPT_PATTERN_STEPS steps (about 20-60 ms)
 * and within the script's time cap; the system layer the stock ones. */
#define SCRIPT_PATTERN_STEPS (16LL * 1024 * 1024)

static void pattern_check(lua_State *L, void *arg)
{
    struct co *c = arg;
    if (zk_now() - c->waited - c->paused > c->caps.deadline) {
        caps_mark(c, "time");
        caps_raise(L, c->caps.killed);
    }
}

static void pattern_budget(lua_State *L, struct lua_pattern_budget *b)
{
    struct co *c = co_of(L);
    if (!c || !c->caps.on)
        return;
    b->bounded = 1;
    b->steps = SCRIPT_PATTERN_STEPS;
    b->check = pattern_check;
    b->arg = c;
}

static const struct lua_pattern_host pattern_host = {pattern_budget};

/* host.killed(): why the running command's script was killed ("time",
 * "memory", "killed"), or nil.  Sticky until the command ends. */
static int l_host_killed(lua_State *L)
{
    struct co *c = co_of(L);
    if (c && c->caps.on)
        caps_verdict(c);
    if (c && c->caps.killed)
        lua_pushstring(L, c->caps.killed);
    else
        lua_pushnil(L);
    return 1;
}

/* host.kill(why): kills the running command's script now (sticky, as the
 * hook does) and raises; for the kills decided in Lua. */
static int l_host_kill(lua_State *L)
{
    const char *why = luaL_checkstring(L, 1);
    struct co *c = co_of(L);
    if (!c)
        return luaL_error(L, "host.kill outside a command");
    /* A literal: the reason must outlive this call. */
    const char *reason = strcmp(why, "time") == 0     ? "time"
                         : strcmp(why, "memory") == 0 ? "memory"
                                                      : "killed";
    caps_mark(c, reason);
    caps_raise(L, c->caps.killed);
    return 0;
}

/* The connection id of c's requester, or 0 when it has none. */
static unsigned long long requester_id(const struct co *c)
{
    struct lua_host *h = c->h;
    struct lua_client cl = {0};
    if (!c->task || !h->client_ops.describe ||
        h->client_ops.describe(h->client_ops.arg, c->task, &cl) < 0)
        return 0;
    return cl.id;
}

/* host.busy_scripts(): the coroutines of the scripts paused between slices
 * that another client than the running command's sent (none: no values).
 * While there is one, the VM is busy (-BUSY); a client's own pipelined
 * commands are served as usual. */
static int l_host_busy_scripts(lua_State *L)
{
    struct lua_host *h = host_of(L);
    if (!h->busy)
        return 0;
    struct co *self = co_of(L);
    unsigned long long me = self ? requester_id(self) : 0;
    int n = 0;
    for (struct co *c = h->busy; c; c = c->busy_next) {
        if (me && requester_id(c) == me)
            continue;
        luaL_checkstack(L, 1, "too many busy scripts");
        lua_rawgeti(L, LUA_REGISTRYINDEX, c->h->ref_anchors);
        lua_rawgetp(L, -1, c->L);
        lua_remove(L, -2);
        n++;
    }
    return n;
}

/* host.kill_scripts(): SCRIPT KILL.  Kills every script paused between
 * slices; each ends with "killed" when it next runs (on the next loop
 * turn).  Returns how many. */
static int l_host_kill_scripts(lua_State *L)
{
    struct lua_host *h = host_of(L);
    lua_Integer n = 0;
    for (struct co *c = h->busy; c; c = c->busy_next) {
        caps_mark(c, "killed");
        n++;
    }
    lua_pushinteger(L, n);
    return 1;
}

static int l_host_wall(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6);
    return 1;
}

static void on_sleep_closed(uv_handle_t *h)
{
    free(h->data);
}

static void on_sleep(uv_timer_t *t)
{
    struct sleep_rec *s = t->data;
    struct co *c = s->co;
    t->data = s;
    uv_close((uv_handle_t *)t, on_sleep_closed);
    if (c)
        co_resume(c, 0);
}

static int l_host_sleep(lua_State *L)
{
    double ms = luaL_checknumber(L, 1);
    struct co *c = co_check(L, "host.sleep");
    struct sleep_rec *s = calloc(1, sizeof *s);
    if (!s)
        return luaL_error(L, "out of memory");
    s->co = c;
    uv_timer_init(c->h->loop, &s->timer);
    s->timer.data = s;
    uv_timer_start(&s->timer, on_sleep, ms > 0 ? (uint64_t)ms : 0, 0);
    c->wait = WAIT_SLEEP;
    return lua_yield(L, 0);
}

static int l_host_suspend(lua_State *L)
{
    struct co *c = co_check(L, "host.suspend");
    c->wait = WAIT_WAKE;
    return lua_yield(L, 0);
}

static int l_host_wake(lua_State *L)
{
    lua_State *co = lua_tothread(L, 1);
    luaL_argcheck(L, co != NULL, 1, "coroutine expected");
    struct co *c = co_of(co);
    if (!c || c->wait != WAIT_WAKE || c->L != co) {
        lua_pushboolean(L, 0);
        return 1;
    }
    int n = lua_gettop(L) - 1;
    lua_xmove(L, co, n);
    make_ready(host_of(L), c, n);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_host_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    struct lua_host *h = host_of(L);
    int n = lua_gettop(L);
    struct co *c = co_new(h, NULL);
    lua_xmove(L, c->L, n);
    make_ready(h, c, n - 1);
    return 0;
}

/* host.busy(): host.now() less the time the running coroutine has spent
 * yielded (waiting for ZooKeeper, sleeping, paused between slices): a clock
 * of its own work. */
static int l_host_busy(lua_State *L)
{
    struct co *c = co_of(L);
    lua_pushnumber(L, zk_now() - (c ? c->waited + c->paused : 0));
    return 1;
}

static int l_host_deadline(lua_State *L)
{
    struct co *c = co_of(L);
    lua_pushnumber(L, c ? co_deadline(c) : zk_now());
    return 1;
}

/* host.lease_wait(): the running command writes a key of this session's,
 * so its requests may wait for a reconnect as long as the session may
 * still be alive (zk_lease_end), not only --zk-request-timeout: a renewal
 * that fails during a short outage makes clients (Redisson's watchdog) give
 * up a lock they still hold.  Once the session is given up, its requests
 * are answered and later ones keep the request timeout. */
static int l_host_lease_wait(lua_State *L)
{
    struct co *c = co_of(L);
    if (c && zk_lease_end(c->h->zk) > 0)
        c->lease_gen = zk_generation(c->h->zk);
    return 0;
}

/* host.fatal(reason): see lua_host_set_fatal. */
static int l_host_fatal(lua_State *L)
{
    struct lua_host *h = host_of(L);
    const char *reason = luaL_checkstring(L, 1);
    if (h->fatal)
        h->fatal(h->fatal_arg, reason);
    return 0;
}

void lua_host_set_fatal(struct lua_host *h,
                        void (*fatal)(void *arg, const char *reason), void *arg)
{
    h->fatal = fatal;
    h->fatal_arg = arg;
}

static int l_host_log(lua_State *L)
{
    const char *lvl = luaL_checkstring(L, 1);
    size_t n;
    const char *msg = luaL_checklstring(L, 2, &n);
    int level = log_level_parse(lvl);
    if (level < 0)
        level = LOG_INFO;
    if (!log_enabled((enum log_level)level))
        return 0;
    char q[1024];
    log_event((enum log_level)level, "lua", "msg=%s",
              log_quote(msg, n, q, sizeof q));
    return 0;
}

static int l_host_key_encode(lua_State *L)
{
    size_t n;
    const char *k = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, KEYENC_MAX(n) + 1);
    size_t len = keyenc_encode(k, n, out);
    luaL_pushresultsize(&b, len);
    return 1;
}

static int l_host_key_decode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, n + 1);
    long len = keyenc_decode(s, n, out);
    if (len < 0) {
        luaL_pushresultsize(&b, 0);
        lua_pushnil(L);
        return 1;
    }
    luaL_pushresultsize(&b, (size_t)len);
    return 1;
}

/* host.timer(fn) */
static void on_host_timer(uv_timer_t *t)
{
    struct host_timer *ht = t->data;
    struct lua_host *h = ht->h;
    struct co *c = co_new(h, NULL);
    lua_rawgeti(c->L, LUA_REGISTRYINDEX, ht->fn_ref);
    make_ready(h, c, 0);
}

static struct host_timer *timer_check(lua_State *L)
{
    struct host_timer **p = luaL_checkudata(L, 1, "zkresp.timer");
    if (!*p || (*p)->closed)
        luaL_error(L, "timer is closed");
    return *p;
}

static int l_timer_start(lua_State *L)
{
    struct host_timer *ht = timer_check(L);
    double ms = luaL_checknumber(L, 2);
    uv_timer_start(&ht->timer, on_host_timer, ms > 0 ? (uint64_t)ceil(ms) : 0,
                   0);
    return 0;
}

static int l_timer_stop(lua_State *L)
{
    struct host_timer *ht = timer_check(L);
    uv_timer_stop(&ht->timer);
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static int l_timer_gc(lua_State *L)
{
    struct host_timer **p = luaL_checkudata(L, 1, "zkresp.timer");
    struct host_timer *ht = *p;
    if (ht && !ht->closed) {
        ht->closed = 1;
        luaL_unref(L, LUA_REGISTRYINDEX, ht->fn_ref);
        uv_close((uv_handle_t *)&ht->timer, on_timer_closed);
    }
    *p = NULL;
    return 0;
}

static int l_host_timer(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    struct lua_host *h = host_of(L);
    struct host_timer **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = NULL;
    luaL_setmetatable(L, "zkresp.timer");
    struct host_timer *ht = calloc(1, sizeof *ht);
    if (!ht)
        return luaL_error(L, "out of memory");
    ht->h = h;
    lua_pushvalue(L, 1);
    ht->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    uv_timer_init(h->loop, &ht->timer);
    ht->timer.data = ht;
    *p = ht;
    return 1;
}

/* --- clients ------------------------------------------------------------- */

static int l_host_client(lua_State *L)
{
    struct lua_host *h = host_of(L);
    struct co *c = co_of(L);
    struct lua_client cl = {0};
    if (!c || !c->task || !h->client_ops.describe ||
        h->client_ops.describe(h->client_ops.arg, c->task, &cl) < 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, (lua_Integer)cl.id);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, cl.resp);
    lua_setfield(L, -2, "resp");
#define S(field)                                                               \
    if (cl.field) {                                                            \
        lua_pushstring(L, cl.field);                                           \
        lua_setfield(L, -2, #field);                                           \
    }
    S(addr);
    S(laddr);
    S(name);
    S(user);
    S(lib_name);
#undef S
    return 1;
}

static int l_host_push(lua_State *L)
{
    struct lua_host *h = host_of(L);
    lua_Integer id = luaL_checkinteger(L, 1);
    luaL_checkany(L, 2);
    int proto = 2;
    struct buf *out = NULL;
    struct co *c = co_of(L);
    if (h->client_ops.push_begin)
        out =
            h->client_ops.push_begin(h->client_ops.arg, (unsigned long long)id,
                                     c ? c->task : NULL, &proto);
    if (!out) {
        lua_pushboolean(L, 0);
        return 1;
    }
    h->client_ops.encode(L, 2, out, proto);
    h->client_ops.push_end(h->client_ops.arg, (unsigned long long)id);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_host_subscriptions(lua_State *L)
{
    struct lua_host *h = host_of(L);
    lua_Integer id = luaL_checkinteger(L, 1);
    int ch = (int)luaL_checkinteger(L, 2);
    int pat = (int)luaL_checkinteger(L, 3);
    int sh = (int)luaL_checkinteger(L, 4);
    if (h->client_ops.subscriptions)
        h->client_ops.subscriptions(h->client_ops.arg, (unsigned long long)id,
                                    ch, pat, sh);
    return 0;
}

void lua_host_set_client_ops(struct lua_host *h,
                             const struct lua_client_ops *ops)
{
    h->client_ops = *ops;
}

/* --- setup --------------------------------------------------------------- */

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

static void open_bindings(struct lua_host *h)
{
    lua_State *L = h->L;
    static const luaL_Reg zk_fns[] = {{"get", l_zk_get},
                                      {"exists", l_zk_exists},
                                      {"children", l_zk_children},
                                      {"create", l_zk_create},
                                      {"set", l_zk_set},
                                      {"delete", l_zk_delete},
                                      {"sync", l_zk_sync},
                                      {"multi", l_zk_multi},
                                      {"session", l_zk_session},
                                      {"request_size", l_zk_request_size},
                                      {"max_request", l_zk_max_request},
                                      {"get_acl", l_zk_get_acl},
                                      {NULL, NULL}};
    static const luaL_Reg host_fns[] = {{"now", l_host_now},
                                        {"wall", l_host_wall},
                                        {"sleep", l_host_sleep},
                                        {"suspend", l_host_suspend},
                                        {"wake", l_host_wake},
                                        {"spawn", l_host_spawn},
                                        {"timer", l_host_timer},
                                        {"deadline", l_host_deadline},
                                        {"busy", l_host_busy},
                                        {"lease_wait", l_host_lease_wait},
                                        {"log", l_host_log},
                                        {"fatal", l_host_fatal},
                                        {"key_encode", l_host_key_encode},
                                        {"key_decode", l_host_key_decode},
                                        {"client", l_host_client},
                                        {"push", l_host_push},
                                        {"subscriptions", l_host_subscriptions},
                                        {"caps", l_host_caps},
                                        {"killed", l_host_killed},
                                        {"kill", l_host_kill},
                                        {"busy_scripts", l_host_busy_scripts},
                                        {"kill_scripts", l_host_kill_scripts},
                                        {NULL, NULL}};

    luaL_newmetatable(L, "zkresp.timer");
    lua_pushcfunction(L, l_timer_gc);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    lua_pushcfunction(L, l_timer_start);
    lua_setfield(L, -2, "start");
    lua_pushcfunction(L, l_timer_stop);
    lua_setfield(L, -2, "stop");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    lua_newtable(L);
    *(struct lua_host **)lua_newuserdatauv(L, sizeof h, 0) = h;
    luaL_setfuncs(L, zk_fns, 1);
    struct {
        const char *name;
        int v;
    } consts[] = {
        {"OK", ZOK},
        {"NONODE", ZNONODE},
        {"NODEEXISTS", ZNODEEXISTS},
        {"BADVERSION", ZBADVERSION},
        {"NOTEMPTY", ZNOTEMPTY},
        {"NOCHILDRENFOREPHEMERALS", ZNOCHILDRENFOREPHEMERALS},
        {"NOAUTH", ZNOAUTH},
        {"INVALIDACL", ZINVALIDACL},
        {"AUTHFAILED", ZAUTHFAILED},
        {"PERM_WRITE", ZOO_PERM_WRITE},
        {"PERM_CREATE", ZOO_PERM_CREATE},
        {"PERM_DELETE", ZOO_PERM_DELETE},
        {"PERM_ADMIN", ZOO_PERM_ADMIN},
        {"CONNECTIONLOSS", ZCONNECTIONLOSS},
        {"OPERATIONTIMEOUT", ZOPERATIONTIMEOUT},
        {"SESSIONEXPIRED", ZSESSIONEXPIRED},
        {"SESSIONMOVED", ZSESSIONMOVED},
        {"RUNTIMEINCONSISTENCY", ZRUNTIMEINCONSISTENCY},
        {"BADARGUMENTS", ZBADARGUMENTS},
        {"TIMEOUT", ZK_TIMEOUT},
        {"CLOSING", ZK_CLOSING},
        {"TOOBIG", ZK_TOOBIG},
        {"EPHEMERAL", ZOO_EPHEMERAL},
        {"SEQUENCE", ZOO_SEQUENCE},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        set_int(L, consts[i].name, consts[i].v);
    lua_setglobal(L, "zk");

    lua_newtable(L);
    *(struct lua_host **)lua_newuserdatauv(L, sizeof h, 0) = h;
    luaL_setfuncs(L, host_fns, 1);
    lua_pushlightuserdata(L, (void *)&NULL_KEY);
    lua_setfield(L, -2, "null");
    lua_pushlstring(L, h->instance, sizeof h->instance);
    lua_setfield(L, -2, "instance");
    lua_pattern_push(L, &pattern_host);
    lua_setfield(L, -2, "patterns");
    lua_newtable(L);
    const struct config *cfg = h->cfg;
    set_str(L, "root", cfg->root);
    set_int(L, "max_key_len", cfg->max_key_len);
    set_int(L, "max_value_len", cfg->max_value_len);
    set_int(L, "zk_max_request", cfg->zk_max_request);
    set_int(L, "request_timeout", cfg->zk_request_timeout);
    set_int(L, "session_timeout", cfg->session_timeout);
    set_str(L, "policy", cfg->policy);
    set_str(L, "zk_acl", cfg->zk_acl ? cfg->zk_acl : "open");
    set_str(L, "scripts", cfg->scripts);
    set_int(L, "script_time_limit", cfg->script_time_limit);
    set_int(L, "script_memory_limit", cfg->script_memory_limit);
    set_int(L, "max_subscriptions_per_command",
            cfg->max_subscriptions_per_command);
    set_int(L, "max_subscriptions_per_client",
            cfg->max_subscriptions_per_client);
    set_int(L, "pubsub_gc_delay", cfg->pubsub_gc_delay);
    lua_setfield(L, -2, "config");
    lua_setglobal(L, "host");
}

static int msgh(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

/* An error outside any protected call: every command runs under pcall and
 * the setup under lua_pcall, so this is a bug in the host. */
static int panic(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    log_error("lua.panic", "message=%s", msg ? msg : "(not a string)");
    abort();
}

struct lua_host *lua_host_create(const struct config *cfg, struct zk *zk,
                                 char *err, size_t errlen)
{
    struct lua_host *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->cfg = cfg;
    h->zk = zk;
    h->loop = uv_default_loop();
    if (getrandom(h->instance, sizeof h->instance, 0) !=
        (ssize_t)sizeof h->instance) {
        for (size_t i = 0; i < sizeof h->instance; i++)
            h->instance[i] = (char)(uv_hrtime() >> (i % 8));
    }
    h->alloc = lua_alloc_create();
    h->L = h->alloc ? lua_newstate(lua_alloc_fn, h->alloc) : NULL;
    if (!h->L) {
        snprintf(err, errlen, "cannot create the Lua VM");
        lua_alloc_free(h->alloc);
        free(h);
        return NULL;
    }
    lua_atpanic(h->L, panic);
    *(struct co **)lua_getextraspace(h->L) = NULL;
    luaL_openlibs(h->L);
    /* Every command leaves short-lived garbage (a coroutine, its argument
     * table, records): the generational collector handles that far more
     * cheaply than the incremental one. */
    lua_gc(h->L, LUA_GCGEN, 0, 0);
    lua_newtable(h->L);
    h->ref_anchors = luaL_ref(h->L, LUA_REGISTRYINDEX);
    open_bindings(h);
    uv_idle_init(h->loop, &h->idle);
    h->idle.data = h;

    lua_State *L = h->L;
    lua_pushcfunction(L, msgh);
    char path[4096];
    /* package.path: the scripts directory first. */
    lua_getglobal(L, "package");
    snprintf(path, sizeof path, "%s/?.lua", cfg->scripts);
    lua_pushstring(L, path);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    snprintf(path, sizeof path, "%s/zkresp.lua", cfg->scripts);
    if (luaL_loadfile(L, path) != LUA_OK || lua_pcall(L, 0, 1, -2) != LUA_OK) {
        /* One line for the operator; the traceback goes to the debug log. */
        const char *msg = lua_tostring(L, -1);
        if (!msg)
            msg = "unknown error";
        char q[2048];
        log_debug("lua.load_failed", "traceback=%s",
                  log_quote(msg, strlen(msg), q, sizeof q));
        snprintf(err, errlen, "cannot load %s: %.*s", path,
                 (int)strcspn(msg, "\n"), msg);
        lua_host_free(h);
        return NULL;
    }
    if (!lua_istable(L, -1)) {
        snprintf(err, errlen, "%s must return a table", path);
        lua_host_free(h);
        return NULL;
    }
    lua_getfield(L, -1, "dispatch");
    int ok = lua_isfunction(L, -1);
    lua_pop(L, 1);
    if (!ok) {
        snprintf(err, errlen, "%s: the returned table has no dispatch function",
                 path);
        lua_host_free(h);
        return NULL;
    }
    h->ref_module = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1); /* msgh */
    return h;
}

void lua_host_stop(struct lua_host *h)
{
    h->stopped = 1;
    if (h->idle_on) {
        uv_idle_stop(&h->idle);
        h->idle_on = 0;
    }
    h->ready_head = h->ready_tail = NULL;
}

void lua_host_free(struct lua_host *h)
{
    if (!h)
        return;
    if (h->L)
        lua_close(h->L);
    h->L = NULL;
    lua_alloc_free(h->alloc);
    h->alloc = NULL;
    uv_close((uv_handle_t *)&h->idle, NULL);
    /* The idle handle lives inside h: the loop must not run again after
     * this without it being closed; main runs the loop once more to let
     * the close complete before exit.  h is freed by the process exit. */
}

void lua_host_run(struct lua_host *h, struct lua_task *t, int argc,
                  const char *const *argv, const size_t *argvlen)
{
    struct co *c = co_new(h, t);
    lua_State *L = c->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_module);
    lua_getfield(L, -1, "dispatch");
    lua_remove(L, -2);
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushlstring(L, argv[i], argvlen[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushboolean(L, (t->flags & LUA_TASK_SUBSCRIBED) != 0);
    co_resume(c, 2);
}

void lua_host_abandon(struct lua_host *h, struct lua_task *t)
{
    struct co *c = t->priv;
    if (!c)
        return;
    c->task = NULL;
    t->priv = NULL;
    h->running--;
}

/* A background coroutine with M[fn] on its stack, or NULL when M has no fn. */
static struct co *hook_co(struct lua_host *h, const char *fn)
{
    struct co *c = co_new(h, NULL);
    lua_State *L = c->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_module);
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    if (!lua_isfunction(L, -1)) {
        lua_pop(L, 1);
        co_finish(c);
        return NULL;
    }
    return c;
}

/* Runs M[fn](event, arg) in a background coroutine, if M has fn, at once:
 * ZooKeeper orders its events before the completions that follow them, and
 * the hooks must see them in that order too. */
static void call_hook(struct lua_host *h, const char *fn, const char *event,
                      const char *sarg, long long iarg)
{
    struct co *c = hook_co(h, fn);
    if (!c)
        return;
    lua_State *L = c->L;
    lua_pushstring(L, event);
    if (sarg)
        lua_pushstring(L, sarg);
    else
        lua_pushinteger(L, (lua_Integer)iarg);
    co_resume(c, 2);
}

void lua_host_client_gone(struct lua_host *h, unsigned long long id,
                          int deferred)
{
    if (h->stopped)
        return;
    struct co *c = hook_co(h, "on_client_gone");
    if (!c)
        return;
    lua_pushinteger(c->L, (lua_Integer)id);
    if (deferred)
        make_ready(h, c, 1);
    else
        co_resume(c, 1);
}

void lua_host_session_event(struct lua_host *h, const char *event,
                            long long session_id)
{
    call_hook(h, "on_session", event, NULL, session_id);
}

void lua_host_reload(struct lua_host *h)
{
    struct co *c = hook_co(h, "on_reload");
    if (c)
        co_resume(c, 0);
}

void lua_host_watch_event(struct lua_host *h, const char *event,
                          const char *path)
{
    call_hook(h, "on_watch", event, path, 0);
}

/* The main-state calls below (COMMAND, metrics, AUTH, INFO) run outside any
 * coroutine, so they never yield; each restores the stack it found. */

/* Pushes M[name] onto the main state; returns its Lua type. */
static int push_module_field(struct lua_host *h, const char *name)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_module);
    int type = lua_getfield(L, -1, name);
    lua_remove(L, -2);
    return type;
}

/* Logs the error object a failed lua_pcall left on top of L as event ev. */
static void log_lua_error(lua_State *L, enum log_level level, const char *ev)
{
    size_t elen = 0;
    const char *e = lua_isstring(L, -1) ? lua_tolstring(L, -1, &elen) : "";
    char q[512];
    log_event(level, ev, "err=%s", log_quote(e, elen, q, sizeof q));
}

size_t lua_host_commands(struct lua_host *h, lua_host_cmd_cb cb, void *arg)
{
    lua_State *L = h->L;
    int top = lua_gettop(L);
    size_t n = 0;
    if (push_module_field(h, "commands") != LUA_TTABLE) {
        lua_settop(L, top);
        return 0;
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1)) {
            n++;
            if (cb) {
                int e = lua_gettop(L);
                lua_getfield(L, e, "arity");
                lua_getfield(L, e, "first_key");
                lua_getfield(L, e, "last_key");
                lua_getfield(L, e, "step");
                lua_getfield(L, e, "flags");
                const char *flags =
                    lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
                cb(arg, lua_tostring(L, e - 1), (int)lua_tointeger(L, e + 1),
                   (int)lua_tointeger(L, e + 2), (int)lua_tointeger(L, e + 3),
                   (int)lua_tointeger(L, e + 4), flags);
                lua_settop(L, e);
            }
        }
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    return n;
}

size_t lua_host_running(const struct lua_host *h)
{
    return h->running;
}

size_t lua_host_commands_alive(const struct lua_host *h)
{
    return h->commands;
}

unsigned long long lua_host_activity(const struct lua_host *h)
{
    return h->activity;
}

void lua_host_memory(const struct lua_host *h, struct lua_host_memory *m)
{
    m->used = lua_alloc_used(h->alloc);
    m->pooled = lua_alloc_pooled(h->alloc);
    m->spare_threads = (size_t)h->nspare;
    m->collections = h->collections;
}

/* Called from the loop (a timer), never from inside Lua code: no coroutine
 * is running, the suspended ones are just objects to the collector. */
size_t lua_host_collect(struct lua_host *h)
{
    if (h->stopped)
        return 0;
    for (int i = 0; i < h->nspare; i++)
        unanchor(h, h->spare[i]);
    h->nspare = 0;
    lua_State *L = h->L;
    int top = lua_gettop(L);
    /* The anchors, copied into a table of their size now: a burst of
     * thousands of concurrent commands grew it. */
    lua_createtable(L, 0, (int)h->coroutines);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_anchors);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -5);
    }
    lua_pop(L, 1);
    lua_rawseti(L, LUA_REGISTRYINDEX, h->ref_anchors);
    if (push_module_field(h, "on_idle") == LUA_TFUNCTION &&
        lua_pcall(L, 0, 0, 0) != LUA_OK)
        log_lua_error(L, LOG_WARN, "lua.on_idle_failed");
    lua_settop(L, top);
    /* Full collections in incremental mode, as long as they free much: the
     * interned-string table, sized for the burst's peak, halves once per
     * cycle (a generational full collection does not shrink it). */
    lua_gc(L, LUA_GCINC, 0, 0, 0);
    for (int i = 0; i < 8; i++) {
        size_t before = lua_alloc_used(h->alloc);
        lua_gc(L, LUA_GCCOLLECT);
        if (lua_alloc_used(h->alloc) + 16 * 1024 > before)
            break;
    }
    lua_gc(L, LUA_GCGEN, 0, 0);
    h->collections++;
    return lua_alloc_trim(h->alloc);
}

/* Metrics only: a plain call on the main state, no coroutine, no task, so it
 * never yields and never touches the command counters. */
size_t lua_host_stats(struct lua_host *h, lua_host_stat_cb cb, void *arg)
{
    lua_State *L = h->L;
    if (h->stopped)
        return 0;
    int top = lua_gettop(L);
    size_t n = 0;
    if (push_module_field(h, "stats") != LUA_TFUNCTION) {
        lua_settop(L, top);
        return 0;
    }
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        log_lua_error(L, LOG_DEBUG, "lua.stats_failed");
        lua_settop(L, top);
        return 0;
    }
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) == LUA_TSTRING && lua_isnumber(L, -1) &&
                lua_type(L, -1) == LUA_TNUMBER) {
                cb(arg, lua_tostring(L, -2), lua_tonumber(L, -1));
                n++;
            }
            lua_pop(L, 1);
        }
    }
    lua_settop(L, top);
    return n;
}

/* --- policy: named users and INFO ---------------------------------------- */

int lua_host_authenticate(struct lua_host *h, const char *user, size_t ulen,
                          const char *pass, size_t plen, const char *addr)
{
    lua_State *L = h->L;
    if (h->stopped)
        return -1;
    int top = lua_gettop(L);
    if (push_module_field(h, "authenticate") != LUA_TFUNCTION) {
        lua_settop(L, top);
        return -1;
    }
    lua_pushlstring(L, user, ulen);
    lua_pushlstring(L, pass, plen);
    lua_pushstring(L, addr);
    int rc = -1;
    if (lua_pcall(L, 3, 1, 0) == LUA_OK) {
        if (lua_type(L, -1) == LUA_TBOOLEAN)
            rc = lua_toboolean(L, -1);
    } else {
        log_lua_error(L, LOG_WARN, "policy.authenticate_failed");
    }
    lua_settop(L, top);
    return rc;
}

size_t lua_host_policy_info(struct lua_host *h, lua_host_info_cb cb, void *arg)
{
    lua_State *L = h->L;
    if (h->stopped)
        return 0;
    int top = lua_gettop(L);
    size_t n = 0;
    if (push_module_field(h, "policy_info") != LUA_TFUNCTION ||
        lua_pcall(L, 0, 1, 0) != LUA_OK || !lua_istable(L, -1)) {
        lua_settop(L, top);
        return 0;
    }
    int t = lua_gettop(L);
    for (lua_Integer i = 1; lua_rawgeti(L, t, i) == LUA_TTABLE; i++) {
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        int name = lua_gettop(L) - 1, val = name + 1;
        if (lua_type(L, name) == LUA_TSTRING) {
            const char *v = "";
            if (lua_isinteger(L, val))
                v = lua_pushfstring(L, "%I", lua_tointeger(L, val));
            else if (lua_type(L, val) == LUA_TSTRING ||
                     lua_type(L, val) == LUA_TNUMBER)
                v = lua_tostring(L, val);
            cb(arg, lua_tostring(L, name), v);
            n++;
        }
        lua_settop(L, t);
    }
    lua_settop(L, top);
    return n;
}
