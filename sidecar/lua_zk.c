/*
 * lua_zk.c — the zk.* bindings: ZooKeeper operations as yielding Lua calls.
 *
 *   zk.get(path) ──► lua_co_check ──► zk_submit(..., on_zk_done, co) ──► yield
 *   on_zk_done(result) ──► push_result: rc, values ──► lua_co_resume
 *
 * The calls, their arguments and return values are lua_host.h's contract.
 */
#include "lua_host_int.h"

#include "zk.h"

#include <stdlib.h>
#include <string.h>
#include <zookeeper/zookeeper.h>

static void push_stat(lua_State *L, const struct zk_stat *s)
{
    lua_createtable(L, 0, 11);
#define F(name, v)                                                             \
    lua_pushinteger(L, (lua_Integer)(v));                                      \
    lua_setfield(L, -2, name)
    F("czxid", s->czxid);
    F("mzxid", s->mzxid);
    F("ctime", s->ctime);
    F("mtime", s->mtime);
    F("version", s->version);
    F("cversion", s->cversion);
    F("aversion", s->aversion);
    F("ephemeralOwner", s->ephemeral_owner);
    F("dataLength", s->data_length);
    F("numChildren", s->num_children);
    F("pzxid", s->pzxid);
#undef F
}

static void push_stat_or_nil(lua_State *L, const struct zk_result *r)
{
    if (r->has_stat)
        push_stat(L, &r->stat);
    else
        lua_pushnil(L);
}

/* Pushes the results of r onto L as the zk.* call's return values. */
static int push_result(lua_State *L, const struct zk_result *r)
{
    lua_pushinteger(L, r->rc);
    switch (r->type) {
    case ZK_OP_GET:
        if (r->rc == ZOK && r->data)
            lua_pushlstring(L, r->data, (size_t)r->datalen);
        else if (r->rc == ZOK)
            lua_pushliteral(L, "");
        else
            lua_pushnil(L);
        push_stat_or_nil(L, r);
        return 3;
    case ZK_OP_EXISTS:
    case ZK_OP_SET:
        push_stat_or_nil(L, r);
        return 2;
    case ZK_OP_CHILDREN:
        if (r->rc != ZOK) {
            lua_pushnil(L);
            return 2;
        }
        lua_createtable(L, r->nchildren, 0);
        for (int i = 0; i < r->nchildren; i++) {
            lua_pushstring(L, r->children[i] ? r->children[i] : "");
            lua_rawseti(L, -2, i + 1);
        }
        push_stat_or_nil(L, r);
        return 3;
    case ZK_OP_CREATE:
        if (r->path)
            lua_pushstring(L, r->path);
        else
            lua_pushnil(L);
        push_stat_or_nil(L, r);
        return 3;
    case ZK_OP_MULTI:
        lua_createtable(L, r->nmulti, 0);
        for (int i = 0; i < r->nmulti; i++) {
            const struct zk_result *m = &r->multi[i];
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, m->rc);
            lua_setfield(L, -2, "rc");
            if (m->path) {
                lua_pushstring(L, m->path);
                lua_setfield(L, -2, "path");
            }
            if (m->has_stat) {
                push_stat(L, &m->stat);
                lua_setfield(L, -2, "stat");
            }
            lua_rawseti(L, -2, i + 1);
        }
        return 2;
    case ZK_OP_GET_ACL:
        if (r->rc != ZOK) {
            lua_pushnil(L);
            return 2;
        }
        lua_createtable(L, r->nacl, 0);
        for (int i = 0; i < r->nacl; i++) {
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, r->acl[i].perms);
            lua_setfield(L, -2, "perms");
            lua_pushstring(L, r->acl[i].scheme ? r->acl[i].scheme : "");
            lua_setfield(L, -2, "scheme");
            lua_pushstring(L, r->acl[i].id ? r->acl[i].id : "");
            lua_setfield(L, -2, "id");
            lua_rawseti(L, -2, i + 1);
        }
        return 2;
    default:
        return 1;
    }
}

static void on_zk_done(const struct zk_result *res, void *arg)
{
    struct co *c = arg;
    c->answer_gen = zk_generation(c->h->zk);
    int n = push_result(c->L, res);
    lua_co_resume(c, n);
}

