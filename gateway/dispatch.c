/*
 * dispatch.c — connection commands, answered without ZooKeeper, and the
 * routing of everything else to Lua.
 *
 * Replies and errors follow Redis 7 word for word (COMPAT.md).
 */
#include "dispatch.h"

#include "config.h"
#include "conn.h"
#include "errors.h"
#include "log.h"
#include "lua_host.h"
#include "metrics.h"
#include "proto.h"
#include "reply.h"
#include "server.h"
#include "zk.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

struct cmd_ctx {
    struct conn *c;
    struct req *r;
    int argc;
    const struct proto_arg *argv;
    struct buf *out;
};

typedef void (*cmd_fn)(struct cmd_ctx *x);

/* One command answered in C: its name in the command registry
 * (scripts/registry.lua), where its shape is, and its function.  dispatch()
 * runs fn only for a request of the registry's shape (arity, subcommand,
 * subscribed mode), so fn may read every argument the shape guarantees. */
struct ccmd {
    const char *name;
    cmd_fn fn;
};

/* A C command's registry entry, copied by dispatch_init. */
struct cshape {
    int loaded;
    int arity, max_args; /* as struct lua_host_cmd */
    int subscribed_ok;
    int noauth; /* the "noauth" flag: allowed before AUTH */
    int nsubs;
    struct {
        char name[24];
        int arity;
    } subs[LUA_HOST_MAX_SUBS];
};

/* Whether p[0..n) is s, in any case. */
static int bytes_are(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && strncasecmp(p, s, n) == 0;
}

static int arg_is(const struct proto_arg *a, const char *s)
{
    return bytes_are(a->ptr, a->len, s);
}

