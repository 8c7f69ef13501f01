/*
 * metrics.c — command counters and latency histograms, and the Prometheus
 * text exposition of them and of the gauges their owners keep.
 *
 *   conn.c: read ──► dispatch ──► ... ──► reply ready ──► metrics_cmd_done()
 *   http.c: GET /metrics ──► metrics_render() ──► reads zk, lua host, and
 *                                                  the clients callback
 */
#include "metrics.h"

#include "buf.h"
#include "lua_host.h"
#include "zk.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define MAX_CMDS 512
#define NAME_MAX_LEN 32
#define INDEX_SLOTS 1024 /* open addressing, at most half full */

/* Upper bounds in seconds, 50 us .. 5 s; +Inf is implicit. */
static const double bucket_le[METRICS_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,
};

struct cmd_stat {
    char name[NAME_MAX_LEN + 1];
    uint64_t ok, err;
    struct metrics_histo time;
};

static struct {
    struct cmd_stat cmds[MAX_CMDS]; /* [0] is "unknown" */
    int ncmds;
    uint16_t index[INDEX_SLOTS]; /* a name's hash -> its cmds[] index + 1 */
    struct metrics_sources src;
    int64_t session_id;
    double session_started; /* wall clock, seconds */
    int shutting_down;
} m = {.cmds = {{.name = "unknown"}}, .ncmds = 1};

static double wall_seconds(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

void metrics_set_sources(const struct metrics_sources *src)
{
    m.src = *src;
}

/* Command names are ASCII; every command looks its name up here. */
static char lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

static int name_eq(const char *known, const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (known[i] == 0 || known[i] != lower(name[i]))
            return 0;
    return known[len] == 0;
}

/* FNV-1a of the lowercased name: its first index slot. */
static size_t name_slot(const char *name, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)lower(name[i]);
        h *= 16777619u;
    }
    return h & (INDEX_SLOTS - 1);
}

int metrics_cmd_find(const char *name, size_t len)
{
    if (len == 0 || len > NAME_MAX_LEN)
        return 0;
    for (size_t s = name_slot(name, len); m.index[s];
         s = (s + 1) & (INDEX_SLOTS - 1))
        if (name_eq(m.cmds[m.index[s] - 1].name, name, len))
            return m.index[s] - 1;
    return 0;
}

int metrics_cmd_register(const char *name, size_t len)
{
    int i = metrics_cmd_find(name, len);
    if (i > 0 || len == 0 || len > NAME_MAX_LEN || m.ncmds == MAX_CMDS)
        return i;
    /* Label values are printed unescaped: keep them to [a-z0-9_.|-]. */
    for (size_t k = 0; k < len; k++) {
        char ch = lower(name[k]);
        if (!(islower((unsigned char)ch) || isdigit((unsigned char)ch) ||
              ch == '_' || ch == '|' || ch == '-' || ch == '.'))
            return 0;
        m.cmds[m.ncmds].name[k] = ch;
    }
    m.cmds[m.ncmds].name[len] = 0;
    size_t s = name_slot(name, len);
    while (m.index[s])
        s = (s + 1) & (INDEX_SLOTS - 1);
    m.index[s] = (uint16_t)(m.ncmds + 1);
    return m.ncmds++;
}

void metrics_histo_add(struct metrics_histo *h, double seconds)
{
    h->count++;
    h->sum += seconds;
    for (int b = 0; b < METRICS_BUCKETS; b++)
        if (seconds <= bucket_le[b]) {
            h->buckets[b]++;
            break;
        }
}

void metrics_cmd_each(void (*cb)(void *arg, const char *name, uint64_t calls,
                                 uint64_t failed, double usec),
                      void *arg)
{
    for (int i = 1; i < m.ncmds; i++)
        if (m.cmds[i].ok + m.cmds[i].err > 0)
            cb(arg, m.cmds[i].name, m.cmds[i].ok + m.cmds[i].err, m.cmds[i].err,
               m.cmds[i].time.sum * 1e6);
}

void metrics_cmd_done(int idx, int error, uint64_t ns)
{
    if (idx < 0 || idx >= m.ncmds)
        return;
    struct cmd_stat *c = &m.cmds[idx];
    if (error)
        c->err++;
    else
        c->ok++;
    metrics_histo_add(&c->time, (double)ns / 1e9);
}

void metrics_session_event(const char *event, int64_t session_id)
{
    if (session_id != 0 && session_id != m.session_id &&
        (strcmp(event, "connected") == 0 || strcmp(event, "new") == 0)) {
        m.session_id = session_id;
        m.session_started = wall_seconds();
    }
}

void metrics_set_shutting_down(void)
{
    m.shutting_down = 1;
}

int metrics_ready(char *why, size_t cap)
{
    if (m.shutting_down) {
        snprintf(why, cap, "shutting down");
        return 0;
    }
    if (!m.src.lua) {
        snprintf(why, cap, "policy not loaded");
        return 0;
    }
    if (m.src.zk && zk_denied(m.src.zk, why, cap))
        return 0;
    if (!m.src.zk || !zk_connected(m.src.zk)) {
        snprintf(why, cap, "zookeeper session %s",
                 m.src.zk ? zk_state_name(m.src.zk) : "not started");
        return 0;
    }
    snprintf(why, cap, "ok");
    return 1;
}