/* Submits c's operation; grouped: the write may go out with other
 * commands' writes in one multi (ZK_GROUPED), which the Lua caller asks for
 * with a trailing true.  A command's requests are answered by its deadline
 * even once sent (ZK_BOUNDED); background work waits for its answers. */
static void zk_send(struct co *c, enum zk_op_type type, const struct zk_op *ops,
                    int nops, int grouped)
{
    c->wait = WAIT_ZK;
    int flags = (grouped ? ZK_GROUPED : 0) | (c->task ? ZK_BOUNDED : 0);
    zk_submit(c->h->zk, type, ops, nops, lua_co_deadline(c), flags, on_zk_done,
              c);
}

static int zk_call(lua_State *L, const char *fn, enum zk_op_type type,
                   struct zk_op *ops, int nops, int grouped)
{
    zk_send(lua_co_check(L, fn), type, ops, nops, grouped);
    return lua_yield(L, 0);
}

static int l_zk_get(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_GET, .path = luaL_checkstring(L, 1)};
    op.watch = lua_toboolean(L, 2);
    return zk_call(L, "zk.get", ZK_OP_GET, &op, 1, 0);
}

static int l_zk_exists(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_EXISTS, .path = luaL_checkstring(L, 1)};
    op.watch = lua_toboolean(L, 2);
    return zk_call(L, "zk.exists", ZK_OP_EXISTS, &op, 1, 0);
}

static int l_zk_children(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_CHILDREN, .path = luaL_checkstring(L, 1)};
    op.watch = lua_toboolean(L, 2);
    return zk_call(L, "zk.children", ZK_OP_CHILDREN, &op, 1, 0);
}

/* zk.read_ahead(watch, read): when the watch on `watch` fires, `read` is
 * read at once (zk_ahead.c). */
static int l_zk_read_ahead(lua_State *L)
{
    zk_read_ahead(host_of(L)->zk, luaL_checkstring(L, 1),
                  luaL_checkstring(L, 2));
    return 0;
}

/* zk.get_ahead(path) -> false (none: read it), or as zk.get(path): the
 * read-ahead of path an event began, for a waiter it woke. */
static int l_zk_get_ahead(lua_State *L)
{
    struct co *c = lua_co_check(L, "zk.get_ahead");
    const char *path = luaL_checkstring(L, 1);
    const struct zk_result *now = NULL;
    int slot = -1;
    int how = zk_take_ahead(c->h->zk, path, lua_co_deadline(c), on_zk_done, c,
                            &now, &slot);
    if (how == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (how == 1) {
        c->answer_gen = zk_generation(c->h->zk);
        int n = push_result(L, now);
        zk_ahead_taken(c->h->zk, slot);
        return n;
    }
    c->wait = WAIT_ZK;
    return lua_yield(L, 0);
}

/* zk.get_acl(path) -> rc, {{perms =, scheme =, id =}, ...} */
static int l_zk_get_acl(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_GET_ACL, .path = luaL_checkstring(L, 1)};
    return zk_call(L, "zk.get_acl", ZK_OP_GET_ACL, &op, 1, 0);
}

static int l_zk_sync(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_SYNC, .path = luaL_checkstring(L, 1)};
    return zk_call(L, "zk.sync", ZK_OP_SYNC, &op, 1, 0);
}

static int l_zk_create(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_CREATE, .path = luaL_checkstring(L, 1)};
    op.data = luaL_optlstring(L, 2, "", &op.datalen);
    op.flags = (int)luaL_optinteger(L, 3, 0);
    return zk_call(L, "zk.create", ZK_OP_CREATE, &op, 1, lua_toboolean(L, 4));
}

static int l_zk_set(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_SET, .path = luaL_checkstring(L, 1)};
    op.data = luaL_checklstring(L, 2, &op.datalen);
    op.version = (int)luaL_optinteger(L, 3, -1);
    return zk_call(L, "zk.set", ZK_OP_SET, &op, 1, lua_toboolean(L, 4));
}

