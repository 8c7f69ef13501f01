/*
 * dispatch.c — the commands answered in C (the connection commands are in
 * conncmd.c), and the routing of everything else to Lua.
 *
 * Replies and errors follow Redis 7 word for word (COMPAT.md).
 */
#include "dispatch.h"

#include "ccmd.h"
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
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

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
    INFO_CPU = 1 << 9,
    INFO_CLUSTER = 1 << 10,
    INFO_MODULES = 1 << 11,
    INFO_ERRORSTATS = 1 << 12,
    INFO_COMMANDSTATS = 1 << 13,
    /* INFO, INFO default: all but commandstats, as Redis's */
    INFO_DEFAULT = (1 << 13) - 1,
    INFO_ALL = (1 << 14) - 1,
};

static const char *const info_names[] = {
    "server",   "clients",   "persistence", "stats",        "replication",
    "keyspace", "zookeeper", "policy",      "memory",       "cpu",
    "cluster",  "modules",   "errorstats",  "commandstats",
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
        return INFO_DEFAULT;
    unsigned m = 0;
    for (int i = 1; i < x->argc; i++) {
        if (arg_is(&x->argv[i], "all") || arg_is(&x->argv[i], "everything"))
            m |= INFO_ALL;
        if (arg_is(&x->argv[i], "default"))
            m |= INFO_DEFAULT;
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

static double tv_seconds(struct timeval tv)
{
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* One line of INFO commandstats, in Redis's form. */
static void info_cmdstat(void *arg, const char *name, uint64_t calls,
                         uint64_t failed, double usec)
{
    buf_printf(arg,
               "cmdstat_%s:calls=%llu,usec=%llu,usec_per_call=%.2f,"
               "rejected_calls=0,failed_calls=%llu\r\n",
               name, (unsigned long long)calls, (unsigned long long)usec,
               calls ? usec / (double)calls : 0.0, (unsigned long long)failed);
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
    if (sections & INFO_SERVER) {
        char inst[LUA_HOST_INSTANCE_HEX] = "";
        if (s->lua)
            lua_host_instance_hex(s->lua, inst);
        buf_printf(&b,
                   "# Server\r\nredis_version:%s\r\nzkresp_version:%s\r\n"
                   "redis_mode:standalone\r\nos:Linux\r\narch_bits:%d\r\n"
                   "multiplexing_api:epoll\r\nprocess_id:%d\r\nrun_id:%s\r\n"
                   "zkresp_instance:%s\r\n"
                   "tcp_port:%d\r\nuptime_in_seconds:%lld\r\n"
                   "uptime_in_days:%lld\r\nexecutable:zkresp\r\n\r\n",
                   REDIS_COMPAT_VERSION, ZKRESP_VERSION,
                   (int)(sizeof(void *) * 8), (int)getpid(), s->run_id, inst,
                   s->tcp_port, up, up / 86400);
    }
    if (sections & INFO_CLIENTS)
        buf_printf(&b,
                   "# Clients\r\nconnected_clients:%zu\r\nmaxclients:%d\r\n"
                   "blocked_clients:%zu\r\n\r\n",
                   s->nconns, s->cfg->maxclients, server_blocked_clients(s));
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
    if (sections & INFO_CPU) {
        struct rusage self, children;
        getrusage(RUSAGE_SELF, &self);
        getrusage(RUSAGE_CHILDREN, &children);
        buf_printf(&b,
                   "# CPU\r\nused_cpu_sys:%.6f\r\nused_cpu_user:%.6f\r\n"
                   "used_cpu_sys_children:%.6f\r\n"
                   "used_cpu_user_children:%.6f\r\n\r\n",
                   tv_seconds(self.ru_stime), tv_seconds(self.ru_utime),
                   tv_seconds(children.ru_stime),
                   tv_seconds(children.ru_utime));
    }
    if (sections & INFO_MODULES)
        buf_printf(&b, "# Modules\r\n\r\n");
    if (sections & INFO_ERRORSTATS)
        buf_printf(&b, "# Errorstats\r\n\r\n");
    if (sections & INFO_CLUSTER)
        buf_printf(&b, "# Cluster\r\ncluster_enabled:0\r\n\r\n");
    if (sections & INFO_COMMANDSTATS) {
        buf_printf(&b, "# Commandstats\r\n");
        metrics_cmd_each(info_cmdstat, &b);
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

/* A visit of the command registry for COMMAND (every entry, or one name's).
 * Counts what it visits and, with out, writes each one's COMMAND INFO
 * entry (or, with docs, its COMMAND DOCS pair). */
struct cmd_list {
    struct buf *out;
    int proto;
    int docs;
    size_t count;
};

static void list_cmd(void *arg, const struct lua_host_cmd *cmd)
{
    struct cmd_list *l = arg;
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
    return lua_host_command(lua, name, list_cmd, l);
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

/* The subcommands of C commands that Lua answers (scripts/cmd_server.lua;
 * their shapes are in the registry's entries beside the C ones): MEMORY
 * USAGE, which reads a key, and HELP, whose text is kept with the
 * registry's. */
static int answered_in_lua(const struct ccmd *cc, const struct cshape *sh,
                           const struct proto_req *pr)
{
    if (pr->argc < 2 || sh->nsubs == 0) /* ECHO HELP is ECHO's */
        return 0;
    return arg_is(&pr->argv[1], "HELP") ||
           (strcmp(cc->name, "memory") == 0 && arg_is(&pr->argv[1], "USAGE"));
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

/* The metrics label of a command Lua answers: the built-in ones were
 * registered at start; one a policy added later (SIGHUP, POLICY RELOAD) is
 * registered the first time it is asked; any other name counts as
 * "unknown". */
static int lua_metric(struct lua_host *lua, const struct proto_arg *name)
{
    int idx = metrics_cmd_find(name->ptr, name->len);
    struct cmd_list l = {0}; /* no output: only whether it is known */
    if (idx > 0 || !list_named(lua, name, &l))
        return idx;
    return metrics_cmd_register(name->ptr, name->len); /* lowercases */
}

/* MULTI's state (scripts/cmd_multi.lua), changed here in dispatch order,
 * as pipelined commands run concurrently: a well-formed MULTI outside one
 * enters it (LUA_TASK_MULTI_BEGIN: Lua opens the client's queue); inside,
 * every command but QUIT and a well-formed RESET goes to Lua to be queued
 * (LUA_TASK_MULTI), C commands too (Lua refuses them), and EXEC or a
 * well-formed DISCARD leaves it (Lua runs or drops the queue).  Once
 * SIGTERM came, a MULTI does not enter it and an EXEC drops the queue:
 * both are then refused as every new key command is (-TRYAGAIN).  Returns
 * the task flags; 0: the command is dispatched as outside MULTI. */
static int multi_step(struct conn *c, const struct ccmd *cc,
                      const struct cshape *sh, const struct proto_req *pr)
{
    const struct proto_arg *name = &pr->argv[0];
    if (!c->multi) {
        if (pr->argc == 1 && arg_is(name, "MULTI") &&
            !conn_subscribed_resp2(c) && !c->srv->stopping) {
            c->multi = 1;
            return LUA_TASK_MULTI_BEGIN;
        }
        return 0;
    }
    if (cc && (strcmp(cc->name, "quit") == 0 ||
               (strcmp(cc->name, "reset") == 0 && shape_ok(sh, pr))))
        return 0;
    if (arg_is(name, "EXEC") && c->srv->stopping) {
        c->multi = 0;
        lua_host_client_gone(c->srv->lua, c->id, 0);
        return 0;
    }
    /* (an EXEC of the wrong arity ends the transaction too, as Redis's
     * execCommandAbort) */
    if (arg_is(name, "EXEC") || (pr->argc == 1 && arg_is(name, "DISCARD")))
        c->multi = 0;
    return LUA_TASK_MULTI;
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
    r->metric_cmd = cc ? metrics_cmd_register(cc->name, strlen(cc->name))
                       : lua_metric(c->srv->lua, name);
    if (!c->authed && !(sh && sh->noauth)) {
        /* (EXEC refused is Redis's execCommandAbort, its arity first) */
        if (arg_is(name, "EXEC"))
            reply_error(&r->reply,
                        pr->argc == 1
                            ? "EXECABORT Transaction discarded because of: "
                              "NOAUTH Authentication required."
                            : "EXECABORT Transaction discarded because of: "
                              "wrong number of arguments for 'exec' command");
        else
            reply_error(&r->reply, "NOAUTH Authentication required.");
        r->done = 1;
        return;
    }
    int mflags = multi_step(c, cc, sh, pr);
    if (!mflags && arg_is(name, "WATCH"))
        c->watched = 1; /* (told to Lua when the client goes) */
    if (!mflags && cc && shape_ok(sh, pr) && !answered_in_lua(cc, sh, pr) &&
        (sh->subscribed_ok || !conn_subscribed_resp2(c))) {
        cc->fn(&x);
        if (!r->c_pending)
            r->done = 1;
        return;
    }
    /* Lua answers the rest, and the refusal of a C command too (a wrong
     * arity or subcommand, not while subscribed): the registry has every
     * refusal's text. */
    if (!mflags && !cc && c->srv->stopping) {
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
    r->task.flags =
        (conn_subscribed_resp2(c) ? LUA_TASK_SUBSCRIBED : 0) | mflags;
    r->task.db = c->db;
    lua_host_run(c->srv->lua, &r->task, pr->argc, argv, lens);
    if (argv != sv) {
        free(argv);
        free(lens);
    }
}
