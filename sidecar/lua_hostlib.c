/*
 * lua_hostlib.c — the host.* bindings: clocks, sleeping and waking,
 * background coroutines, timers, logging, key encoding, and the
 * requester's connections (host.client, host.push, host.subscriptions).
 * The caps of client code (host.caps...) are lua_caps.c's.
 *
 * The functions and fields are lua_host.h's contract.
 */
#include "lua_host_int.h"

#include "config.h"
#include "keyenc.h"
#include "log.h"
#include "lua_pattern.h"
#include "zk.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char NULL_KEY = 0; /* address used as host.null */

int lua_host_is_null(lua_State *L, int idx)
{
    return lua_islightuserdata(L, idx) &&
           lua_touserdata(L, idx) == (void *)&NULL_KEY;
}

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

static int l_host_now(lua_State *L)
{
    lua_pushnumber(L, zk_now());
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
        lua_co_resume(c, 0);
}

/* A timeout in ms as libuv takes it: NaN and negatives are 0, and
 * anything past 2^62 ms (a policy's or a script's huge number, inf) is
 * 2^62, where converting it would be undefined. */
static uint64_t timeout_ms(double ms)
{
    if (!(ms > 0))
        return 0;
    return ms < 0x1p62 ? (uint64_t)ceil(ms) : (uint64_t)1 << 62;
}

static int l_host_sleep(lua_State *L)
{
    double ms = luaL_checknumber(L, 1);
    struct co *c = lua_co_check(L, "host.sleep");
    struct sleep_rec *s = calloc(1, sizeof *s);
    if (!s)
        return luaL_error(L, "out of memory");
    s->co = c;
    uv_timer_init(c->h->loop, &s->timer);
    s->timer.data = s;
    uv_timer_start(&s->timer, on_sleep, timeout_ms(ms), 0);
    c->wait = WAIT_SLEEP;
    return lua_yield(L, 0);
}

static int l_host_suspend(lua_State *L)
{
    struct co *c = lua_co_check(L, "host.suspend");
    c->wait = WAIT_WAKE;
    c->queued = lua_type(L, 1) == LUA_TSTRING ? 2 : lua_toboolean(L, 1);
    return lua_yield(L, 0);
}

static int l_host_block(lua_State *L)
{
    struct co *c = co_of(L);
    if (c && c->task && lua_isboolean(L, 1) && !lua_toboolean(L, 1))
        c->task->blocked = 0; /* host.block(false): its wait is over */
    else if (c && c->task && !c->task->unblock)
        c->task->blocked = 1;
    return 0;
}

static int l_host_unblocked(lua_State *L)
{
    struct co *c = co_of(L);
    int how = c && c->task ? c->task->unblock : 0;
    if (how == LUA_UNBLOCK_TIMEOUT)
        lua_pushliteral(L, "timeout");
    else if (how == LUA_UNBLOCK_ERROR)
        lua_pushliteral(L, "error");
    else
        lua_pushnil(L);
    return 1;
}

static int l_host_pass(lua_State *L)
{
    struct co *c = lua_co_check(L, "host.pass");
    c->wait = WAIT_PASS;
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
    if (!lua_checkstack(co, n)) /* lua_xmove does not grow co's stack */
        return luaL_error(L, "host.wake: too many values");
    lua_xmove(L, co, n);
    lua_co_ready(host_of(L), c, n);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_host_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    struct lua_host *h = host_of(L);
    int n = lua_gettop(L);
    struct co *c = lua_co_new(h, NULL);
    if (!lua_checkstack(c->L, n)) /* lua_xmove does not grow it */
        return luaL_error(L, "host.spawn: too many values");
    lua_xmove(L, c->L, n);
    lua_co_ready(h, c, n - 1);
    return 0;
}

/* host.busy(): host.now() less the time the running coroutine has spent
 * yielded (waiting for ZooKeeper, sleeping, paused between slices) or the
 * process did not run while it ran (lua_co_busy): a clock of its own work. */
static int l_host_busy(lua_State *L)
{
    struct co *c = co_of(L);
    lua_pushnumber(L, c ? lua_co_busy(c, zk_now()) : zk_now());
    return 1;
}

