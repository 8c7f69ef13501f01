/*
 * lua_co.c — the Lua host's coroutines: one per command, hook, timer or
 * host.spawn, and the loop-side queue that resumes them.
 *
 *   lua_host_run ──► lua_co_new ──► lua_co_resume ──► M.dispatch(args)
 *                                        ▲   │ yields (zk.*, host.sleep,
 *            completion / timer / wake ──┘   │ host.suspend, a slice)
 *                                            ▼
 *                      returns ──► co_deliver ──► client_ops.encode
 *                                                  ──► task->done
 *
 * Each coroutine has a struct co record (its task, deadline, what it waits
 * for), reachable from the thread through lua_getextraspace() and anchored
 * in the registry while it runs.
 *
 * A command's thread that returned normally is kept (up to SPARE_THREADS)
 * for a later command: its stack and call records have already grown to a
 * command's depth, which a new thread would allocate again, call level by
 * call level.  Only commands reuse them, and M.dispatch clears the Lua
 * state kept per coroutine (util.lua's per_command) before it starts;
 * background coroutines get new threads.
 */
#include "lua_host_int.h"

#include "config.h"
#include "log.h"
#include "lua_alloc.h"
#include "zk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct co *lua_co_check(lua_State *L, const char *fn)
{
    struct co *c = co_of(L);
    if (c == NULL || !lua_isyieldable(L))
        luaL_error(L, "%s must be called from a command coroutine", fn);
    return c;
}

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
 * until lua_co_unanchor.  Keyed by address, so that it can be let go of without
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

void lua_co_unanchor(struct lua_host *h, lua_State *co)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_anchors);
    lua_pushnil(L);
    lua_rawsetp(L, -2, co);
    lua_pop(L, 1);
}

void lua_co_finish(struct co *c)
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
    /* The thread may outlive c (Lua code still holds it, as a queue's
     * waiter or a wake target): it must not lead to freed memory. */
    *(struct co **)lua_getextraspace(c->L) = NULL;
    if (c->reusable && h->nspare < SPARE_THREADS &&
        lua_status(c->L) == LUA_OK) {
        lua_settop(c->L, 0);
        lua_sethook(c->L, NULL, 0, 0);
        h->spare[h->nspare++] = c->L;
    } else {
        lua_co_unanchor(h, c->L);
    }
    free(c);
}

double lua_host_reply_deadline(const struct lua_host *h,
                               const struct lua_task *t)
{
    if (!t->zk_gen)
        return 0;
    /* Lost, no new session yet, or a new one since: the answers the reply
     * rests on came from a session that is over. */
    if (zk_lease_lost(h->zk) || t->zk_gen != zk_generation(h->zk))
        return -1;
    double lease = zk_lease_end(h->zk);
    if (lease <= 0)
        return 0;
    return zk_now() >= lease ? -1 : lease;
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
        /* An error that ended the coroutine left its to-be-closed
         * variables open (only a pcall on the way closes them): close them
         * now, so that what they hold (a connection's turn, a key's queue)
         * passes on. */
        lua_resetthread(L);
    } else if (t && t->done) {
        c->h->client_ops.encode(L, nres >= 1 ? lua_absindex(L, -nres) : 0,
                                t->out, t->proto);
    }
    if (t && t->done) {
        /* A command that yielded may answer on what ZooKeeper told it (a
         * grant): it rests on the session of its last answer, or, with
         * none, the current one. */
        if (c->yielded && !c->outlives_session)
            t->zk_gen = c->answer_gen ? c->answer_gen : zk_generation(c->h->zk);
        t->priv = NULL;
        c->task = NULL;
        c->h->running--;
        t->done(t);
    }
    lua_co_finish(c);
}

