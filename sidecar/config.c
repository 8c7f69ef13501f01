/*
 * config.c — settings: one table, four sources.
 *
 * Each option has a name ("session-timeout"), an environment variable
 * (ZKRESP_SESSION_TIMEOUT), a default and a help line.  Sources are applied
 * in order: defaults, config file ("name value" lines, '#' comments),
 * environment, flags ("--name value" or "--name=value").
 */
#include "config.h"

#include "errors.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum opt_type { OPT_STR, OPT_INT, OPT_SIZE, OPT_LEVEL };

struct opt {
    const char *name;
    enum opt_type type;
    size_t offset;
    const char *def;
    long long min, max;
    const char *help;
};

#define OFF(f) offsetof(struct config, f)

static const struct opt opts[] = {
    {"bind", OPT_STR, OFF(bind), "127.0.0.1", 0, 0,
     "address to listen on (non-loopback needs --requirepass)"},
    {"port", OPT_INT, OFF(port), "6379", 0, 65535, "TCP port (0: any)"},
    {"zk", OPT_STR, OFF(zk), "127.0.0.1:2181", 0, 0,
     "ZooKeeper connect string host:port[,host:port...]"},
    {"root", OPT_STR, OFF(root), "/zkresp", 0, 0,
     "znode under which keys live"},
    {"session-timeout", OPT_INT, OFF(session_timeout), "10000", 100, 3600000,
     "ZooKeeper session timeout to request, ms"},
    {"zk-request-timeout", OPT_INT, OFF(zk_request_timeout), "2000", 1, 3600000,
     "how long a command may wait for ZooKeeper (its own running time "
     "aside; a write on a key held here: the lease), ms"},
    {"zk-auth-file", OPT_STR, OFF(zk_auth_file), "", 0, 0,
     "file holding ZooKeeper digest credentials user:password (read once, "
     "never logged)"},
    {"zk-acl", OPT_STR, OFF(zk_acl), "", 0, 0,
     "ACL of the nodes zkresp creates: creator (only these credentials) or "
     "open (world:anyone); default creator with --zk-auth-file, else open"},
    {"zk-group-max", OPT_INT, OFF(zk_group_max), "128", 0, 1000,
     "most operations of concurrent writes sent as one multi (group commit; "
     "0 or 1: off)"},
    {"zk-max-request", OPT_SIZE, OFF(zk_max_request), "983040", 16384,
     1LL << 30,
     "largest ZooKeeper request sent, bytes (keep it under the servers' "
     "jute.maxbuffer, 1 MiB by default); larger ones are refused or split"},
    {"policy", OPT_STR, OFF(policy), "", 0, 0,
     "policy file (default: <scripts>/policy.lua)"},
    {"scripts", OPT_STR, OFF(scripts), "", 0, 0,
     "directory of the system Lua scripts (default: next to the binary)"},
    {"log-level", OPT_LEVEL, OFF(log_level), "info", 0, 0,
     "debug, info, warn or error"},
    {"requirepass", OPT_STR, OFF(requirepass), "", 0, 0,
     "password clients must AUTH with (empty: none)"},
    {"auth-fail-delay", OPT_INT, OFF(auth_fail_delay), "100", 0, 10000,
     "after a failed AUTH, the connection's next command waits this long, "
     "ms (0: no wait)"},
    {"maxclients", OPT_INT, OFF(maxclients), "10000", 1, 1000000,
     "most simultaneous client connections"},
    {"max-key-len", OPT_SIZE, OFF(max_key_len), "1024", 1, 1 << 20,
     "longest key, bytes"},
    {"max-value-len", OPT_SIZE, OFF(max_value_len), "262144", 1, 900 << 10,
     "largest value, bytes"},
    {"max-args", OPT_INT, OFF(max_args), "4096", 16, 1 << 20,
     "most arguments in one command, its name included (more: protocol "
     "error, connection closed)"},
    {"max-bulk-len", OPT_SIZE, OFF(max_bulk_len), "8388608", 1024, 512LL << 20,
     "longest single argument accepted, bytes"},
    {"max-query-len", OPT_SIZE, OFF(max_query_len), "67108864", 1024, 1LL << 30,
     "query buffer per client, bytes"},
    {"max-output", OPT_SIZE, OFF(max_output), "67108864", 1024, 1LL << 34,
     "unsent reply bytes per client before it is closed"},
    {"max-inflight", OPT_INT, OFF(max_inflight), "1024", 1, 1 << 20,
     "requests in flight per client before reading pauses"},
    {"databases", OPT_INT, OFF(databases), "16", 1, 1 << 20,
     "number of databases SELECT may choose (0 to N-1); database 0 is "
     "<root>/k, database n <root>/db/<n>/k"},
    {"timeout", OPT_INT, OFF(timeout), "0", 0, INT_MAX,
     "close clients idle this many seconds (0: never)"},
    {"stall-timeout", OPT_INT, OFF(stall_timeout), "30000", 100, INT_MAX,
     "close a client whose half-sent request or unread reply makes no "
     "progress for this long, ms"},
    {"shutdown-grace", OPT_INT, OFF(shutdown_grace), "5000", 0, 3600000,
     "on SIGTERM, time to finish in-flight work, ms"},
    {"script-time-limit", OPT_INT, OFF(script_time_limit), "5000", 1, 3600000,
     "EVAL scripts running longer are aborted (nothing written), ms"},
    {"script-memory-limit", OPT_SIZE, OFF(script_memory_limit), "64m", 1 << 20,
     1LL << 34, "EVAL scripts growing the VM by more are aborted, bytes"},
    {"script-cache-max", OPT_INT, OFF(script_cache_max), "1000", 1, 1000000,
     "most scripts in the script cache shared through ZooKeeper"},
    {"max-subscriptions-per-command", OPT_INT,
     OFF(max_subscriptions_per_command), "1024", 1, 1 << 20,
     "most channels or patterns one SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE may "
     "name (more: the command is refused, nothing subscribed)"},
    {"max-subscriptions-per-client", OPT_INT, OFF(max_subscriptions_per_client),
     "4096", 1, 1 << 20,
     "most channels and patterns one client may be subscribed to (more: the "
     "SUBSCRIBE is refused, nothing subscribed)"},
    {"pubsub-gc-delay", OPT_INT, OFF(pubsub_gc_delay), "30000", 100, 3600000,
     "a channel node in ZooKeeper left without subscribers (also by a "
     "sidecar that died) is removed after this long, ms"},
    {"metrics-port", OPT_INT, OFF(metrics_port), "0", 0, 65535,
     "HTTP port for /metrics, /healthz, /readyz (0: off)"},
    {"metrics-bind", OPT_STR, OFF(metrics_bind), "127.0.0.1", 0, 0,
     "address of the metrics port (0.0.0.0 in a pod, for the kubelet)"},
};

