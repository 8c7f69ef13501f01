/*
 * ccmd.h — the commands the gateway answers in C, without ZooKeeper or Lua:
 * their context and argument helpers (conncmd.c), the connection commands
 * (conncmd.c: PING ECHO QUIT SELECT AUTH HELLO RESET CLIENT), the rest and
 * the table of them all (dispatch.c).
 */
#ifndef ZKRESP_CCMD_H
#define ZKRESP_CCMD_H

#include "buf.h"
#include "proto.h"

#include <stddef.h>

struct conn;
struct req;

struct cmd_ctx {
    struct conn *c;
    struct req *r;
    int argc;
    const struct proto_arg *argv;
    struct buf *out;
};

typedef void (*cmd_fn)(struct cmd_ctx *x);

/* Whether p[0..n) is s, in any case. */
int bytes_are(const char *p, size_t n, const char *s);
int arg_is(const struct proto_arg *a, const char *s);
/* Parses a whole argument as a signed 64-bit integer, as Redis's string2ll:
 * 0, or -1 when it is not one. */
int arg_ll(const struct proto_arg *a, long long *out);
/* -ERR value is not an integer or out of range */
void err_not_int(struct buf *out);

void cmd_ping(struct cmd_ctx *x);
void cmd_echo(struct cmd_ctx *x);
void cmd_quit(struct cmd_ctx *x);
void cmd_select(struct cmd_ctx *x);
void cmd_auth(struct cmd_ctx *x);
void cmd_hello(struct cmd_ctx *x);
void cmd_reset(struct cmd_ctx *x);
void cmd_client(struct cmd_ctx *x);

#endif
