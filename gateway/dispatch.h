/*
 * dispatch.h — routing one parsed request.
 *
 * Connection commands (PING, HELLO, AUTH, CLIENT, SELECT, QUIT, RESET, INFO,
 * COMMAND, WAIT, TIME, ...) are answered here, synchronously, when the
 * request has the shape the command registry gives them; everything else
 * (refusals included) goes to the Lua host, whose reply arrives later
 * through the request's task.  The authentication gate and the
 * HTTP/cross-protocol guard live here too.
 */
#ifndef ZKRESP_DISPATCH_H
#define ZKRESP_DISPATCH_H

#include <stddef.h>

struct conn;
struct req;
struct proto_req;

struct lua_host;

/* Reads the shapes of the commands answered here from the command registry
 * (scripts/registry.lua) through lua.  An error (to err) when the registry
 * and the gateway disagree on which commands C answers. */
int dispatch_init(struct lua_host *lua, char *err, size_t errlen);

/* Handles pr for c; the reply goes to r (now or later).  pr is borrowed. */
void dispatch(struct conn *c, struct req *r, const struct proto_req *pr);

#endif