/* Parses a whole argument as a signed 64-bit integer, as Redis's string2ll. */
static int arg_ll(const struct proto_arg *a, long long *out)
{
    if (a->len == 0 || a->len > 20)
        return -1;
    char tmp[32];
    memcpy(tmp, a->ptr, a->len);
    tmp[a->len] = 0;
    if (tmp[0] == '+' || isspace((unsigned char)tmp[0]) ||
        (tmp[0] == '0' && a->len > 1) ||
        (tmp[0] == '-' && (a->len == 1 || tmp[1] == '0')))
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(tmp, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static void err_not_int(struct buf *out)
{
    reply_error(out, "ERR value is not an integer or out of range");
}

/* Client names and library attributes: printable, no spaces. */
static int valid_name(const struct proto_arg *a)
{
    for (size_t i = 0; i < a->len; i++)
        if (a->ptr[i] < '!' || a->ptr[i] > '~')
            return 0;
    return 1;
}

static char *arg_dup(const struct proto_arg *a)
{
    char *s = malloc(a->len + 1);
    if (s) {
        memcpy(s, a->ptr, a->len);
        s[a->len] = 0;
    }
    return s;
}

/* Compares in time independent of where the strings differ. */
static int secret_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = alen != blen;
    for (size_t i = 0; i < alen; i++)
        diff |= (unsigned char)(a[i] ^ (i < blen ? b[i] : 0));
    return diff == 0;
}

/* AUTH semantics shared by AUTH and HELLO ... AUTH: 1 on success, and
 * then the connection's user is `user`.  The default user's password is
 * --requirepass; any other user is the policy's to accept (its authenticate
 * hook, see lua_host_authenticate); without that hook there is none. */
static int check_auth(struct conn *c, const struct proto_arg *user,
                      const struct proto_arg *pass)
{
    const char *want = c->srv->cfg->requirepass;
    /* user names are case-sensitive, as Redis's ACL users */
    if (user && !(user->len == 7 && memcmp(user->ptr, "default", 7) == 0)) {
        if (user->len == 0 || user->len > 128 || !valid_name(user) ||
            lua_host_authenticate(c->srv->lua, user->ptr, user->len, pass->ptr,
                                  pass->len, c->addr) != 1)
            return 0;
        char *u = arg_dup(user);
        if (!u)
            return 0;
        free(c->user);
        c->user = u;
        return 1;
    }
    if (want && !secret_equal(pass->ptr, pass->len, want, strlen(want)))
        return 0;
    free(c->user);
    c->user = NULL; /* the default user */
    return 1;
}

/* --- the commands -------------------------------------------------------- */

static void cmd_ping(struct cmd_ctx *x)
{
    if (conn_subscribed_resp2(x->c)) {
        /* Redis: a subscriber's PING is an array, so that it cannot be
         * mistaken for a message. */
        reply_array(x->out, 2);
        reply_bulk_str(x->out, "pong");
        if (x->argc == 2)
            reply_bulk(x->out, x->argv[1].ptr, x->argv[1].len);
        else
            reply_bulk_str(x->out, "");
        return;
    }
    if (x->argc == 2)
        reply_bulk(x->out, x->argv[1].ptr, x->argv[1].len);
    else
        reply_status(x->out, "PONG");
}

static void cmd_echo(struct cmd_ctx *x)
{
    reply_bulk(x->out, x->argv[1].ptr, x->argv[1].len);
}

static void cmd_quit(struct cmd_ctx *x)
{
    reply_status(x->out, "OK");
    x->r->close_after = 1;
}

static void cmd_select(struct cmd_ctx *x)
{
    long long db;
    if (arg_ll(&x->argv[1], &db) < 0 || db < INT_MIN || db > INT_MAX)
        err_not_int(x->out);
    else if (db < 0 || db >= x->c->srv->cfg->databases)
        reply_error(x->out, "ERR DB index is out of range");
    else {
        x->c->db = (int)db;
        reply_status(x->out, "OK");
    }
}

static void cmd_auth(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    if (x->argc > 3) {
        reply_error(x->out, "ERR syntax error");
        return;
    }
    if (x->argc == 2 && !c->srv->cfg->requirepass) {
        reply_error(x->out,
                    "ERR AUTH <password> called without any password "
                    "configured for the default user. Are you sure your "
                    "configuration is correct?");
        return;
    }
    const struct proto_arg *user = x->argc == 3 ? &x->argv[1] : NULL;
    const struct proto_arg *pass = &x->argv[x->argc - 1];
    if (check_auth(c, user, pass)) {
        conn_set_authed(c, 1);
        reply_status(x->out, "OK");
    } else {
        conn_auth_failed(c);
        reply_error(x->out, "WRONGPASS invalid username-password pair or "
                            "user is disabled.");
    }
}

static void cmd_hello(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    long long ver = c->resp;
    int j = 1;
    if (x->argc >= 2) {
        if (arg_ll(&x->argv[1], &ver) < 0) {
            reply_error(x->out,
                        "ERR Protocol version is not an integer or out of "
                        "range");
            return;
        }
        if (ver < 2 || ver > 3) {
            reply_error(x->out, "NOPROTO unsupported protocol version");
            return;
        }
        j = 2;
    }
    const struct proto_arg *user = NULL, *pass = NULL, *name = NULL;
    for (; j < x->argc; j++) {
        int more = x->argc - j - 1;
        if (arg_is(&x->argv[j], "AUTH") && more >= 2) {
            user = &x->argv[j + 1];
            pass = &x->argv[j + 2];
            j += 2;
        } else if (arg_is(&x->argv[j], "SETNAME") && more >= 1) {
            name = &x->argv[j + 1];
            j += 1;
            /* checked before AUTH runs, as Redis does */
            if (!valid_name(name)) {
                reply_error(x->out, "ERR Client names cannot contain spaces, "
                                    "newlines or special characters.");
                return;
            }
        } else {
            reply_errorf(x->out, "ERR Syntax error in HELLO option '%.*s'",
                         (int)(x->argv[j].len > 128 ? 128 : x->argv[j].len),
                         x->argv[j].ptr);
            return;
        }
    }
    if (user) {
        if (!check_auth(c, user, pass)) {
            conn_auth_failed(c);
            reply_error(x->out, "WRONGPASS invalid username-password pair or "
                                "user is disabled.");
            return;
        }
        conn_set_authed(c, 1);
    }
    if (!c->authed) {
        reply_error(x->out,
                    "NOAUTH HELLO must be called with the client already "
                    "authenticated, otherwise the HELLO <proto> AUTH <user> "
                    "<pass> option can be used to authenticate the client and "
                    "select the RESP protocol version at the same time");
        return;
    }
    if (name) {
        free(c->name);
        c->name = name->len ? arg_dup(name) : NULL;
    }
    c->resp = (int)ver;
    x->r->task.proto = c->resp;
    int p = c->resp;
    reply_map(x->out, p, 7);
    reply_bulk_str(x->out, "server");
    reply_bulk_str(x->out, "redis");
    reply_bulk_str(x->out, "version");
    reply_bulk_str(x->out, REDIS_COMPAT_VERSION);
    reply_bulk_str(x->out, "proto");
    reply_int(x->out, c->resp);
    reply_bulk_str(x->out, "id");
    reply_int(x->out, (long long)c->id);
    reply_bulk_str(x->out, "mode");
    reply_bulk_str(x->out, "standalone");
    reply_bulk_str(x->out, "role");
    reply_bulk_str(x->out, "master");
    reply_bulk_str(x->out, "modules");
    reply_array(x->out, 0);
}

static void cmd_reset(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    if (c->nsub + c->npsub + c->nssub > 0) {
        lua_host_client_gone(c->srv->lua, c->id, 0);
        c->nsub = c->npsub = c->nssub = 0;
    }
    c->resp = 2;
    c->db = 0;
    free(c->name);
    c->name = NULL;
    free(c->user);
    c->user = NULL;
    conn_set_authed(c, c->srv->cfg->requirepass == NULL);
    /* Replies on again; RESET's own is sent after OFF, not when a SKIP
     * was for it (as in Redis). */
    if (c->reply_mode == REPLY_OFF)
        x->r->silent = 0;
    c->reply_mode = REPLY_ON;
    reply_status(x->out, "RESET");
}

/* A client's type as CLIENT LIST/KILL TYPE name them: 0 normal, 1 pubsub
 * (any subscription); zkresp has no master or replica clients. */
static int client_type(const struct conn *o)
{
    return o->nsub + o->npsub + o->nssub > 0 ? 1 : 0;
}

/* TYPE's argument: 0 normal, 1 pubsub, 2 master/replica/slave (none here),
 * -1 unknown (the error is written). */
static int parse_client_type(struct buf *out, const struct proto_arg *v)
{
    if (arg_is(v, "normal"))
        return 0;
    if (arg_is(v, "pubsub"))
        return 1;
    if (arg_is(v, "master") || arg_is(v, "replica") || arg_is(v, "slave"))
        return 2;
    reply_errorf(out, "ERR Unknown client type '%.*s'",
                 (int)(v->len > 128 ? 128 : v->len), v->ptr);
    return -1;
}

/* CLIENT LIST [TYPE type] [ID id ...] */
static void client_list(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    int type = -1, ids_from = 0;
    if (x->argc >= 4 && arg_is(&x->argv[2], "TYPE") && x->argc == 4) {
        if ((type = parse_client_type(x->out, &x->argv[3])) < 0)
            return;
    } else if (x->argc >= 4 && arg_is(&x->argv[2], "ID")) {
        ids_from = 3;
        for (int i = 3; i < x->argc; i++) {
            long long id;
            if (arg_ll(&x->argv[i], &id) < 0) {
                reply_error(x->out, "ERR Invalid client ID");
                return;
            }
        }
    } else if (x->argc != 2) {
        reply_error(x->out, "ERR syntax error");
        return;
    }
    struct buf b;
    buf_init(&b);
    for (struct conn *o = c->srv->conns; o; o = o->next) {
        if (o->closing || (type >= 0 && client_type(o) != type))
            continue;
        if (ids_from) {
            int hit = 0;
            for (int i = ids_from; i < x->argc && !hit; i++) {
                long long id;
                hit = arg_ll(&x->argv[i], &id) == 0 && (uint64_t)id == o->id;
            }
            if (!hit)
                continue;
        }
        conn_describe(o, &b);
    }
    reply_verbatim(x->out, c->resp, b.data ? b.data : "", b.len);
    buf_free(&b);
}

/* CLIENT KILL addr (the old form: +OK, or an error when no client has that
 * address), or filters: ID id, ADDR addr, LADDR addr, USER name, TYPE
 * type, SKIPME yes|no (yes by default: the caller is spared), answered
 * with how many were killed.  A client killing itself gets its reply. */
static void client_kill(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    if (x->argc == 3) {
        struct conn *victim = NULL;
        for (struct conn *o = c->srv->conns; o; o = o->next)
            if (!o->closing && arg_is(&x->argv[2], o->addr))
                victim = o;
        if (!victim) {
            reply_error(x->out, "ERR No such client");
            return;
        }
        reply_status(x->out, "OK");
        if (victim == c)
            x->r->close_after = 1;
        else
            conn_close(victim, "client kill");
        return;
    }
    long long id = 0;
    const struct proto_arg *addr = NULL, *laddr = NULL, *user = NULL;
    int type = -1, skipme = 1;
    if ((x->argc - 2) % 2) {
        reply_error(x->out, "ERR syntax error");
        return;
    }
    for (int i = 2; i < x->argc; i += 2) {
        const struct proto_arg *k = &x->argv[i], *v = &x->argv[i + 1];
        if (arg_is(k, "ID")) {
            if (arg_ll(v, &id) < 0 || id < 1) {
                reply_error(x->out, "ERR client-id should be greater than 0");
                return;
            }
        } else if (arg_is(k, "ADDR")) {
            addr = v;
        } else if (arg_is(k, "LADDR")) {
            laddr = v;
        } else if (arg_is(k, "USER")) {
            user = v;
        } else if (arg_is(k, "TYPE")) {
            if ((type = parse_client_type(x->out, v)) < 0)
                return;
        } else if (arg_is(k, "SKIPME") &&
                   (arg_is(v, "yes") || arg_is(v, "no"))) {
            skipme = arg_is(v, "yes");
        } else {
            reply_error(x->out, "ERR syntax error");
            return;
        }
    }
    long long killed = 0;
    for (struct conn *o = c->srv->conns; o; o = o->next) {
        if (o->closing || (o == c && skipme))
            continue;
        if ((id && o->id != (uint64_t)id) || (addr && !arg_is(addr, o->addr)) ||
            (laddr && !arg_is(laddr, o->laddr)) ||
            (type >= 0 && client_type(o) != type))
            continue;
        if (user) {
            const char *name = o->user ? o->user : "default";
            if (user->len != strlen(name) ||
                memcmp(user->ptr, name, user->len) != 0)
                continue;
        }
        killed++;
        if (o == c)
            x->r->close_after = 1;
        else
            conn_close(o, "client kill");
    }
    reply_int(x->out, killed);
}

/* CLIENT <subcommand> ...: dispatch() has checked the subcommand's arity
 * (client_subs), so each branch reads only what that arity guarantees. */
static void cmd_client(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    const struct proto_arg *sub = &x->argv[1];

    if (arg_is(sub, "SETNAME")) {
        if (!valid_name(&x->argv[2])) {
            reply_error(x->out, "ERR Client names cannot contain "
                                "spaces, newlines or special "
                                "characters.");
            return;
        }
        free(c->name);
        c->name = x->argv[2].len ? arg_dup(&x->argv[2]) : NULL;
        reply_status(x->out, "OK");
    } else if (arg_is(sub, "GETNAME")) {
        if (c->name)
            reply_bulk_str(x->out, c->name);
        else
            reply_null(x->out, c->resp);
    } else if (arg_is(sub, "ID")) {
        reply_int(x->out, (long long)c->id);
    } else if (arg_is(sub, "SETINFO")) {
        const struct proto_arg *attr = &x->argv[2], *val = &x->argv[3];
        char **slot;
        const char *label;
        if (arg_is(attr, "LIB-NAME")) {
            slot = &c->lib_name;
            label = "lib-name";
        } else if (arg_is(attr, "LIB-VER")) {
            slot = &c->lib_ver;
            label = "lib-ver";
        } else {
            reply_errorf(x->out, "ERR Unrecognized option '%.*s'",
                         (int)(attr->len > 128 ? 128 : attr->len), attr->ptr);
            return;
        }
        if (!valid_name(val)) {
            reply_errorf(x->out,
                         "ERR %s cannot contain spaces, newlines or "
                         "special characters.",
                         label);
            return;
        }
        free(*slot);
        *slot = val->len ? arg_dup(val) : NULL;
        reply_status(x->out, "OK");
    } else if (arg_is(sub, "INFO")) {
        struct buf b;
        buf_init(&b);
        conn_describe(c, &b);
        reply_verbatim(x->out, c->resp, b.data, b.len);
        buf_free(&b);
    } else if (arg_is(sub, "LIST")) {
        client_list(x);
    } else if (arg_is(sub, "KILL")) {
        client_kill(x);
    } else if (arg_is(sub, "REPLY")) {
        /* ON answers +OK (after OFF too); OFF and SKIP answer nothing,
         * and SKIP leaves the next command unanswered (conn.c). */
        const struct proto_arg *mode = &x->argv[2];
        if (arg_is(mode, "ON")) {
            c->reply_mode = REPLY_ON;
            x->r->silent = 0;
            reply_status(x->out, "OK");
        } else if (arg_is(mode, "OFF")) {
            c->reply_mode = REPLY_OFF;
            x->r->silent = 1;
        } else if (arg_is(mode, "SKIP")) {
            if (c->reply_mode != REPLY_OFF)
                c->reply_mode = REPLY_SKIP;
            x->r->silent = 1;
        } else {
            reply_error(x->out, "ERR syntax error");
        }
    } else if (arg_is(sub, "NO-EVICT") || arg_is(sub, "NO-TOUCH")) {
        /* accepted, nothing to do: nothing is evicted or touched */
        if (arg_is(&x->argv[2], "ON") || arg_is(&x->argv[2], "OFF"))
            reply_status(x->out, "OK");
        else
            reply_error(x->out, "ERR syntax error");
    } else {
        /* In the registry but without a branch here: a bug. */
        reply_errorf(x->out, "ERR CLIENT %.*s has no implementation",
                     (int)(sub->len > 128 ? 128 : sub->len), sub->ptr);
    }
}

static void cmd_time(struct cmd_ctx *x)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    char s[32], us[32];
    snprintf(s, sizeof s, "%lld", (long long)tv.tv_sec);
    snprintf(us, sizeof us, "%lld", (long long)tv.tv_usec);
    reply_array(x->out, 2);
    reply_bulk_str(x->out, s);
    reply_bulk_str(x->out, us);
}

