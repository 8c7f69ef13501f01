/*
 * lua_reply.c — the RESP encoding of the Lua host's reply values.
 *
 *   M.dispatch returns v ──► lua_host (co_deliver) ──► client_ops.encode
 *                                                      = lua_reply_encode(v)
 *   host.push(id, v)     ──► lua_host ──────────────► lua_reply_encode(v)
 *
 * The value shapes are the Lua host's contract ("Reply values" in
 * lua_host.h); the bytes are reply.c's.  It sits on the gateway's side of
 * the line so that the sidecar layer never writes RESP itself.
 */
#include "lua_reply.h"

#include "lua_host.h"
#include "reply.h"

#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* As deep as scripts/eval.lua's conversion of a script's value goes. */
#define REPLY_MAX_DEPTH 1000

/* The most bytes one reply may take (lua_reply_limit); 0: no limit. */
static size_t reply_limit;

/* One reply being encoded: where it starts in out, and whether it went
 * past the limit (then the rest is skipped and the reply replaced). */
struct enc {
    size_t start;
    int over;
};

void lua_reply_limit(size_t max)
{
    reply_limit = max;
}

/* Whether `more` bytes still fit the reply; marks it over when not. */
static int fits(struct enc *e, const struct buf *out, size_t more)
{
    if (reply_limit && out->len - e->start + more > reply_limit)
        e->over = 1;
    return !e->over;
}

/* Replaces what a reply wrote past its start with the error saying why:
 * it was never built whole (a script may return one string a million
 * times), and the connection lives. */
static void too_large(struct buf *out, const struct enc *e)
{
    out->len = e->start;
    char msg[96];
    snprintf(msg, sizeof msg,
             "ERR reply too large (more than %zu bytes, max-output)",
             reply_limit);
    reply_error(out, msg);
}

static void encode(lua_State *L, int idx, struct buf *out, int proto, int depth,
                   struct enc *e);

static void encode_seq(lua_State *L, int tidx, struct buf *out, int proto,
                       int depth, int kind, struct enc *e)
{
    long n = 0;
    while (lua_rawgeti(L, tidx, n + 1) != LUA_TNIL) {
        lua_pop(L, 1);
        n++;
    }
    lua_pop(L, 1);
    if (kind == 'm' || kind == 'p')
        n -= n % 2;
    if (kind == 'm')
        reply_map(out, proto, n / 2);
    else if (kind == 's')
        reply_set(out, proto, n);
    else if (kind == 'p' && proto >= 3)
        reply_array(out, n / 2);
    else if (kind == 'P')
        reply_push(out, proto, n);
    else
        reply_array(out, n);
    for (long i = 1; i <= n && fits(e, out, 0); i++) {
        if (kind == 'p' && proto >= 3 && i % 2 == 1)
            reply_array(out, 2);
        lua_rawgeti(L, tidx, i);
        encode(L, lua_gettop(L), out, proto, depth + 1, e);
        lua_pop(L, 1);
    }
}

/* Appends the reply for the Lua value at idx (see lua_host.h); depth counts
 * the containers around it. */
static void encode(lua_State *L, int idx, struct buf *out, int proto, int depth,
                   struct enc *e)
{
    /* Each level pushes up to two values (a field, an element): make room,
     * as only LUA_MINSTACK slots are sure. */
    if (depth > REPLY_MAX_DEPTH || !lua_checkstack(L, 4)) {
        reply_error(out, "ERR reached lua stack limit");
        return;
    }
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        reply_null(out, proto);
        return;
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, idx))
            reply_int(out, 1);
        else
            reply_null(out, proto);
        return;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            reply_int(out, (long long)lua_tointeger(L, idx));
        } else {
            double d = lua_tonumber(L, idx);
            if (isnan(d) || d >= 9.2233720368547758e18 ||
                d < -9.2233720368547758e18)
                reply_int(out, d < 0 ? INT64_MIN : isnan(d) ? 0 : INT64_MAX);
            else
                reply_int(out, (long long)d);
        }
        return;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        if (fits(e, out, n))
            reply_bulk(out, s, n);
        return;
    }
    case LUA_TLIGHTUSERDATA:
        if (lua_host_is_null(L, idx)) {
            reply_null(out, proto);
            return;
        }
        break;
    case LUA_TTABLE:
        if (lua_getfield(L, idx, "err") == LUA_TSTRING) {
            size_t n;
            const char *e = lua_tolstring(L, -1, &n);
            reply_error_len(out, e, n);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "ok") == LUA_TSTRING) {
            size_t n;
            const char *o = lua_tolstring(L, -1, &n);
            reply_status_len(out, o, n);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "bool") == LUA_TBOOLEAN) {
            reply_bool(out, proto, lua_toboolean(L, -1));
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "null_array") == LUA_TBOOLEAN) {
            reply_null_array(out, proto);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "pairs") == LUA_TTABLE) {
            encode_seq(L, lua_gettop(L), out, proto, depth, 'p', e);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "double") == LUA_TNUMBER) {
            reply_double(out, proto, lua_tonumber(L, -1));
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "map") == LUA_TTABLE) {
            encode_seq(L, lua_gettop(L), out, proto, depth, 'm', e);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "set") == LUA_TTABLE) {
            encode_seq(L, lua_gettop(L), out, proto, depth, 's', e);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "push") == LUA_TTABLE) {
            encode_seq(L, lua_gettop(L), out, proto, depth, 'P', e);
            lua_pop(L, 1);
            return;
        }
        lua_pop(L, 1);
        if (depth == 0 && lua_getfield(L, idx, "frames") == LUA_TTABLE) {
            int t = lua_gettop(L);
            /* each frame a reply of its own: one too large is replaced
             * alone, so the client still reads as many replies */
            for (lua_Integer i = 1; lua_rawgeti(L, t, i) != LUA_TNIL; i++) {
                struct enc f = {.start = out->len, .over = 0};
                encode(L, -1, out, proto, depth + 1, &f);
                if (f.over)
                    too_large(out, &f);
                lua_pop(L, 1);
            }
            lua_pop(L, 2);
            return;
        }
        if (depth == 0)
            lua_pop(L, 1);
        encode_seq(L, idx, out, proto, depth, 'a', e);
        return;
    default:
        break;
    }
    reply_errorf(out, "ERR internal error: cannot reply with a %s",
                 luaL_typename(L, idx));
}

void lua_reply_encode(lua_State *L, int idx, struct buf *out, int proto)
{
    struct enc e = {.start = out->len, .over = 0};
    if (idx == 0)
        reply_null(out, proto);
    else
        encode(L, idx, out, proto, 0, &e);
    if (e.over)
        too_large(out, &e);
}

void lua_reply_error(struct buf *out, const char *msg)
{
    reply_error(out, msg);
}