/* --- rendering ----------------------------------------------------------- */

static void head(struct buf *out, const char *name, const char *type,
                 const char *help)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(struct buf *out, const char *name, const char *help, double v)
{
    head(out, name, "gauge", help);
    buf_printf(out, "%s %.17g\n", name, v);
}

static void counter(struct buf *out, const char *name, const char *help,
                    uint64_t v)
{
    head(out, name, "counter", help);
    buf_printf(out, "%s %llu\n", name, (unsigned long long)v);
}

/* The series of histogram h, labelled label="value" (after its head). */
static void histo(struct buf *out, const char *name, const char *label,
                  const char *value, const struct metrics_histo *h)
{
    char sel[128] = "", lv[128] = ""; /* {label="value"}, label="value", */
    if (label) {
        snprintf(sel, sizeof sel, "{%s=\"%s\"}", label, value);
        snprintf(lv, sizeof lv, "%s=\"%s\",", label, value);
    }
    uint64_t cum = 0;
    for (int b = 0; b < METRICS_BUCKETS; b++) {
        cum += h->buckets[b];
        buf_printf(out, "%s_bucket{%sle=\"%g\"} %llu\n", name, lv, bucket_le[b],
                   (unsigned long long)cum);
    }
    buf_printf(out, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, lv,
               (unsigned long long)h->count);
    buf_printf(out, "%s_sum%s %.9f\n", name, sel, h->sum);
    buf_printf(out, "%s_count%s %llu\n", name, sel,
               (unsigned long long)h->count);
}

/* What M.stats() returned, collected before rendering. */
#define MAX_LUA_STATS 32
struct lua_stats {
    int n;
    double owned_keys;
    struct {
        char name[64];
        double v;
    } extra[MAX_LUA_STATS];
};