static int l_host_deadline(lua_State *L)
{
    struct co *c = co_of(L);
    lua_pushnumber(L, c ? lua_co_deadline(c) : zk_now());
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

/* host.outlives_session(): see lua_host.h. */
static int l_host_outlives_session(lua_State *L)
{
    struct co *c = co_of(L);
    if (c)
        c->outlives_session = 1;
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

/* host.hash(s): the 32-bit FNV-1a of s, the same on every sidecar (which
 * of a session's marks a key's node bumps: guard.lua). */
static int l_host_hash(lua_State *L)
{
    size_t n;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 16777619u;
    }
    lua_pushinteger(L, (lua_Integer)h);
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
    struct co *c = lua_co_new(h, NULL);
    lua_rawgeti(c->L, LUA_REGISTRYINDEX, ht->fn_ref);
    lua_co_ready(h, c, 0);
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
    uv_timer_start(&ht->timer, on_host_timer, timeout_ms(ms), 0);
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

/* The running command's client id alone (nil outside a command, or once
 * its client has gone): asked for every command (queue.lua's Q.turn), so
 * no table is made. */
static int l_host_client_id(lua_State *L)
{
    struct lua_host *h = host_of(L);
    struct co *c = co_of(L);
    struct lua_client cl = {0};
    if (!c || !c->task || !h->client_ops.describe ||
        h->client_ops.describe(h->client_ops.arg, c->task, &cl) < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)cl.id);
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

/* --- the host table ----------------------------------------------------- */

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

void lua_hostlib_open(struct lua_host *h)
{
    lua_State *L = h->L;
    static const luaL_Reg host_fns[] = {
        {"now", l_host_now},
        {"wall", l_host_wall},
        {"sleep", l_host_sleep},
        {"suspend", l_host_suspend},
        {"block", l_host_block},
        {"unblocked", l_host_unblocked},
        {"pass", l_host_pass},
        {"wake", l_host_wake},
        {"spawn", l_host_spawn},
        {"timer", l_host_timer},
        {"deadline", l_host_deadline},
        {"busy", l_host_busy},
        {"lease_wait", l_host_lease_wait},
        {"outlives_session", l_host_outlives_session},
        {"log", l_host_log},
        {"fatal", l_host_fatal},
        {"key_encode", l_host_key_encode},
        {"key_decode", l_host_key_decode},
        {"hash", l_host_hash},
        {"client", l_host_client},
        {"client_id", l_host_client_id},
        {"push", l_host_push},
        {"subscriptions", l_host_subscriptions},
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
    luaL_setfuncs(L, host_fns, 1);
    *(struct lua_host **)lua_newuserdatauv(L, sizeof h, 0) = h;
    luaL_setfuncs(L, lua_caps_fns, 1);
    lua_pushlightuserdata(L, (void *)&NULL_KEY);
    lua_setfield(L, -2, "null");
    lua_pushlstring(L, h->instance, sizeof h->instance);
    lua_setfield(L, -2, "instance");
    lua_pushstring(L, REDIS_COMPAT_VERSION);
    lua_setfield(L, -2, "redis_version");
    lua_pattern_push(L, &lua_caps_pattern_host);
    lua_setfield(L, -2, "patterns");
    lua_newtable(L);
    const struct config *cfg = h->cfg;
    set_str(L, "root", cfg->root);
    set_int(L, "databases", cfg->databases);
    set_str(L, "bind", cfg->bind);
    set_int(L, "port", cfg->port);
    set_int(L, "maxclients", cfg->maxclients);
    set_int(L, "timeout", cfg->timeout);
    set_int(L, "max_bulk_len", cfg->max_bulk_len);
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
    set_int(L, "script_cache_max", cfg->script_cache_max);
    set_int(L, "max_subscriptions_per_command",
            cfg->max_subscriptions_per_command);
    set_int(L, "max_subscriptions_per_client",
            cfg->max_subscriptions_per_client);
    set_int(L, "pubsub_gc_delay", cfg->pubsub_gc_delay);
    lua_setfield(L, -2, "config");
    lua_setglobal(L, "host");
}