/* MEMORY PURGE: what an idle trim does (server.c), at once: a full
 * collection of the Lua VM, its pool's free pages and malloc's given back,
 * so that INFO's used_memory_lua and used_memory_rss show what is live.
 * The VM's tables are compacted only when no command runs (lua_host_collect
 * is for idle moments); otherwise only malloc is trimmed. */
static void cmd_memory(struct cmd_ctx *x)
{
    struct lua_host *lua = x->c->srv->lua;
    if (lua && lua_host_commands_alive(lua) == 0)
        lua_host_collect(lua);
    malloc_trim(0);
    reply_status(x->out, "OK");
}

static void cmd_wait(struct cmd_ctx *x)
{
    long long n, timeout;
    if (arg_ll(&x->argv[1], &n) < 0) {
        err_not_int(x->out);
        return;
    }
    if (arg_ll(&x->argv[2], &timeout) < 0) {
        reply_error(x->out, "ERR timeout is not an integer or out of range");
        return;
    }
    if (timeout < 0) {
        reply_error(x->out, "ERR timeout is negative");
        return;
    }
    reply_int(x->out, 0);
}

static void cmd_waitaof(struct cmd_ctx *x)
{
    long long local, replicas, timeout;
    if (arg_ll(&x->argv[1], &local) < 0 || arg_ll(&x->argv[2], &replicas) < 0 ||
        arg_ll(&x->argv[3], &timeout) < 0) {
        err_not_int(x->out);
        return;
    }
    if (timeout < 0) {
        reply_error(x->out, "ERR timeout is negative");
        return;
    }
    if (local > 0) {
        reply_error(x->out, "ERR WAITAOF cannot be used when numlocal "
                            "is set but appendonly is disabled.");
        return;
    }
    reply_array(x->out, 2);
    reply_int(x->out, 0);
    reply_int(x->out, 0);
}