#define NOPTS (sizeof opts / sizeof opts[0])

static const struct opt *opt_find(const char *name, size_t n)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].name) == n && strncmp(opts[i].name, name, n) == 0)
            return &opts[i];
    return NULL;
}

static void env_name(const struct opt *o, char *out, size_t cap)
{
    size_t k = (size_t)snprintf(out, cap, "ZKRESP_");
    for (const char *p = o->name; *p && k + 1 < cap; p++)
        out[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[k] = 0;
}

/* Parses an integer with an optional k/m/g suffix (sizes only). */
static int parse_num(const char *s, int sizes, long long *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s)
        return ZR_EINVAL;
    if (sizes && *end) {
        long long mul = 1;
        switch (tolower((unsigned char)*end)) {
        case 'k':
            mul = 1024;
            break;
        case 'm':
            mul = 1024 * 1024;
            break;
        case 'g':
            mul = 1024LL * 1024 * 1024;
            break;
        default:
            return ZR_EINVAL;
        }
        end++;
        if (*end == 'b' || *end == 'B')
            end++;
        if (v > LLONG_MAX / mul)
            return ZR_EINVAL;
        v *= mul;
    }
    if (*end)
        return ZR_EINVAL;
    *out = v;
    return 0;
}

static int opt_set(struct config *cfg, const struct opt *o, const char *val,
                   const char *source, char *err, size_t errlen)
{
    char *field = (char *)cfg + o->offset;
    long long v;
    switch (o->type) {
    case OPT_STR: {
        char **sp = (char **)field;
        free(*sp);
        *sp = strdup(val);
        return *sp ? 0 : ZR_ENOMEM;
    }
    case OPT_LEVEL: {
        int lvl = log_level_parse(val);
        if (lvl < 0) {
            snprintf(err, errlen, "%s: --%s must be debug, info, warn or error",
                     source, o->name);
            return ZR_EINVAL;
        }
        *(int *)field = lvl;
        return 0;
    }
    case OPT_INT:
    case OPT_SIZE:
        if (parse_num(val, o->type == OPT_SIZE, &v) < 0 || v < o->min ||
            v > o->max) {
            snprintf(err, errlen, "%s: --%s must be an integer in [%lld, %lld]",
                     source, o->name, o->min, o->max);
            return ZR_EINVAL;
        }
        if (o->type == OPT_INT)
            *(int *)field = (int)v;
        else
            *(long long *)field = v;
        return 0;
    }
    return ZR_EINVAL;
}

