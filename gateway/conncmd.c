/*
 * conncmd.c — the connection commands, answered without ZooKeeper: PING,
 * ECHO, QUIT, SELECT, AUTH, HELLO, RESET and CLIENT, and the argument
 * helpers of every C command (ccmd.h).  dispatch() runs each only for a
 * request of its registry shape, so each reads only what that guarantees.
 *
 * Replies and errors follow Redis 7 word for word (COMPAT.md).
 */
#include "ccmd.h"

#include "config.h"
#include "conn.h"
#include "lua_host.h"
#include "reply.h"
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Whether p[0..n) is s, in any case. */
int bytes_are(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && strncasecmp(p, s, n) == 0;
}

int arg_is(const struct proto_arg *a, const char *s)
{
    return bytes_are(a->ptr, a->len, s);
}

/* Parses a whole argument as a signed 64-bit integer, as Redis's string2ll. */
int arg_ll(const struct proto_arg *a, long long *out)
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
    if (errno || end != tmp + a->len) /* (a NUL inside stops strtoll) */
        return -1;
    *out = v;
    return 0;
}

void err_not_int(struct buf *out)
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

void cmd_ping(struct cmd_ctx *x)
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

void cmd_echo(struct cmd_ctx *x)
{
    reply_bulk(x->out, x->argv[1].ptr, x->argv[1].len);
}

void cmd_quit(struct cmd_ctx *x)
{
    reply_status(x->out, "OK");
    x->r->close_after = 1;
}

void cmd_select(struct cmd_ctx *x)
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

void cmd_auth(struct cmd_ctx *x)
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

void cmd_hello(struct cmd_ctx *x)
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

void cmd_reset(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    /* Subscriptions, a MULTI queue and watched keys go (RESET leaves
     * MULTI). */
    if (conn_lua_state(c)) {
        lua_host_client_gone(c->srv->lua, c->id, 0);
        c->nsub = c->npsub = c->nssub = 0;
        c->multi = 0;
        c->watched = 0;
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

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* CLIENT LIST [TYPE type] [ID id ...] */
static void client_list(struct cmd_ctx *x)
{
    struct conn *c = x->c;
    int type = -1;
    uint64_t *ids = NULL; /* the IDs asked, sorted */
    size_t nids = 0;
    if (x->argc >= 4 && arg_is(&x->argv[2], "TYPE") && x->argc == 4) {
        if ((type = parse_client_type(x->out, &x->argv[3])) < 0)
            return;
    } else if (x->argc >= 4 && arg_is(&x->argv[2], "ID")) {
        if ((ids = malloc(sizeof *ids * (size_t)(x->argc - 3))) == NULL) {
            reply_error(x->out, "ERR out of memory");
            return;
        }
        for (int i = 3; i < x->argc; i++) {
            long long id;
            if (arg_ll(&x->argv[i], &id) < 0) {
                reply_error(x->out, "ERR Invalid client ID");
                free(ids);
                return;
            }
            ids[nids++] = (uint64_t)id;
        }
        qsort(ids, nids, sizeof *ids, cmp_u64);
    } else if (x->argc != 2) {
        reply_error(x->out, "ERR syntax error");
        return;
    }
    struct buf b;
    buf_init(&b);
    for (struct conn *o = c->srv->conns; o; o = o->next) {
        if (o->closing || (type >= 0 && client_type(o) != type))
            continue;
        if (ids && !bsearch(&o->id, ids, nids, sizeof *ids, cmp_u64))
            continue;
        conn_describe(o, &b);
    }
    free(ids);
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

/* CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 when a command of client id was
 * blocked (LOCK.ACQUIRE / LOCK.CONVERT waiting with WAIT), which then ends
 * as its WAIT running out would, or with -UNBLOCKED; else 0.  Redis checks
 * the reason before the id. */
static void client_unblock(struct cmd_ctx *x)
{
    int how = LUA_UNBLOCK_TIMEOUT;
    if (x->argc > 4) {
        /* (Redis names the subcommand as it was typed) */
        const struct proto_arg *sub = &x->argv[1];
        reply_errorf(x->out,
                     "ERR unknown subcommand or wrong number of arguments "
                     "for '%.*s'. Try CLIENT HELP.",
                     (int)(sub->len > 128 ? 128 : sub->len), sub->ptr);
        return;
    }
    if (x->argc == 4) {
        if (arg_is(&x->argv[3], "ERROR")) {
            how = LUA_UNBLOCK_ERROR;
        } else if (!arg_is(&x->argv[3], "TIMEOUT")) {
            reply_error(x->out,
                        "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
            return;
        }
    }
    long long id;
    if (arg_ll(&x->argv[2], &id) < 0) {
        reply_error(x->out, "ERR value is not an integer or out of range");
        return;
    }
    struct conn *o = id > 0 ? server_conn_by_id(x->c->srv, (uint64_t)id) : NULL;
    struct req *r = o && !o->closing ? conn_blocked(o) : NULL;
    reply_int(x->out, r && lua_host_unblock(o->srv->lua, &r->task, how));
}

/* CLIENT <subcommand> ...: dispatch() has checked the subcommand's arity
 * (client_subs), so each branch reads only what that arity guarantees. */
void cmd_client(struct cmd_ctx *x)
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
    } else if (arg_is(sub, "UNBLOCK")) {
        client_unblock(x);
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