static void lua_stat_cb(void *arg, const char *name, double v)
{
    struct lua_stats *ls = arg;
    if (strcmp(name, "owned_keys") == 0) {
        ls->owned_keys = v;
        return;
    }
    size_t len = strlen(name);
    if (ls->n == MAX_LUA_STATS || len == 0 || len >= sizeof ls->extra[0].name)
        return;
    for (size_t k = 0; k < len; k++)
        if (!(islower((unsigned char)name[k]) ||
              isdigit((unsigned char)name[k]) || name[k] == '_'))
            return; /* not a valid metric name part: skipped */
    memcpy(ls->extra[ls->n].name, name, len + 1);
    ls->extra[ls->n].v = v;
    ls->n++;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void metrics_render(struct buf *out)
{
    head(out, "zkresp_commands_total", "counter",
         "Commands answered, by command name and result (ok or error).");
    for (int i = 0; i < m.ncmds; i++) {
        const struct cmd_stat *c = &m.cmds[i];
        if (c->ok)
            buf_printf(out,
                       "zkresp_commands_total{command=\"%s\",result=\"ok\"} "
                       "%llu\n",
                       c->name, (unsigned long long)c->ok);
        if (c->err)
            buf_printf(out,
                       "zkresp_commands_total{command=\"%s\",result=\"error\"}"
                       " %llu\n",
                       c->name, (unsigned long long)c->err);
    }

    head(out, "zkresp_command_duration_seconds", "histogram",
         "Time from reading a command to its reply being ready.");
    for (int i = 0; i < m.ncmds; i++)
        if (m.cmds[i].time.count > 0)
            histo(out, "zkresp_command_duration_seconds", "command",
                  m.cmds[i].name, &m.cmds[i].time);

    struct zk *z = m.src.zk;
    int connected = z && zk_connected(z);
    gauge(out, "zkresp_zookeeper_connected",
          "1 while the ZooKeeper session is connected.", connected);
    gauge(out, "zkresp_zookeeper_session_age_seconds",
          "Age of the current ZooKeeper session (0: none).",
          z && m.session_id && zk_session_id(z) == m.session_id
              ? wall_seconds() - m.session_started
              : 0);
    counter(out, "zkresp_zookeeper_sessions_total",
            "ZooKeeper sessions started since the daemon started.",
            z ? zk_sessions_started(z) : 0);
    gauge(out, "zkresp_zookeeper_inflight_requests",
          "ZooKeeper operations submitted and not completed.",
          z ? (double)zk_inflight(z) : 0);
    struct zk_group_stats gs = {0};
    if (z)
        gs = zk_group_stats(z);
    counter(out, "zkresp_zookeeper_groups_total",
            "Multis sent carrying the writes of several commands (group "
            "commit).",
            gs.groups);
    counter(out, "zkresp_zookeeper_grouped_requests_total",
            "Writes sent in those multis.", gs.members);
    counter(out, "zkresp_zookeeper_group_resends_total",
            "Grouped writes sent again alone after another write of their "
            "group failed.",
            gs.resent);
    counter(out, "zkresp_zookeeper_disconnects_total",
            "Times the connected ZooKeeper session lost its connection.",
            z ? zk_disconnects(z) : 0);
    counter(out, "zkresp_zookeeper_requests_too_large_total",
            "ZooKeeper requests refused before sending: larger than the "
            "request limit (--zk-max-request).",
            z ? zk_requests_too_large(z) : 0);
    head(out, "zkresp_zookeeper_requests_total", "counter",
         "Requests sent to ZooKeeper, by operation (a group commit's multi "
         "counts as one multi; reads ahead are counted apart).");
    for (int t = 0; t < ZK_OP_TYPES; t++)
        if (t != ZK_OP_CHECK) /* only ever inside a multi */
            buf_printf(out, "zkresp_zookeeper_requests_total{op=\"%s\"} %llu\n",
                       zk_op_name(t),
                       (unsigned long long)(z ? zk_requests_sent(z, t) : 0));
    head(out, "zkresp_zookeeper_request_duration_seconds", "histogram",
         "Time from sending a ZooKeeper request to its answer, by operation "
         "(a group commit's multi is one multi; connection losses not "
         "counted).");
    for (int t = 0; z && t < ZK_OP_TYPES; t++) {
        const struct metrics_histo *h = zk_request_took(z, t);
        if (h && h->count > 0)
            histo(out, "zkresp_zookeeper_request_duration_seconds", "op",
                  zk_op_name(t), h);
    }
    if (z && zk_answer_waited(z)->count > 0) {
        head(out, "zkresp_zookeeper_answer_wait_seconds", "histogram",
             "Time a ZooKeeper answer or watch event waited for the loop "
             "thread, from the client library's completion thread handing "
             "it over (a busy loop shows here).");
        histo(out, "zkresp_zookeeper_answer_wait_seconds", NULL, NULL,
              zk_answer_waited(z));
    }
    uint64_t ahead_sent = 0, ahead_taken = 0;
    if (z)
        zk_ahead_counts(z, &ahead_sent, &ahead_taken);
    counter(out, "zkresp_zookeeper_reads_ahead_total",
            "Reads sent by the ZooKeeper client's thread as a watch event "
            "came, for the waiter it wakes (native locks).",
            ahead_sent);
    counter(out, "zkresp_zookeeper_reads_ahead_taken_total",
            "Reads ahead that a woken waiter took instead of reading.",
            ahead_taken);
    gauge(out, "zkresp_zookeeper_max_request_bytes",
          "The largest ZooKeeper request sent (--zk-max-request, or less "
          "once ZooKeeper dropped the connection over larger ones).",
          z ? (double)zk_max_request(z) : 0);

    struct lua_stats ls = {0};
    if (m.src.lua)
        lua_host_stats(m.src.lua, lua_stat_cb, &ls);
    gauge(out, "zkresp_owned_keys",
          "Keys held by this sidecar's ZooKeeper session (M.stats).",
          ls.owned_keys);
    for (int i = 0; i < ls.n; i++) {
        char name[96];
        snprintf(name, sizeof name, "zkresp_lua_%s", ls.extra[i].name);
        if (ends_with(name, "_total")) {
            head(out, name, "counter", "Reported by the Lua layer (M.stats).");
            buf_printf(out, "%s %.17g\n", name, ls.extra[i].v);
        } else {
            gauge(out, name, "Reported by the Lua layer (M.stats).",
                  ls.extra[i].v);
        }
    }
    gauge(out, "zkresp_running_commands", "Commands running in the Lua host.",
          m.src.lua ? (double)lua_host_running(m.src.lua) : 0);

    struct metrics_clients st = {0};
    if (m.src.clients)
        m.src.clients(m.src.clients_arg, &st);
    gauge(out, "zkresp_connected_clients", "Client connections open.",
          (double)st.connected);
    gauge(out, "zkresp_blocked_clients",
          "Clients blocked in a wait (LOCK.ACQUIRE / LOCK.CONVERT with "
          "WAIT), as INFO's blocked_clients.",
          (double)st.blocked);
    counter(out, "zkresp_connections_total", "Client connections accepted.",
            st.connections_received);
    counter(out, "zkresp_rejected_connections_total",
            "Client connections refused (maxclients, shutting down).",
            st.rejected_connections);
    counter(out, "zkresp_protocol_errors_total",
            "Malformed client requests (the connection is closed).",
            st.protocol_errors);
    counter(out, "zkresp_replies_past_lease_total",
            "Replies resting on ZooKeeper's answers written after the local "
            "lease of their session ended (the process stopped between its "
            "check and the write).",
            st.replies_past_lease);
    counter(out, "zkresp_net_input_bytes_total", "Bytes read from clients.",
            st.net_input_bytes);
    counter(out, "zkresp_net_output_bytes_total", "Bytes written to clients.",
            st.net_output_bytes);
    gauge(out, "zkresp_ready", "1 when /readyz answers 200.",
          metrics_ready((char[64]){0}, 64));
}