static int load_file(struct config *cfg, const char *path, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path,
                 strerror(errno));
        return ZR_EIO;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == 0 || *p == '#')
            continue;
        char *name = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        size_t nlen = (size_t)(p - name);
        while (isspace((unsigned char)*p))
            p++;
        char *val = p;
        size_t vlen = strlen(val);
        while (vlen && isspace((unsigned char)val[vlen - 1]))
            val[--vlen] = 0;
        const struct opt *o = opt_find(name, nlen);
        char src[256];
        snprintf(src, sizeof src, "%s:%d", path, lineno);
        if (!o) {
            snprintf(err, errlen, "%s: unknown option '%.*s'", src, (int)nlen,
                     name);
            rc = ZR_EINVAL;
        } else {
            rc = opt_set(cfg, o, val, src, err, errlen);
        }
    }
    fclose(f);
    return rc;
}

/* The directory holding scripts/ by default: ../scripts next to the binary
 * (build/zkresp -> scripts/), else /usr/share/zkresp/scripts. */
static char *default_scripts_dir(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char cand[PATH_MAX + 32];
            snprintf(cand, sizeof cand, "%s/../scripts/zkresp.lua", exe);
            if (access(cand, R_OK) == 0) {
                snprintf(cand, sizeof cand, "%s/../scripts", exe);
                char *real = realpath(cand, NULL);
                if (real)
                    return real;
            }
        }
    }
    return strdup("/usr/share/zkresp/scripts");
}

