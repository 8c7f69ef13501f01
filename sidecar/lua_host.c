/*
 * lua_host.c — the Lua 5.4 VM: its creation, the module's entry points, and
 * the calls made on the main state (COMMAND, /metrics, AUTH, INFO, memory).
 *
 *   lua_host_run ──► new coroutine: M.dispatch(args)          (lua_co.c)
 *                      │ zk.get(...)  ──► zk_submit ... yield  (lua_zk.c)
 *                      │                      (loop runs other work)
 *                      │ ◄── on_zk_done: push results, lua_resume
 *                      ▼
 *                    returns a reply value ──► client_ops.encode ──► task->done
 *
 * The bindings are set up here (lua_zk_open, lua_hostlib_open) before
 * scripts/zkresp.lua runs.  The VM belongs to the loop thread.
 */
#include "lua_host_int.h"

#include "config.h"
#include "log.h"
#include "lua_alloc.h"

#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <uv.h>

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
    lua_zk_open(h);
    lua_hostlib_open(h);
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
    struct co *c = lua_co_new(h, t);
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
    lua_pushinteger(L, t->db);
    if (t->flags & LUA_TASK_MULTI_BEGIN)
        lua_pushliteral(L, "begin");
    else if (t->flags & LUA_TASK_MULTI)
        lua_pushliteral(L, "queued");
    else
        lua_pushnil(L);
    lua_co_resume(c, 4);
}

void lua_host_abandon(struct lua_host *h, struct lua_task *t)
{
    struct co *c = t->priv;
    if (!c)
        return;
    c->task = NULL;
    t->priv = NULL;
    h->running--;
    if (c->wait == WAIT_WAKE && c->queued)
        lua_co_ready(h, c, 0); /* host.suspend(true) returns nothing */
}

int lua_host_unblock(struct lua_host *h, struct lua_task *t, int how)
{
    struct co *c = t->priv;
    if (h->stopped || !c || !t->blocked)
        return 0;
    t->blocked = 0;
    t->unblock = how;
    if (c->wait == WAIT_WAKE && c->queued == 2)
        lua_co_ready(h, c, 0); /* host.suspend("blocked") returns nothing */
    return 1;
}

/* A background coroutine with M[fn] on its stack, or NULL when M has no fn. */
static struct co *hook_co(struct lua_host *h, const char *fn)
{
    struct co *c = lua_co_new(h, NULL);
    lua_State *L = c->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_module);
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    if (!lua_isfunction(L, -1)) {
        lua_pop(L, 1);
        lua_co_finish(c);
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
    lua_co_resume(c, 2);
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
        lua_co_ready(h, c, 1);
    else
        lua_co_resume(c, 1);
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
        lua_co_resume(c, 0);
}

void lua_host_shutdown(struct lua_host *h)
{
    struct co *c = hook_co(h, "on_shutdown");
    if (c)
        lua_co_resume(c, 0);
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

static int int_field(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    int v = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

/* A string field left on the stack (so that it lives as long as it), or
 * dflt. */
static const char *str_field(lua_State *L, int t, const char *k,
                             const char *dflt)
{
    lua_getfield(L, t, k);
    return lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : dflt;
}

/* The registry entry at index e, its name just below it.  The strings
 * stay on the stack until the caller's settop. */
static void read_cmd(lua_State *L, int e, const char *name,
                     struct lua_host_cmd *out)
{
    struct lua_host_cmd c = {0};
    c.name = name;
    c.arity = int_field(L, e, "arity");
    c.max_args = int_field(L, e, "max_args");
    c.first = int_field(L, e, "first_key");
    c.last = int_field(L, e, "last_key");
    c.step = int_field(L, e, "step");
    c.flags = str_field(L, e, "flags", "");
    c.group = str_field(L, e, "group", "server");
    lua_getfield(L, e, "in_c");
    c.in_c = lua_toboolean(L, -1);
    lua_getfield(L, e, "subscribed_ok");
    c.subscribed_ok = lua_toboolean(L, -1);
    lua_pop(L, 2);
    if (lua_getfield(L, e, "subcommands") == LUA_TTABLE) {
        int t = lua_gettop(L);
        lua_pushnil(L);
        while (lua_next(L, t) && c.nsubs < LUA_HOST_MAX_SUBS) {
            if (lua_type(L, -2) == LUA_TSTRING && lua_isinteger(L, -1)) {
                c.subs[c.nsubs].name = lua_tostring(L, -2);
                c.subs[c.nsubs].arity = (int)lua_tointeger(L, -1);
                c.nsubs++;
            }
            lua_pop(L, 1);
        }
        /* lua_next left the key when the array filled up */
        lua_settop(L, t);
    }
    *out = c;
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
                struct lua_host_cmd c;
                read_cmd(L, e, lua_tostring(L, e - 1), &c);
                cb(arg, &c);
                lua_settop(L, e);
            }
        }
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    return n;
}

int lua_host_command(struct lua_host *h, const char *name, lua_host_cmd_cb cb,
                     void *arg)
{
    lua_State *L = h->L;
    int top = lua_gettop(L);
    int found = 0;
    if (push_module_field(h, "commands") == LUA_TTABLE &&
        lua_getfield(L, -1, name) == LUA_TTABLE) {
        struct lua_host_cmd c;
        read_cmd(L, lua_gettop(L), name, &c);
        found = 1;
        cb(arg, &c);
    }
    lua_settop(L, top);
    return found;
}

void lua_host_instance_hex(const struct lua_host *h, char *out)
{
    for (size_t i = 0; i < sizeof h->instance; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)h->instance[i]);
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
        lua_co_unanchor(h, h->spare[i]);
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

/* Calls M[name]() on the main state (not once the host stopped) and leaves
 * its result on the stack when that is a table: 1.  Otherwise 0, the stack
 * as it was; a call that failed is logged as event ev. */
static int call_for_table(struct lua_host *h, const char *name, const char *ev)
{
    lua_State *L = h->L;
    int top = lua_gettop(L);
    if (h->stopped || push_module_field(h, name) != LUA_TFUNCTION) {
        lua_settop(L, top);
        return 0;
    }
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        log_lua_error(L, LOG_DEBUG, ev);
        lua_settop(L, top);
        return 0;
    }
    if (!lua_istable(L, -1)) {
        lua_settop(L, top);
        return 0;
    }
    return 1;
}

/* Metrics only: a plain call on the main state, no coroutine, no task, so it
 * never yields and never touches the command counters. */
size_t lua_host_stats(struct lua_host *h, lua_host_stat_cb cb, void *arg)
{
    lua_State *L = h->L;
    int top = lua_gettop(L);
    size_t n = 0;
    if (!call_for_table(h, "stats", "lua.stats_failed"))
        return 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_isnumber(L, -1) &&
            lua_type(L, -1) == LUA_TNUMBER) {
            cb(arg, lua_tostring(L, -2), lua_tonumber(L, -1));
            n++;
        }
        lua_pop(L, 1);
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
    int top = lua_gettop(L);
    size_t n = 0;
    if (!call_for_table(h, "policy_info", "lua.policy_info_failed"))
        return 0;
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