static void cmd_cluster_disabled(struct cmd_ctx *x)
{
    reply_error(x->out, "ERR This instance has cluster support disabled");
}

enum info_section {
    INFO_SERVER = 1 << 0,
    INFO_CLIENTS = 1 << 1,
    INFO_PERSISTENCE = 1 << 2,
    INFO_STATS = 1 << 3,
    INFO_REPLICATION = 1 << 4,
    INFO_KEYSPACE = 1 << 5,
    INFO_ZOOKEEPER = 1 << 6,
    INFO_POLICY = 1 << 7,
    INFO_MEMORY = 1 << 8,
    INFO_ALL = (1 << 9) - 1,
};

static const char *const info_names[] = {
    "server",   "clients",   "persistence", "stats",  "replication",
    "keyspace", "zookeeper", "policy",      "memory",
};

/* One "name:value" line of INFO's # Policy section (lua_host_policy_info);
 * CR and LF in a value (an error message) become spaces. */
static void info_policy_line(void *arg, const char *name, const char *value)
{
    struct buf *b = arg;
    buf_printf(b, "%s:", name);
    size_t start = b->len;
    buf_printf(b, "%s", value);
    for (size_t i = start; i < b->len; i++)
        if (b->data[i] == '\r' || b->data[i] == '\n')
            b->data[i] = ' ';
    buf_printf(b, "\r\n");
}

