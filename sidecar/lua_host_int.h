/*
 * lua_host_int.h — what the Lua host's own files share; no other subsystem
 * includes it (they use lua_host.h).
 *
 *   lua_host.c     the VM: creation, the module's entry points, main-state
 *                  calls (COMMAND, /metrics, AUTH, INFO), memory
 *   lua_co.c       coroutines: records, anchoring, resume, the ready queue,
 *                  spare threads, reply delivery (lua_co_*)
 *   lua_zk.c       the zk.* table (lua_zk_open)
 *   lua_hostlib.c  the host.* table (lua_hostlib_open)
 *   lua_caps.c     the caps of client script code: host.caps and its
 *                  hook, kills, slices, bounded patterns (lua_caps_*)
 *
 * Everything here belongs to the loop thread.
 */
#ifndef ZKRESP_LUA_HOST_INT_H
#define ZKRESP_LUA_HOST_INT_H

#include "lua_host.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <uv.h>

struct lua_pattern_host;

#define SPARE_THREADS 64

enum co_wait {
    WAIT_NONE,
    WAIT_ZK,
    WAIT_SLEEP,
    WAIT_WAKE,
    WAIT_READY,
    WAIT_SLICE, /* a script's code paused between slices (host.caps) */
    WAIT_PASS   /* host.pass: behind the coroutines already ready */
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
    double deadline;     /* started + --zk-request-timeout */
    uint64_t lease_gen;  /* host.lease_wait: the session it may wait for */
    uint64_t answer_gen; /* the session of its last ZooKeeper answer */
    double yielded_at;   /* when it last yielded (0: running) */
    double waited;       /* ms spent yielded: host.busy() leaves them out */
    double paused;       /* ms spent between slices: host.busy() too */
    double stopped;      /* ms the loop thread did not run while it ran (a
                            SIGSTOP, a frozen container, a preemption, a
                            CPU quota): host.busy() too */
    double resumed_at;   /* when it was last resumed */
    double mark_wall, mark_cpu; /* a script's wall and CPU clocks at its
                                   resume, or when last compared */
    enum co_wait wait;
    int nargs; /* values waiting on the stack for the next resume */
    struct co *next_ready;
    int reusable; /* a command's thread, to keep if it returns normally */
    int command;  /* runs a command (its requester may have left) */
    int sliced;   /* paused between slices: the VM is busy (host.caps) */
    int queued;   /* host.suspend(true): wakes when its client goes (1);
                     host.suspend("blocked"): and at CLIENT UNBLOCK (2) */
    int yielded;  /* it has yielded: its reply may rest on ZooKeeper */
    int outlives_session; /* host.outlives_session: its reply does not */
    struct co *busy_prev, *busy_next; /* h->busy, while sliced */
    struct caps caps;
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

/* The coroutine record of thread L (NULL: the main state, or a thread that
 * is not one of ours). */
static inline struct co *co_of(lua_State *L)
{
    return *(struct co **)lua_getextraspace(L);
}

/* The host of a binding: its first upvalue holds a pointer to it. */
static inline struct lua_host *host_of(lua_State *L)
{
    return *(struct lua_host **)lua_touserdata(L, lua_upvalueindex(1));
}

/* --- lua_co.c ------------------------------------------------------------ */

/* The running coroutine's record; raises ("fn must be called from a command
 * coroutine") unless L is one of ours and may yield. */
struct co *lua_co_check(lua_State *L, const char *fn);

/* A new coroutine record with its thread (a spare one for a command t),
 * counted and anchored.  t: the command's task, or NULL for background work
 * (hooks, timers, host.spawn).  The caller pushes the function and its
 * arguments onto c->L, then resumes it (lua_co_resume or lua_co_ready). */
struct co *lua_co_new(struct lua_host *h, struct lua_task *t);

/* Resumes c with the nargs values on top of its stack, now.  When it
 * returns or fails, its reply is delivered (t->done) and the record freed. */
void lua_co_resume(struct co *c, int nargs);

/* Queues c to be resumed with nargs values on the next loop turn. */
void lua_co_ready(struct lua_host *h, struct co *c, int nargs);

/* Frees a record that never ran (a hook the module does not have). */
void lua_co_finish(struct co *c);

/* Lets go of thread co: it is the collector's from now on. */
void lua_co_unanchor(struct lua_host *h, lua_State *co);

/* Until when (zk_now() ms) c's ZooKeeper requests may wait. */
double lua_co_deadline(const struct co *c);

/* c's own running time, in ms of a clock of its own (host.busy(), a
 * script's time cap): the wall clock at now less what c spent yielded and
 * what the process spent not running while c ran (lua_co.c). */
double lua_co_busy(struct co *c, double now);

/* Takes a script's clocks: when host.caps watches it first, and at each
 * resume after that. */
void lua_co_mark(struct co *c, double now);

/* --- lua_caps.c ---------------------------------------------------------- */

/* The allocator limit for c: armed only while its client code runs (0:
 * none). */
size_t lua_caps_limit(const struct co *c);

/* An allocation refused while c's client code ran kills c ("memory"). */
void lua_caps_verdict(struct co *c);

/* host.caps, host.killed, host.kill, host.busy_scripts, host.kill_scripts
 * (each takes the host as its upvalue). */
extern const luaL_Reg lua_caps_fns[];

/* The bounds of host.patterns: client code's calls are bounded. */
extern const struct lua_pattern_host lua_caps_pattern_host;

/* --- lua_zk.c, lua_hostlib.c --------------------------------------------- */

/* Sets the global `zk`: its functions and constants (lua_host.h). */
void lua_zk_open(struct lua_host *h);

/* Sets the global `host`: its functions, null, instance, patterns and
 * config (lua_host.h). */
void lua_hostlib_open(struct lua_host *h);

#endif