/* --- a script's own clock ------------------------------------------------
 *
 * A script's time cap counts its own running time: the wall clock less
 * what it spent yielded.  A process that does not run while the script
 * runs (SIGSTOP, a frozen container, a paused VM, a preemption on a loaded
 * machine, a container's CPU quota used up) would count that time too,
 * and kill a script that did nothing wrong.  So at the end of each run
 * of the script (a slice, or up to a request it waits for) and every
 * CPU_CHECK_MS within one (the count hook looks every few hundred
 * instructions), the loop thread's CPU clock says how much of the time
 * since the last mark it ran: wall time past that CPU time is left out,
 * however short each stall was (many short ones, a CPU quota's, add up).
 * A long C call (a big gsub, a collection) runs on the CPU, so it still
 * counts.  The CPU clock is a system call, so it is read only at a
 * script's resume, at the end of a run of RUN_CHECK_MS or more, and once
 * per CPU_CHECK_MS within one. */
#define CPU_CHECK_MS 10.0
#define RUN_CHECK_MS 1.0 /* a run of the script shorter stalls for less */

static double thread_cpu_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void lua_co_mark(struct co *c, double now)
{
    c->mark_wall = now;
    c->mark_cpu = thread_cpu_ms();
}

/* Leaves out of c's clock the wall time since its mark that the loop
 * thread did not run, when the mark is at least min_ms old. */
static void co_account(struct co *c, double now, double min_ms)
{
    if (c->mark_wall > 0 && now - c->mark_wall >= min_ms) {
        double cpu = thread_cpu_ms();
        double idle = (now - c->mark_wall) - (cpu - c->mark_cpu);
        if (idle > 0)
            c->stopped += idle;
        c->mark_wall = now;
        c->mark_cpu = cpu;
    }
}

double lua_co_busy(struct co *c, double now)
{
    co_account(c, now, CPU_CHECK_MS);
    return now - c->waited - c->paused - c->stopped;
}

/* Resumes c with the nargs values on its stack.  While c's client code is
 * watched (host.caps), the allocator refuses growth past the script's
 * memory cap; a script whose count hook paused it at the end of a slice is
 * queued to run again after the loop has served everyone else. */
void lua_co_resume(struct co *c, int nargs)
{
    struct lua_host *h = c->h;
    if (h->stopped)
        return;
    int nres = 0;
    c->wait = WAIT_NONE;
    double now = zk_now();
    if (c->yielded_at > 0) {
        c->yielded = 1;
        if (c->sliced)
            c->paused += now - c->yielded_at;
        else
            c->waited += now - c->yielded_at;
        if (c->queued) /* waiting its turn is not waiting for ZooKeeper */
            c->deadline += now - c->yielded_at;
        c->yielded_at = 0;
    }
    c->queued = 0;
    busy_remove(c);
    c->resumed_at = now;
    if (c->caps.deadline > 0) /* a script: host.caps watched it */
        lua_co_mark(c, now);
    size_t limit = lua_alloc_set_limit(h->alloc, lua_caps_limit(c));
    int status = lua_resume(c->L, h->L, nargs, &nres);
    if (c->caps.on)
        lua_caps_verdict(c);
    lua_alloc_set_limit(h->alloc, limit);
    if (status == LUA_YIELD) {
        c->yielded_at = zk_now();
        /* the run that ended (a slice, up to a request): its stalls too */
        co_account(c, c->yielded_at, RUN_CHECK_MS);
        if (c->wait == WAIT_SLICE || c->wait == WAIT_PASS) {
            lua_pop(c->L, nres);
            if (c->wait == WAIT_SLICE)
                busy_add(c);
            else
                c->queued = 1; /* its turn, not ZooKeeper's time */
            lua_co_ready(h, c, 0);
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
struct co *lua_co_new(struct lua_host *h, struct lua_task *t)
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
        lua_co_resume(c, c->nargs);
        c = next;
    }
    if (!h->ready_head) {
        uv_idle_stop(&h->idle);
        h->idle_on = 0;
    }
}

void lua_co_ready(struct lua_host *h, struct co *c, int nargs)
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

/* Until when c's ZooKeeper requests may wait: --zk-request-timeout of
 * waiting in all (the time the coroutine spent running, a script's own work,
 * does not count), or, for a command that host.lease_wait marked, as long
 * as the session it marked may still be alive (the local lease). */
double lua_co_deadline(const struct co *c)
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