static int l_zk_delete(lua_State *L)
{
    struct zk_op op = {.type = ZK_OP_DELETE, .path = luaL_checkstring(L, 1)};
    op.version = (int)luaL_optinteger(L, 2, -1);
    return zk_call(L, "zk.delete", ZK_OP_DELETE, &op, 1, lua_toboolean(L, 3));
}

/* Field k of the table at index t if it is a string, else NULL.  The value
 * is popped: the pointer stays valid because the table still references the
 * string (and Lua strings never move). */
static const char *field_string(lua_State *L, int t, int k, size_t *len)
{
    const char *s = NULL;
    if (lua_rawgeti(L, t, k) == LUA_TSTRING)
        s = lua_tolstring(L, -1, len);
    lua_pop(L, 1);
    return s;
}

static int field_int(lua_State *L, int t, int k, int dflt)
{
    int v = dflt;
    if (lua_rawgeti(L, t, k) == LUA_TNUMBER && lua_isinteger(L, -1))
        v = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

/* zk.multi({{"create", path, data, flags}, {"delete", path, version},
 *           {"set", path, data, version}, {"check", path, version}}
 *          [, grouped])
 * Each operation's table is popped once read, so the stack stays small
 * whatever the number of operations; the strings stay referenced through
 * the list at index 1 until zk_submit has copied them. */
/* Reads the operation list at index 1 (the stack holds only it) into
 * *out (the caller frees it); raises for a malformed list. */
static int read_ops(lua_State *L, const char *fn, struct zk_op **out)
{
    int n = (int)luaL_len(L, 1);
    if (n < 1 || n > ZK_MULTI_MAX_OPS)
        return luaL_error(L, "%s needs 1 to %d operations", fn,
                          ZK_MULTI_MAX_OPS);
    struct zk_op *ops = calloc((size_t)n, sizeof *ops);
    if (!ops)
        return luaL_error(L, "out of memory");
    const char *bad = NULL;
    int bad_at = 0;
    for (int i = 0; i < n && !bad; i++) {
        bad_at = i + 1;
        if (lua_rawgeti(L, 1, i + 1) != LUA_TTABLE) {
            bad = "is not a table";
            break;
        }
        const char *kind = field_string(L, 2, 1, NULL);
        ops[i].path = field_string(L, 2, 2, NULL);
        if (!kind || !ops[i].path) {
            bad = "needs a kind and a path (strings)";
        } else if (strcmp(kind, "create") == 0 || strcmp(kind, "set") == 0) {
            ops[i].type = kind[0] == 'c' ? ZK_OP_CREATE : ZK_OP_SET;
            ops[i].data = field_string(L, 2, 3, &ops[i].datalen);
            if (!ops[i].data) {
                lua_rawgeti(L, 2, 3);
                if (!lua_isnil(L, -1))
                    bad = "has data that is not a string";
                lua_pop(L, 1);
                ops[i].data = "";
                ops[i].datalen = 0;
            }
            if (ops[i].type == ZK_OP_CREATE)
                ops[i].flags = field_int(L, 2, 4, 0);
            else
                ops[i].version = field_int(L, 2, 4, -1);
        } else if (strcmp(kind, "delete") == 0 || strcmp(kind, "check") == 0) {
            ops[i].type = kind[0] == 'd' ? ZK_OP_DELETE : ZK_OP_CHECK;
            ops[i].version = field_int(L, 2, 3, -1);
        } else {
            bad = "has an unknown kind";
        }
        if (!bad)
            lua_pop(L, 1); /* the operation's table */
    }
    if (bad) {
        free(ops);
        return luaL_error(L, "%s: operation %d %s", fn, bad_at, bad);
    }
    *out = ops;
    return n;
}

static int l_zk_multi(lua_State *L)
{
    struct co *c = lua_co_check(L, "zk.multi");
    luaL_checktype(L, 1, LUA_TTABLE);
    int grouped = lua_toboolean(L, 2);
    lua_settop(L, 1);
    struct zk_op *ops = NULL;
    int n = read_ops(L, "zk.multi", &ops);
    zk_send(c, ZK_OP_MULTI, ops, n, grouped);
    free(ops);
    lua_settop(L, 0);
    return lua_yield(L, 0);
}

/* zk.request_size(ops) -> the bytes ZooKeeper would read for
 * zk.multi(ops) (zk_request_size); does not yield. */
static int l_zk_request_size(lua_State *L)
{
    struct lua_host *h = host_of(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    struct zk_op *ops = NULL;
    int n = read_ops(L, "zk.request_size", &ops);
    size_t bytes = zk_request_size(h->zk, ZK_OP_MULTI, ops, n);
    free(ops);
    lua_pushinteger(L, (lua_Integer)bytes);
    return 1;
}

/* zk.max_request() -> the largest request the bridge sends, bytes; a
 * larger one answers zk.TOOBIG (zk_max_request). */
static int l_zk_max_request(lua_State *L)
{
    struct lua_host *h = host_of(L);
    lua_pushinteger(L, (lua_Integer)zk_max_request(h->zk));
    return 1;
}

static int l_zk_session(lua_State *L)
{
    struct lua_host *h = host_of(L);
    lua_pushinteger(L, (lua_Integer)zk_session_id(h->zk));
    lua_pushboolean(L, zk_connected(h->zk));
    return 2;
}

static int l_zk_seen_zxid(lua_State *L)
{
    struct lua_host *h = host_of(L);
    lua_pushinteger(L, (lua_Integer)zk_seen_zxid(h->zk));
    return 1;
}

/* --- the zk table ------------------------------------------------------- */

void lua_zk_open(struct lua_host *h)
{
    lua_State *L = h->L;
    static const luaL_Reg zk_fns[] = {{"get", l_zk_get},
                                      {"exists", l_zk_exists},
                                      {"children", l_zk_children},
                                      {"create", l_zk_create},
                                      {"set", l_zk_set},
                                      {"delete", l_zk_delete},
                                      {"sync", l_zk_sync},
                                      {"multi", l_zk_multi},
                                      {"session", l_zk_session},
                                      {"seen_zxid", l_zk_seen_zxid},
                                      {"request_size", l_zk_request_size},
                                      {"max_request", l_zk_max_request},
                                      {"get_acl", l_zk_get_acl},
                                      {"read_ahead", l_zk_read_ahead},
                                      {"get_ahead", l_zk_get_ahead},
                                      {NULL, NULL}};
    lua_newtable(L);
    *(struct lua_host **)lua_newuserdatauv(L, sizeof h, 0) = h;
    luaL_setfuncs(L, zk_fns, 1);
    struct {
        const char *name;
        int v;
    } consts[] = {
        {"OK", ZOK},
        {"NONODE", ZNONODE},
        {"NODEEXISTS", ZNODEEXISTS},
        {"BADVERSION", ZBADVERSION},
        {"NOTEMPTY", ZNOTEMPTY},
        {"NOCHILDRENFOREPHEMERALS", ZNOCHILDRENFOREPHEMERALS},
        {"NOAUTH", ZNOAUTH},
        {"INVALIDACL", ZINVALIDACL},
        {"AUTHFAILED", ZAUTHFAILED},
        {"PERM_WRITE", ZOO_PERM_WRITE},
        {"PERM_CREATE", ZOO_PERM_CREATE},
        {"PERM_DELETE", ZOO_PERM_DELETE},
        {"PERM_ADMIN", ZOO_PERM_ADMIN},
        {"CONNECTIONLOSS", ZCONNECTIONLOSS},
        {"OPERATIONTIMEOUT", ZOPERATIONTIMEOUT},
        {"SESSIONEXPIRED", ZSESSIONEXPIRED},
        {"SESSIONMOVED", ZSESSIONMOVED},
        {"RUNTIMEINCONSISTENCY", ZRUNTIMEINCONSISTENCY},
        {"BADARGUMENTS", ZBADARGUMENTS},
        {"TIMEOUT", ZK_TIMEOUT},
        {"CLOSING", ZK_CLOSING},
        {"TOOBIG", ZK_TOOBIG},
        {"MAX_OPS", ZK_MULTI_MAX_OPS},
        {"EPHEMERAL", ZOO_EPHEMERAL},
        {"SEQUENCE", ZOO_SEQUENCE},
        {"CONTAINER", ZOO_CONTAINER},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        lua_pushinteger(L, consts[i].v);
        lua_setfield(L, -2, consts[i].name);
    }
    lua_setglobal(L, "zk");
}
