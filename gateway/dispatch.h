/*
 * dispatch.h — routing one parsed request.
 *
 * Connection commands (PING, HELLO, AUTH, CLIENT, SELECT, QUIT, RESET, INFO,
 * COMMAND, WAIT, TIME, ...) are answered here, synchronously; everything
 * else goes to the Lua host, whose reply arrives later through the request's
 * task.  The authentication gate and the HTTP/cross-protocol guard live here
 * too.
 */
#ifndef ZKRESP_DISPATCH_H
#define ZKRESP_DISPATCH_H

struct conn;
struct req;
struct proto_req;

/* Handles pr for c; the reply goes to r (now or later).  pr is borrowed. */
void dispatch(struct conn *c, struct req *r, const struct proto_req *pr);

#endif