static unsigned info_parse(struct cmd_ctx *x)
{
    if (x->argc < 2)
        return INFO_ALL;
    unsigned m = 0;
    for (int i = 1; i < x->argc; i++) {
        if (arg_is(&x->argv[i], "all") || arg_is(&x->argv[i], "everything") ||
            arg_is(&x->argv[i], "default"))
            m |= INFO_ALL;
        for (unsigned k = 0; k < sizeof info_names / sizeof info_names[0]; k++)
            if (arg_is(&x->argv[i], info_names[k]))
                m |= 1u << k;
    }
    return m;
}

/* INFO keyspace's key counts, the numChildren of each database's
 * directory, gathered before INFO answers: <root>/k and the children of
 * <root>/db first, then the directory of each database listed there (the
 * first INFO_MAX_DBS of them). */
#define INFO_MAX_DBS 64
struct info_keys {
    struct req *r;
    int pending; /* ZooKeeper answers still awaited */
    int n;       /* dbs[0..n) in use; dbs[0] is database 0 */
    struct info_db {
        struct info_keys *ik;
        int db;
        long long keys; /* -1: unknown */
    } dbs[INFO_MAX_DBS];
};

static int info_db_cmp(const void *a, const void *b)
{
    const struct info_db *x = a, *y = b;
    return (x->db > y->db) - (x->db < y->db);
}

/* Writes the INFO text for `sections`; ik NULL: the key counts are
 * unknown. */
static void info_write(struct server *s, unsigned sections,
                       const struct info_keys *ik, int proto, struct buf *out)
{
    struct buf b;
    buf_init(&b);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double now = (double)tv.tv_sec * 1000 + tv.tv_usec / 1000.0;
    long long up = (long long)((now - s->started_ms) / 1000);
    if (sections & INFO_SERVER)
        buf_printf(&b,
                   "# Server\r\nredis_version:%s\r\nzkresp_version:%s\r\n"
                   "redis_mode:standalone\r\nos:Linux\r\narch_bits:%d\r\n"
                   "multiplexing_api:epoll\r\nprocess_id:%d\r\nrun_id:%s\r\n"
                   "tcp_port:%d\r\nuptime_in_seconds:%lld\r\n"
                   "uptime_in_days:%lld\r\nexecutable:zkresp\r\n\r\n",
                   REDIS_COMPAT_VERSION, ZKRESP_VERSION,
                   (int)(sizeof(void *) * 8), (int)getpid(), s->run_id,
                   s->tcp_port, up, up / 86400);
    if (sections & INFO_CLIENTS)
        buf_printf(&b,
                   "# Clients\r\nconnected_clients:%zu\r\nmaxclients:%d\r\n"
                   "blocked_clients:0\r\n\r\n",
                   s->nconns, s->cfg->maxclients);
    if (sections & INFO_MEMORY) {
        /* used_memory: what malloc has handed out plus the Lua pool's
         * pages; used_memory_lua: what the VM holds, garbage included
         * until its collector runs (see server.c on idle trims). */
        struct lua_host_memory lm = {0};
        if (s->lua)
            lua_host_memory(s->lua, &lm);
        struct mallinfo2 mi = mallinfo2();
        buf_printf(&b,
                   "# Memory\r\nused_memory:%zu\r\nused_memory_rss:%zu\r\n"
                   "used_memory_lua:%zu\r\nused_memory_lua_pool:%zu\r\n"
                   "lua_spare_threads:%zu\r\nmem_allocator:libc\r\n"
                   "mem_idle_trims:%llu\r\n\r\n",
                   mi.uordblks + mi.hblkhd + lm.pooled, server_rss(), lm.used,
                   lm.pooled, lm.spare_threads,
                   (unsigned long long)s->idle.trims);
    }
    if (sections & INFO_PERSISTENCE)
        buf_printf(&b, "# Persistence\r\nloading:0\r\naof_enabled:0\r\n\r\n");
    if (sections & INFO_STATS)
        buf_printf(&b,
                   "# Stats\r\ntotal_connections_received:%llu\r\n"
                   "total_commands_processed:%llu\r\n"
                   "total_net_input_bytes:%llu\r\n"
                   "total_net_output_bytes:%llu\r\n"
                   "rejected_connections:%llu\r\n"
                   "protocol_errors:%llu\r\n\r\n",
                   (unsigned long long)s->stats.connections_received,
                   (unsigned long long)s->stats.commands_processed,
                   (unsigned long long)s->stats.net_input_bytes,
                   (unsigned long long)s->stats.net_output_bytes,
                   (unsigned long long)s->stats.rejected_connections,
                   (unsigned long long)s->stats.protocol_errors);
    if (sections & INFO_REPLICATION)
        buf_printf(&b, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
                       "\r\n");
    if (sections & INFO_KEYSPACE) {
        buf_printf(&b, "# Keyspace\r\n");
        for (int i = 0; ik && i < ik->n; i++)
            if (ik->dbs[i].keys > 0)
                buf_printf(&b, "db%d:keys=%lld,expires=0,avg_ttl=0\r\n",
                           ik->dbs[i].db, ik->dbs[i].keys);
        buf_printf(&b, "\r\n");
    }
    if (sections & INFO_ZOOKEEPER) {
        struct zk_group_stats gs = zk_group_stats(s->zk);
        uint64_t ahead_sent, ahead_taken;
        zk_ahead_counts(s->zk, &ahead_sent, &ahead_taken);
        buf_printf(
            &b,
            "# Zookeeper\r\nzk_state:%s\r\nzk_session_id:0x%llx\r\n"
            "zk_session_timeout:%d\r\nzk_server:%s\r\nzk_connect:%s\r\n"
            "zk_root:%s\r\nzk_inflight:%zu\r\nzk_sessions:%llu\r\n"
            "zk_groups:%llu\r\nzk_grouped_requests:%llu\r\n"
            "zk_group_resends:%llu\r\nzk_disconnects:%llu\r\n"
            "zk_max_request:%zu\r\nzk_requests_too_large:%llu\r\n"
            "zk_reads_ahead:%llu\r\nzk_reads_ahead_taken:%llu\r\n"
            "zk_requests:",
            zk_state_name(s->zk), (unsigned long long)zk_session_id(s->zk),
            zk_negotiated_timeout(s->zk), zk_server(s->zk), s->cfg->zk,
            s->cfg->root, zk_inflight(s->zk),
            (unsigned long long)zk_sessions_started(s->zk),
            (unsigned long long)gs.groups, (unsigned long long)gs.members,
            (unsigned long long)gs.resent,
            (unsigned long long)zk_disconnects(s->zk), zk_max_request(s->zk),
            (unsigned long long)zk_requests_too_large(s->zk),
            (unsigned long long)ahead_sent, (unsigned long long)ahead_taken);
        for (int t = 0, n = 0; t < ZK_OP_TYPES; t++)
            if (t != ZK_OP_CHECK) /* only ever inside a multi */
                buf_printf(&b, "%s%s=%llu", n++ ? "," : "", zk_op_name(t),
                           (unsigned long long)zk_requests_sent(s->zk, t));
        buf_printf(&b, "\r\nlua_running:%zu\r\n\r\n", lua_host_running(s->lua));
    }
    if (sections & INFO_POLICY) {
        buf_printf(&b, "# Policy\r\n");
        lua_host_policy_info(s->lua, info_policy_line, &b);
        buf_printf(&b, "\r\n");
    }
    if (b.len >= 2)
        b.len -= 2; /* no blank line after the last section */
    reply_verbatim(out, proto, b.data ? b.data : "", b.len);
    buf_free(&b);
}