int config_load(struct config *cfg, int argc, char **argv, char *err,
                size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    int rc;
    for (size_t i = 0; i < NOPTS; i++)
        if ((rc = opt_set(cfg, &opts[i], opts[i].def, "default", err, errlen)) <
            0)
            return rc;

    /* The config file comes first so that environment and flags override
     * it; find it in flags or environment before anything else. */
    const char *file = getenv("ZKRESP_CONFIG");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
    }
    if (file && *file) {
        cfg->config_file = strdup(file);
        if ((rc = load_file(cfg, file, err, errlen)) < 0)
            return rc;
    }

    for (size_t i = 0; i < NOPTS; i++) {
        char name[64];
        env_name(&opts[i], name, sizeof name);
        const char *v = getenv(name);
        if (v && (rc = opt_set(cfg, &opts[i], v, name, err, errlen)) < 0)
            return rc;
    }

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            config_usage(stdout);
            return 1;
        }
        if (strcmp(a, "--version") == 0 || strcmp(a, "-v") == 0) {
            printf("zkresp %s\n", ZKRESP_VERSION);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
            return ZR_EINVAL;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const char *val;
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            snprintf(err, errlen, "option --%s needs a value", name);
            return ZR_EINVAL;
        }
        if (nlen == 6 && strncmp(name, "config", 6) == 0)
            continue;
        const struct opt *o = opt_find(name, nlen);
        if (!o) {
            snprintf(err, errlen, "unknown option '--%.*s' (see --help)",
                     (int)nlen, name);
            return ZR_EINVAL;
        }
        if ((rc = opt_set(cfg, o, val, "command line", err, errlen)) < 0)
            return rc;
    }

    if (cfg->root[0] != '/' ||
        (strlen(cfg->root) > 1 && cfg->root[strlen(cfg->root) - 1] == '/')) {
        snprintf(err, errlen,
                 "--root must be an absolute znode path without a trailing "
                 "'/', got '%s'",
                 cfg->root);
        return ZR_EINVAL;
    }
    if (cfg->zk_request_timeout >= cfg->session_timeout) {
        /* A command may wait for ZooKeeper as long as that: a reply held
         * longer than the session may speak for a session that is over. */
        snprintf(err, errlen,
                 "--zk-request-timeout (%d ms) must be shorter than "
                 "--session-timeout (%d ms)",
                 cfg->zk_request_timeout, cfg->session_timeout);
        return ZR_EINVAL;
    }
    if (strcmp(cfg->root, "/") == 0 ||
        strncmp(cfg->root, "/zookeeper", 10) == 0) {
        snprintf(err, errlen, "--root '%s' is reserved", cfg->root);
        return ZR_EINVAL;
    }
    if (cfg->scripts[0] == 0) {
        free(cfg->scripts);
        cfg->scripts = default_scripts_dir();
    }
    if (cfg->policy[0] == 0) {
        free(cfg->policy);
        size_t n = strlen(cfg->scripts) + 16;
        cfg->policy = malloc(n);
        if (!cfg->policy)
            return ZR_ENOMEM;
        snprintf(cfg->policy, n, "%s/policy.lua", cfg->scripts);
    }
    if (cfg->requirepass[0] == 0) {
        free(cfg->requirepass);
        cfg->requirepass = NULL;
    }
    if (cfg->zk_auth_file[0] == 0) {
        free(cfg->zk_auth_file);
        cfg->zk_auth_file = NULL;
    }
    if (cfg->zk_acl[0] == 0) {
        free(cfg->zk_acl);
        cfg->zk_acl = strdup(cfg->zk_auth_file ? "creator" : "open");
        if (!cfg->zk_acl)
            return ZR_ENOMEM;
    }
    if (strcmp(cfg->zk_acl, "creator") != 0 &&
        strcmp(cfg->zk_acl, "open") != 0) {
        snprintf(err, errlen, "--zk-acl must be creator or open, got '%s'",
                 cfg->zk_acl);
        return ZR_EINVAL;
    }
    if (strcmp(cfg->zk_acl, "creator") == 0 && !cfg->zk_auth_file) {
        snprintf(err, errlen,
                 "--zk-acl creator needs ZooKeeper credentials "
                 "(--zk-auth-file)");
        return ZR_EINVAL;
    }
    return 0;
}

void config_free(struct config *cfg)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].type == OPT_STR) {
            char **sp = (char **)((char *)cfg + opts[i].offset);
            free(*sp);
            *sp = NULL;
        }
    free(cfg->config_file);
    cfg->config_file = NULL;
}

void config_usage(FILE *out)
{
    fprintf(out,
            "zkresp %s — Redis-protocol locks backed by ZooKeeper\n\n"
            "usage: zkresp [--config FILE] [--option value ...]\n\n"
            "Each option can also be set with the environment variable shown,\n"
            "or as a 'name value' line in the config file (ZKRESP_CONFIG).\n\n",
            ZKRESP_VERSION);
    for (size_t i = 0; i < NOPTS; i++) {
        char env[64];
        env_name(&opts[i], env, sizeof env);
        fprintf(out, "  --%-20s %s\n  %22s default: %s%s%s   env: %s\n",
                opts[i].name, opts[i].help, "", opts[i].def[0] ? "" : "(",
                opts[i].def[0] ? opts[i].def : "none",
                opts[i].def[0] ? "" : ")", env);
    }
    fprintf(out, "  --%-20s %s\n", "config FILE",
            "read options from FILE first   env: ZKRESP_CONFIG");
}
