/*
 * lua_caps.c — the caps of an EVAL script's client code (host.caps).
 *
 * What sandbox.lua describes, in C, since it runs every few instructions of
 * a script.  While a command's client code runs, a count hook:
 *   - every time_every calls, compares host.busy() with the deadline (past
 *     it: killed, "time") and, once the script has run slice_ms since it was
 *     last resumed, yields it (the loop serves the others, then resumes it:
 *     meanwhile it is in h->busy, and commands are answered -BUSY);
 *   - kills it ("memory") when the allocator refused it memory (the limit
 *     is armed only while its client code runs, see lua_co_resume);
 *   - kills it ("killed") when SCRIPT KILL asked, or its client left.
 * A kill is sticky: from then until the command ends, the hook fires on
 * every call and instruction and raises again in any client function (one
 * whose source is the script's chunk name, or any chunk it loaded), so no
 * __close handler of the script runs, whether the script unwinds from the
 * kill or from its own error, and no pcall of its can go on.  System code
 * (sources "@<file>") and C functions are left to finish.  Raising calls
 * the kill function given to host.caps, which builds the error object. */
#include "lua_host_int.h"

#include "lua_alloc.h"
#include "lua_pattern.h"
#include "zk.h"

#include <math.h>
#include <string.h>

static const char caps_kill_key = 'k';
static const char caps_client_key = 'c';

/* The allocator limit for c: armed only while its client code runs. */
size_t lua_caps_limit(const struct co *c)
{
    if (!c->caps.on || c->caps.limit_kb <= 0)
        return 0;
    double b = (c->caps.mem0_kb + c->caps.limit_kb) * 1024.0;
    return b < 1 ? 1 : (size_t)b;
}

/* An allocation refused while c's client code ran kills c ("memory"). */
void lua_caps_verdict(struct co *c)
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
        lua_caps_verdict(c);
        if (!k->killed && !c->task)
            k->killed = "killed"; /* the client left: nobody waits for it */
        if (!k->killed && ar->event == LUA_HOOKCOUNT &&
            ++k->ticks >= k->time_every) {
            k->ticks = 0;
            double now = zk_now();
            if (lua_co_busy(c, now) > k->deadline) {
                k->killed = "time";
            } else if (now - c->resumed_at >= k->slice_ms &&
                       lua_isyieldable(L)) {
                c->wait = WAIT_SLICE;
                lua_yield(L, 0); /* lua_co_resume queues it again */
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
            lua_caps_verdict(c);
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
    if (c->mark_wall <= 0)
        lua_co_mark(c, zk_now());
    if (c->caps.killed)
        caps_mark(c, c->caps.killed);
    else
        lua_sethook(L, caps_hook, LUA_MASKCOUNT, c->caps.count);
    lua_alloc_set_limit(c->h->alloc, lua_caps_limit(c));
    return 0;
}

/* Pattern matching (lua_pattern.h): client code gets the bounded Lua 5.1
 * functions, each call at most SCRIPT_PATTERN_STEPS steps (about 20-60 ms)
 * and within the script's time cap; the system layer the stock ones. */
#define SCRIPT_PATTERN_STEPS (16LL * 1024 * 1024)

static void pattern_check(lua_State *L, void *arg)
{
    struct co *c = arg;
    if (lua_co_busy(c, zk_now()) > c->caps.deadline) {
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

const struct lua_pattern_host lua_caps_pattern_host = {pattern_budget};

/* host.killed(): why the running command's script was killed ("time",
 * "memory", "killed"), or nil.  Sticky until the command ends. */
static int l_host_killed(lua_State *L)
{
    struct co *c = co_of(L);
    if (c && c->caps.on)
        lua_caps_verdict(c);
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

const luaL_Reg lua_caps_fns[] = {{"caps", l_host_caps},
                                 {"killed", l_host_killed},
                                 {"kill", l_host_kill},
                                 {"busy_scripts", l_host_busy_scripts},
                                 {"kill_scripts", l_host_kill_scripts},
                                 {NULL, NULL}};