/* One answer of INFO's key count is in; the last one writes the reply. */
static void info_keys_finish(struct info_keys *ik)
{
    if (--ik->pending > 0)
        return;
    struct req *r = ik->r;
    if (!r->orphan) {
        qsort(ik->dbs, (size_t)ik->n, sizeof ik->dbs[0], info_db_cmp);
        info_write(r->c->srv, r->info_sections, ik, r->task.proto, &r->reply);
    }
    conn_req_finish(r);
    free(ik);
}

/* The key count of one database arrived (numChildren of its directory). */
static void info_db_done(const struct zk_result *res, void *arg)
{
    struct info_db *d = arg;
    d->keys = res->rc == 0 && res->has_stat ? res->stat.num_children : -1;
    info_keys_finish(d->ik);
}

static void info_db_submit(struct server *s, struct info_keys *ik, int db)
{
    char path[1024];
    if (db == 0)
        snprintf(path, sizeof path, "%s/k", s->cfg->root);
    else
        snprintf(path, sizeof path, "%s/db/%d/k", s->cfg->root, db);
    struct info_db *d = &ik->dbs[ik->n++];
    d->ik = ik;
    d->db = db;
    d->keys = -1;
    ik->pending++;
    struct zk_op op = {.type = ZK_OP_EXISTS, .path = path};
    zk_submit(s->zk, ZK_OP_EXISTS, &op, 1, zk_now() + 500, ZK_BOUNDED,
              info_db_done, d);
}

/* The databases n > 0 that have a directory (the children of <root>/db). */
static void info_dbdir_done(const struct zk_result *res, void *arg)
{
    struct info_keys *ik = arg;
    /* An orphan's connection is freed: nothing of it may be read. */
    if (res->rc == 0 && !ik->r->orphan) {
        struct server *s = ik->r->c->srv;
        for (int i = 0; i < res->nchildren && ik->n < INFO_MAX_DBS; i++) {
            const char *name = res->children[i];
            char *end;
            errno = 0;
            long db = strtol(name, &end, 10);
            if (!errno && *end == 0 && name[0] >= '1' && name[0] <= '9' &&
                db < s->cfg->databases)
                info_db_submit(s, ik, (int)db);
        }
    }
    info_keys_finish(ik);
}

