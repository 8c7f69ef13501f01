/*
 * main.c — zkresp: wires configuration, the ZooKeeper bridge, the Lua host
 * and the RESP server onto one libuv loop, and handles signals.  The
 * composition root: it lives on the gateway side because it wires both
 * layers (gateway/ may include sidecar/ headers, never the reverse).
 *
 *   SIGTERM/SIGINT: stop accepting; refuse new commands; let in-flight work
 *   finish within --shutdown-grace; close the ZooKeeper session so that our
 *   ephemeral keys vanish at once; exit 0.  Meanwhile /readyz answers 503
 *   "shutting down" and /healthz keeps answering 200.
 */
#include "config.h"
#include "dispatch.h"
#include "errors.h"
#include "http.h"
#include "log.h"
#include "lua_host.h"
#include "metrics.h"
#include "server.h"
#include "zk.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static struct {
    uv_loop_t *loop;
    struct config cfg;
    struct zk *zk;
    struct lua_host *lua;
    struct server srv;
    struct http http; /* --metrics-port; closed last, after the drain */
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t drain;
    double shutdown_deadline;
    int shutting_down;
    int exit_status; /* 2 after a fatal start-up check */
} app;

static void on_zk_event(const char *event, int64_t session_id, void *arg)
{
    (void)arg;
    metrics_session_event(event, session_id);
    if (app.lua)
        lua_host_session_event(app.lua, event, (long long)session_id);
}

static void on_zk_watch(const char *event, const char *path, void *arg)
{
    (void)arg;
    if (app.lua)
        lua_host_watch_event(app.lua, event, path);
}

/* /metrics' client gauges, read from the server (metrics_sources). */
static void metrics_clients(void *arg, struct metrics_clients *out)
{
    const struct server *s = arg;
    out->connected = s->nconns;
    out->blocked = server_blocked_clients(s);
    out->connections_received = s->stats.connections_received;
    out->rejected_connections = s->stats.rejected_connections;
    out->protocol_errors = s->stats.protocol_errors;
    out->replies_past_lease = s->stats.replies_past_lease;
    out->net_input_bytes = s->stats.net_input_bytes;
    out->net_output_bytes = s->stats.net_output_bytes;
}

static void register_command(void *arg, const struct lua_host_cmd *cmd)
{
    (void)arg;
    metrics_cmd_register(cmd->name, strlen(cmd->name));
}

/* Once: a second signal may arrive after the grace period ended it (Ctrl-C
 * reaches the whole process group, and `make run` forwards a TERM too). */
static int finished;

static void finish_shutdown(void)
{
    if (finished)
        return;
    finished = 1;
    uv_timer_stop(&app.drain);
    server_close(&app.srv);
    zk_close(app.zk);
    http_close(&app.http);
    log_info("shutdown.done", "");
    uv_stop(app.loop);
}

/* The grace period: until no command runs and, while the session is
 * connected, no ZooKeeper request of background work (a policy
 * notification's write, pub/sub bookkeeping) is in flight either -- the
 * library never completes a request still in flight at zookeeper_close, and
 * that work would be lost. */
static void on_drain(uv_timer_t *t)
{
    (void)t;
    size_t left = lua_host_running(app.lua);
    size_t zk_left = zk_connected(app.zk) ? zk_inflight(app.zk) : 0;
    if ((left == 0 && zk_left == 0) || zk_now() >= app.shutdown_deadline) {
        if (left)
            log_warn("shutdown.grace_expired", "commands_abandoned=%zu", left);
        finish_shutdown();
    }
}

static void on_terminate(uv_signal_t *h, int signum)
{
    (void)h;
    if (finished)
        return;
    if (app.shutting_down) {
        log_warn("shutdown.forced", "signal=%d", signum);
        finish_shutdown();
        return;
    }
    app.shutting_down = 1;
    metrics_set_shutting_down();
    log_info("shutdown.begin", "signal=%d inflight=%zu grace_ms=%d", signum,
             lua_host_running(app.lua), app.cfg.shutdown_grace);
    server_stop_accepting(&app.srv);
    lua_host_shutdown(app.lua);
    app.shutdown_deadline = zk_now() + app.cfg.shutdown_grace;
    uv_timer_start(&app.drain, on_drain, 0, 10);
}

/* A start-up check failed (lua_host_set_fatal): stop as on SIGTERM, with
 * exit status 2. */
static void on_fatal(void *arg, const char *reason)
{
    (void)arg;
    char q[512];
    log_error("zkresp.fatal", "reason=%s",
              log_quote(reason, strlen(reason), q, sizeof q));
    app.exit_status = 2;
    on_terminate(NULL, 0);
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)h;
    (void)signum;
    if (finished)
        return;
    log_info("policy.reload_requested", "");
    lua_host_reload(app.lua);
}

int main(int argc, char **argv)
{
    char err[512] = "";
    int rc = config_load(&app.cfg, argc, argv, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    log_set_level((enum log_level)app.cfg.log_level);
    signal(SIGPIPE, SIG_IGN);

    app.loop = uv_default_loop();
    app.zk = zk_create(app.loop, &app.cfg, on_zk_event, NULL, err, sizeof err);
    if (!app.zk) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    app.lua = lua_host_create(&app.cfg, app.zk, err, sizeof err);
    if (!app.lua) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    zk_set_watch_cb(app.zk, on_zk_watch, NULL);
    lua_host_set_fatal(app.lua, on_fatal, NULL);
    if (server_init(&app.srv, app.loop, &app.cfg, app.zk, app.lua, err,
                    sizeof err) < 0) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    /* Commands are counted by name: the command registry is the closed set
     * of names. */
    lua_host_commands(app.lua, register_command, NULL);
    if (dispatch_init(app.lua, err, sizeof err) < 0) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    metrics_set_sources(&(struct metrics_sources){
        .clients = metrics_clients,
        .clients_arg = &app.srv,
        .zk = app.zk,
        .lua = app.lua,
    });
    if (app.cfg.metrics_port > 0 &&
        http_init(&app.http, app.loop, app.cfg.metrics_bind,
                  app.cfg.metrics_port, err, sizeof err) < 0) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    /* Only now, with the policy loaded and the port bound, reach out to
     * ZooKeeper: a bad start-up fails before any session exists. */
    if (zk_start(app.zk, err, sizeof err) < 0) {
        fprintf(stderr, "zkresp: %s\n", err);
        return 2;
    }
    uv_signal_init(app.loop, &app.sigterm);
    uv_signal_start(&app.sigterm, on_terminate, SIGTERM);
    uv_signal_init(app.loop, &app.sigint);
    uv_signal_start(&app.sigint, on_terminate, SIGINT);
    uv_signal_init(app.loop, &app.sighup);
    uv_signal_start(&app.sighup, on_hup, SIGHUP);
    uv_timer_init(app.loop, &app.drain);

    log_info("zkresp.started", "zk=%s root=%s port=%d scripts=%s policy=%s",
             app.cfg.zk, app.cfg.root, app.srv.tcp_port, app.cfg.scripts,
             app.cfg.policy);
    uv_run(app.loop, UV_RUN_DEFAULT);

    /* Let closes and the last completions run, then leave.  The signal
     * watchers stay: a TERM, INT or HUP arriving now is ignored (`finished`)
     * instead of killing the process before its session is closed. */
    lua_host_stop(app.lua);
    zk_free(app.zk);
    uv_run(app.loop, UV_RUN_NOWAIT);
    log_info("zkresp.exit", "status=%d", app.exit_status);
    return app.exit_status;
}
