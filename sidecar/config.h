/*
 * config.h — every setting, from defaults, an optional config file, the
 * environment (ZKRESP_<NAME>) and flags, in that order of precedence (flags
 * win).  `zkresp --help` prints the table below with defaults and variables.
 */
#ifndef ZKRESP_CONFIG_H
#define ZKRESP_CONFIG_H

#include <stddef.h>
#include <stdio.h>

/* The Redis version zkresp answers as (HELLO, INFO, a script's
 * redis.REDIS_VERSION), and its own. */
#define REDIS_COMPAT_VERSION "7.2.4"
#ifndef ZKRESP_VERSION
#define ZKRESP_VERSION "0.1.0"
#endif

struct config {
    char *bind;
    int port;
    char *zk;                 /* ZooKeeper connect string */
    char *root;               /* znode root, e.g. /zkresp */
    int session_timeout;      /* ms, requested */
    int zk_request_timeout;   /* ms a command may wait for ZooKeeper */
    int zk_group_max;         /* most operations in one group commit */
    long long zk_max_request; /* bytes of the largest ZooKeeper request */
    char *zk_auth_file;       /* digest credentials user:password; NULL: none */
    char *zk_acl;             /* "creator" or "open": ACL of created nodes */
    char *policy;             /* policy file */
    char *scripts;            /* directory of the system Lua scripts */
    int log_level;
    char *requirepass;   /* NULL: no authentication */
    int auth_fail_delay; /* ms a connection waits after a failed AUTH */
    int maxclients;
    long long max_key_len;   /* bytes */
    long long max_value_len; /* bytes */
    int max_args;            /* most arguments in one request, name included */
    long long max_bulk_len;  /* longest bulk argument accepted */
    long long max_query_len; /* query buffer per connection */
    long long max_output;    /* reply bytes pending per connection */
    int max_inflight;        /* requests in flight per connection */
    int databases;           /* SELECT 0 .. databases-1 */
    int timeout;             /* idle client timeout, s; 0 = never */
    int stall_timeout;       /* ms without progress on a half-sent request or
                                unsent reply before the client is closed */
    int shutdown_grace;      /* ms to finish in-flight work on SIGTERM */
    int script_time_limit;   /* ms an EVAL script may run */
    long long script_memory_limit; /* bytes an EVAL script may grow the VM */
    int script_cache_max;          /* scripts in the shared script cache */
    int max_subscriptions_per_command; /* channels one SUBSCRIBE may name */
    int max_subscriptions_per_client;  /* subscriptions one client may hold */
    int pubsub_gc_delay; /* ms before an empty channel node is removed */
    int metrics_port;    /* HTTP /metrics, /healthz, /readyz; 0 = off */
    char *metrics_bind;  /* its address */
    char *config_file;
};

/* Fills cfg from defaults, ZKRESP_CONFIG / --config file, environment and
 * argv.  Returns 0, 1 if --help or --version was printed (exit 0), or a
 * negative error with a one-line reason in err. */
int config_load(struct config *cfg, int argc, char **argv, char *err,
                size_t errlen);
void config_free(struct config *cfg);
void config_usage(FILE *out);

#endif