static void cmd_info(struct cmd_ctx *x)
{
    struct server *s = x->c->srv;
    unsigned sections = info_parse(x);
    struct info_keys *ik = NULL;
    if ((sections & INFO_KEYSPACE) && zk_connected(s->zk))
        ik = calloc(1, sizeof *ik);
    if (!ik) {
        info_write(s, sections, NULL, x->c->resp, x->out);
        return;
    }
    /* The key counts need ZooKeeper: ask with a short deadline and answer
     * from the completions. */
    ik->r = x->r;
    ik->pending = 1; /* the listing of <root>/db */
    x->r->info_sections = sections;
    x->r->task.proto = x->c->resp;
    x->r->c_pending = 1;
    info_db_submit(s, ik, 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/db", s->cfg->root);
    struct zk_op op = {.type = ZK_OP_CHILDREN, .path = path};
    zk_submit(s->zk, ZK_OP_CHILDREN, &op, 1, zk_now() + 500, ZK_BOUNDED,
              info_dbdir_done, ik);
}

/* --- COMMAND ------------------------------------------------------------- */

static void flags_reply(struct buf *out, int proto, const char *flags)
{
    size_t n = 0;
    for (const char *p = flags; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        n++;
        while (*p && *p != ' ')
            p++;
    }
    reply_set(out, proto, (long)n);
    for (const char *p = flags; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *e = p;
        while (*e && *e != ' ')
            e++;
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%.*s", (int)(e - p), p);
        reply_status(out, tmp);
        p = e;
    }
}

/* COMMAND INFO's entry of one command: flags, ACL categories and tips are
 * sets (in RESP3), key specs and subcommands arrays, as in Redis. */
static void entry_reply(struct buf *out, int proto,
                        const struct lua_host_cmd *cmd)
{
    reply_array(out, 10);
    reply_bulk_str(out, cmd->name);
    reply_int(out, cmd->arity);
    flags_reply(out, proto, cmd->flags);
    reply_int(out, cmd->first);
    reply_int(out, cmd->last);
    reply_int(out, cmd->step);
    reply_set(out, proto, 0);
    reply_set(out, proto, 0);
    reply_array(out, 0);
    reply_array(out, 0);
}

/* One COMMAND DOCS entry: the name, then a small doc map. */
static void doc_reply(struct buf *out, int proto,
                      const struct lua_host_cmd *cmd)
{
    reply_bulk_str(out, cmd->name);
    reply_map(out, proto, 2);
    reply_bulk_str(out, "summary");
    reply_bulk_str(out, "");
    reply_bulk_str(out, "group");
    reply_bulk_str(out, cmd->group);
}

/* A visit of the command registry for COMMAND: with only, just that name.
 * Counts what it matches and, with out, writes each one's COMMAND INFO
 * entry (or, with docs, its COMMAND DOCS pair). */
struct cmd_list {
    struct buf *out;
    int proto;
    int docs;
    const char *only;
    size_t count;
};

static void list_cmd(void *arg, const struct lua_host_cmd *cmd)
{
    struct cmd_list *l = arg;
    if (l->only && strcmp(l->only, cmd->name) != 0)
        return;
    l->count++;
    if (l->out && l->docs)
        doc_reply(l->out, l->proto, cmd);
    else if (l->out)
        entry_reply(l->out, l->proto, cmd);
}

/* Visits the command a names, in any case; 1 when there is one. */
static int list_named(struct lua_host *lua, const struct proto_arg *a,
                      struct cmd_list *l)
{
    char name[129];
    if (a->len >= sizeof name)
        return 0;
    for (size_t i = 0; i < a->len; i++)
        name[i] = (char)tolower((unsigned char)a->ptr[i]);
    name[a->len] = 0;
    size_t before = l->count;
    l->only = name;
    lua_host_commands(lua, list_cmd, l);
    l->only = NULL;
    return l->count > before;
}

/* COMMAND DOCS [name ...]: a map from each known command to its docs. */
static void cmd_docs(struct cmd_ctx *x)
{
    struct lua_host *lua = x->c->srv->lua;
    struct cmd_list l = {.proto = x->c->resp, .docs = 1};
    if (x->argc == 2) {
        reply_map(x->out, l.proto, (long)lua_host_commands(lua, NULL, NULL));
        l.out = x->out;
        lua_host_commands(lua, list_cmd, &l);
        return;
    }
    /* Count the known names first: the map header comes before them. */
    for (int i = 2; i < x->argc; i++)
        list_named(lua, &x->argv[i], &l);
    reply_map(x->out, l.proto, (long)l.count);
    l.out = x->out;
    for (int i = 2; i < x->argc; i++)
        list_named(lua, &x->argv[i], &l);
}

/* COMMAND [COUNT | DOCS [name ...] | INFO [name ...]]: dispatch() has
 * checked the subcommand against the registry. */
static void cmd_command(struct cmd_ctx *x)
{
    struct lua_host *lua = x->c->srv->lua;
    struct cmd_list l = {.out = x->out, .proto = x->c->resp};
    if (x->argc >= 2 && arg_is(&x->argv[1], "COUNT")) {
        reply_int(x->out, (long long)lua_host_commands(lua, NULL, NULL));
    } else if (x->argc >= 2 && arg_is(&x->argv[1], "DOCS")) {
        cmd_docs(x);
    } else if (x->argc >= 3 && arg_is(&x->argv[1], "INFO")) {
        reply_array(x->out, x->argc - 2);
        for (int i = 2; i < x->argc; i++)
            if (!list_named(lua, &x->argv[i], &l))
                reply_null(x->out, x->c->resp);
    } else {
        /* COMMAND, and COMMAND INFO without names (Redis 7): every
         * command. */
        reply_array(x->out, (long)lua_host_commands(lua, NULL, NULL));
        lua_host_commands(lua, list_cmd, &l);
    }
}

static const struct ccmd ccmds[] = {
    {"ping", cmd_ping},
    {"echo", cmd_echo},
    {"quit", cmd_quit},
    {"select", cmd_select},
    {"auth", cmd_auth},
    {"hello", cmd_hello},
    {"reset", cmd_reset},
    {"client", cmd_client},
    {"info", cmd_info},
    {"command", cmd_command},
    {"time", cmd_time},
    {"memory", cmd_memory},
    {"wait", cmd_wait},
    {"waitaof", cmd_waitaof},
    {"readonly", cmd_cluster_disabled},
    {"readwrite", cmd_cluster_disabled},
};
#define NCCMDS (sizeof ccmds / sizeof ccmds[0])
static struct cshape shapes[NCCMDS];

/* The index in ccmds of the command name[0..len) names (any case), or -1. */
static int ccmd_find(const char *name, size_t len)
{
    for (size_t i = 0; i < NCCMDS; i++)
        if (bytes_are(name, len, ccmds[i].name))
            return (int)i;
    return -1;
}

static int has_flag(const char *flags, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = flags; (p = strstr(p, flag)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0))
            return 1;
    return 0;
}

struct shape_load {
    char *err;
    size_t errlen;
};

