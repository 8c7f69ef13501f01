/*
 * lua_reply.h — RESP encoding of the Lua host's reply values.
 *
 * The gateway's half of the Lua host's reply contract: lua_host.h says
 * which Lua values a command may answer ("Reply values"), these functions
 * write them as RESP2/RESP3 (reply.h).  conn.c hands them to the host as
 * lua_client_ops.encode and .encode_error.
 */
#ifndef ZKRESP_LUA_REPLY_H
#define ZKRESP_LUA_REPLY_H

#include <stddef.h>

struct buf;
struct lua_State;

/* Appends the reply for the Lua value at (absolute or relative) index idx
 * of L to out, in protocol proto (2 or 3); idx 0: no value, a null reply.
 * A value that is no reply (a function...) answers
 * "-ERR internal error: cannot reply with a <type>"; containers nested
 * deeper than 1000 (scripts/eval.lua's limit too) answer "-ERR reached lua
 * stack limit" in their place.
 * Leaves L's stack as it found it. */
void lua_reply_encode(struct lua_State *L, int idx, struct buf *out, int proto);

/* The most bytes one reply may take (the server's --max-output): a value
 * whose reply would take more answers "-ERR reply too large (more than N
 * bytes, max-output)" instead, and is never built whole.  0: no limit. */
void lua_reply_limit(size_t max);

/* Appends the error reply "-msg" (msg carries its code: "ERR ..."). */
void lua_reply_error(struct buf *out, const char *msg);

#endif