static void load_shape(void *arg, const struct lua_host_cmd *cmd)
{
    struct shape_load *sl = arg;
    if (!cmd->in_c)
        return;
    int i = ccmd_find(cmd->name, strlen(cmd->name));
    if (i < 0) {
        snprintf(sl->err, sl->errlen,
                 "the command registry has '%s' answered in C, and the "
                 "gateway has no such command",
                 cmd->name);
        return;
    }
    struct cshape *sh = &shapes[i];
    sh->loaded = 1;
    sh->arity = cmd->arity;
    sh->max_args = cmd->max_args;
    sh->subscribed_ok = cmd->subscribed_ok;
    sh->noauth = has_flag(cmd->flags, "noauth");
    sh->nsubs = cmd->nsubs;
    for (int k = 0; k < cmd->nsubs; k++) {
        snprintf(sh->subs[k].name, sizeof sh->subs[k].name, "%s",
                 cmd->subs[k].name);
        sh->subs[k].arity = cmd->subs[k].arity;
    }
}

int dispatch_init(struct lua_host *lua, char *err, size_t errlen)
{
    struct shape_load sl = {err, errlen};
    err[0] = 0;
    lua_host_commands(lua, load_shape, &sl);
    for (size_t i = 0; i < NCCMDS && !err[0]; i++)
        if (!shapes[i].loaded)
            snprintf(err, errlen,
                     "the gateway answers '%s', and the command registry "
                     "has no entry for it answered in C",
                     ccmds[i].name);
    return err[0] ? ZR_EINVAL : 0;
}

static int arity_ok(int arity, int max_args, int n)
{
    if (arity > 0)
        return n == arity;
    return n >= -arity && (max_args == 0 || n <= max_args);
}

/* MEMORY USAGE is the one subcommand of a C command that Lua answers (it
 * reads a key: scripts/cmd_server.lua; its shape is in the registry's
 * MEMORY entry like PURGE's). */
static int answered_in_lua(const struct ccmd *cc, const struct proto_req *pr)
{
    return pr->argc >= 2 && strcmp(cc->name, "memory") == 0 &&
           arg_is(&pr->argv[1], "USAGE");
}

/* Whether pr has the shape of sh: its arity and, for a command with
 * subcommands, a known subcommand and that one's arity. */
static int shape_ok(const struct cshape *sh, const struct proto_req *pr)
{
    if (!arity_ok(sh->arity, sh->max_args, pr->argc))
        return 0;
    if (sh->nsubs == 0 || pr->argc < 2)
        return 1; /* COMMAND alone is the command itself */
    for (int k = 0; k < sh->nsubs; k++)
        if (arg_is(&pr->argv[1], sh->subs[k].name))
            return arity_ok(sh->subs[k].arity, 0, pr->argc);
    return 0;
}

void dispatch(struct conn *c, struct req *r, const struct proto_req *pr)
{
    const struct proto_arg *name = &pr->argv[0];
    struct cmd_ctx x = {c, r, pr->argc, pr->argv, &r->reply};

    /* Redis's guard against cross-protocol scripting: an HTTP request
     * smuggled to the port is not a client. */
    if (arg_is(name, "POST") || arg_is(name, "Host:")) {
        log_warn("client.security_attack",
                 "id=%llu addr=%s msg=\"HTTP request on the Redis port\"",
                 (unsigned long long)c->id, c->addr);
        r->done = 1;
        conn_close(c, "http");
        return;
    }

    int ci = ccmd_find(name->ptr, name->len);
    const struct ccmd *cc = ci >= 0 ? &ccmds[ci] : NULL;
    const struct cshape *sh = ci >= 0 ? &shapes[ci] : NULL;
    c->last_cmd = cc ? cc->name : "lua";
    /* Metrics label: C commands are a fixed table, Lua's were registered at
     * start; any other name counts as "unknown". */
    r->metric_cmd = cc ? metrics_cmd_register(cc->name, strlen(cc->name))
                       : metrics_cmd_find(name->ptr, name->len);
    if (!c->authed && !(sh && sh->noauth)) {
        reply_error(&r->reply, "NOAUTH Authentication required.");
        r->done = 1;
        return;
    }
    if (cc && shape_ok(sh, pr) && !answered_in_lua(cc, pr) &&
        (sh->subscribed_ok || !conn_subscribed_resp2(c))) {
        cc->fn(&x);
        if (!r->c_pending)
            r->done = 1;
        return;
    }
    /* Lua answers the rest, and the refusal of a C command too (a wrong
     * arity or subcommand, not while subscribed): the registry has every
     * refusal's text. */
    if (!cc && c->srv->stopping) {
        reply_error(&r->reply, "TRYAGAIN zkresp is shutting down");
        r->done = 1;
        return;
    }

    const char *sv[16] = {0};
    size_t lv[16] = {0};
    const char **argv = sv;
    size_t *lens = lv;
    if (pr->argc > 16) {
        argv = malloc(sizeof(char *) * (size_t)pr->argc);
        lens = malloc(sizeof(size_t) * (size_t)pr->argc);
        if (!argv || !lens) {
            free(argv);
            free(lens);
            reply_error(&r->reply, "ERR out of memory");
            r->done = 1;
            return;
        }
    }
    for (int i = 0; i < pr->argc; i++) {
        argv[i] = pr->argv[i].ptr;
        lens[i] = pr->argv[i].len;
    }
    r->task.proto = c->resp;
    r->task.flags = conn_subscribed_resp2(c) ? LUA_TASK_SUBSCRIBED : 0;
    r->task.db = c->db;
    lua_host_run(c->srv->lua, &r->task, pr->argc, argv, lens);
    if (argv != sv) {
        free(argv);
        free(lens);
    }
}
