/*
 * lua_pattern.c — Lua 5.1's pattern functions with a step budget (see
 * lua_pattern.h).
 *
 *   find/match/gmatch/gsub(args) ──► host budget ──► not a script's: stock
 *                                        │
 *                                        ▼
 *                      match_here(subject position, pattern position)
 *                      (a backtracking matcher, every step charged)
 *
 * The matcher works on the subject [src, src_end) and the pattern
 * [pat, pat_end), where pat_end is the pattern's first NUL (as in 5.1).  It
 * never allocates: an error (a malformed pattern, the budget, the host's
 * check) unwinds with longjmp and leaves nothing behind.
 */
#include "lua_pattern.h"

#include <ctype.h>
#include <lauxlib.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#define MAX_CAPTURES 32
#define MAX_DEPTH 200
#define CAP_OPEN (-1)     /* a capture still open */
#define CAP_POSITION (-2) /* a () capture */
#define ESC '%'

struct capture {
    const char *init;
    ptrdiff_t len; /* or CAP_OPEN, CAP_POSITION */
};

struct matcher {
    lua_State *L;
    const char *src, *src_end;
    const char *pat_end;
    int level; /* captures made */
    int depth; /* recursion of match_here */
    long long used, limit, next_check;
    const struct lua_pattern_budget *budget;
    struct capture cap[MAX_CAPTURES];
};

/* The stock functions, in upvalue 2 of each bounded one. */
enum { UP_HOST = 1, UP_STOCK = 2 };

static void charge(struct matcher *m, long long n)
{
    m->used += n;
    if (m->used < m->next_check)
        return;
    if (m->used > m->limit)
        luaL_error(m->L,
                   "pattern too complex (the match ran past its budget of "
                   "%I steps)",
                   (lua_Integer)m->limit);
    m->next_check = m->limit - m->used > LUA_PATTERN_CHECK_EVERY
                        ? m->used + LUA_PATTERN_CHECK_EVERY
                        : m->limit + 1;
    if (m->budget->check)
        m->budget->check(m->L, m->budget->arg);
}

static void matcher_init(struct matcher *m, lua_State *L,
                         const struct lua_pattern_budget *b, const char *s,
                         size_t len, const char *pat)
{
    m->L = L;
    m->src = s;
    m->src_end = s + len;
    m->pat_end = pat + strlen(pat);
    m->level = 0;
    m->depth = 0;
    m->used = 0;
    m->limit = b->steps < LLONG_MAX / 2 ? b->steps : LLONG_MAX / 2;
    m->next_check = LUA_PATTERN_CHECK_EVERY < m->limit ? LUA_PATTERN_CHECK_EVERY
                                                       : m->limit + 1;
    m->budget = b;
}

/* --- one character against one class ------------------------------------ */

/* %x for a class letter x: whether c is in it (5.1's letters, with z). */
static int in_class(int c, int letter)
{
    int r;
    switch (tolower(letter)) {
    case 'a':
        r = isalpha(c);
        break;
    case 'c':
        r = iscntrl(c);
        break;
    case 'd':
        r = isdigit(c);
        break;
    case 'l':
        r = islower(c);
        break;
    case 'p':
        r = ispunct(c);
        break;
    case 's':
        r = isspace(c);
        break;
    case 'u':
        r = isupper(c);
        break;
    case 'w':
        r = isalnum(c);
        break;
    case 'x':
        r = isxdigit(c);
        break;
    case 'z':
        r = c == 0;
        break;
    default:
        return letter == c; /* %. for any other character: itself */
    }
    if (isupper(letter))
        return !r;
    return r != 0;
}

/* Where the single-character class starting at p ends. */
static const char *class_end(struct matcher *m, const char *p)
{
    const char *end = m->pat_end;
    char first = *p++;
    if (first == ESC) {
        if (p >= end)
            luaL_error(m->L, "malformed pattern (ends with '%%')");
        return p + 1;
    }
    if (first != '[')
        return p;
    if (p < end && *p == '^')
        p++;
    /* The first character of a set is always in it (so "[]]" is "]"). */
    do {
        if (p >= end)
            luaL_error(m->L, "malformed pattern (missing ']')");
        char ch = *p++;
        if (ch == ESC && p < end)
            p++;
    } while (p >= end || *p != ']');
    return p + 1;
}

/* c against the set [open, close] ('[' at open, ']' at close). */
static int in_set(int c, const char *open, const char *close)
{
    int found = 1;
    const char *p = open + 1;
    if (*p == '^') {
        found = 0;
        p++;
    }
    for (; p < close; p++) {
        if (*p == ESC) {
            p++;
            if (in_class(c, (unsigned char)*p))
                return found;
        } else if (p + 2 < close && p[1] == '-') {
            if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
                return found;
            p += 2;
        } else if ((unsigned char)*p == c) {
            return found;
        }
    }
    return !found;
}

/* c against the class [p, ep). */
static int single(int c, const char *p, const char *ep)
{
    switch (*p) {
    case '.':
        return 1;
    case ESC:
        return in_class(c, (unsigned char)p[1]);
    case '[':
        return in_set(c, p, ep - 1);
    default:
        return (unsigned char)*p == c;
    }
}

/* --- the matcher ---------------------------------------------------------- */

static const char *match_here(struct matcher *m, const char *s, const char *p);

/* The class [p, ep) repeated as often as it matches, then the rest from
 * ep + 1: longest first. */
static const char *repeat_longest(struct matcher *m, const char *s,
                                  const char *p, const char *ep)
{
    ptrdiff_t n = 0;
    while (s + n < m->src_end && single((unsigned char)s[n], p, ep)) {
        charge(m, 1);
        n++;
    }
    for (; n >= 0; n--) {
        const char *r = match_here(m, s + n, ep + 1);
        if (r)
            return r;
    }
    return NULL;
}

/* The same, shortest first. */
static const char *repeat_shortest(struct matcher *m, const char *s,
                                   const char *p, const char *ep)
{
    for (;;) {
        const char *r = match_here(m, s, ep + 1);
        if (r)
            return r;
        if (s >= m->src_end || !single((unsigned char)*s, p, ep))
            return NULL;
        charge(m, 1);
        s++;
    }
}

static const char *open_capture(struct matcher *m, const char *s, const char *p,
                                ptrdiff_t what)
{
    if (m->level >= MAX_CAPTURES)
        luaL_error(m->L, "too many captures");
    m->cap[m->level].init = s;
    m->cap[m->level].len = what;
    m->level++;
    const char *r = match_here(m, s, p);
    if (!r)
        m->level--;
    return r;
}

static const char *close_capture(struct matcher *m, const char *s,
                                 const char *p)
{
    int l = m->level - 1;
    while (l >= 0 && m->cap[l].len != CAP_OPEN)
        l--;
    if (l < 0)
        luaL_error(m->L, "invalid pattern capture");
    m->cap[l].len = s - m->cap[l].init;
    const char *r = match_here(m, s, p);
    if (!r)
        m->cap[l].len = CAP_OPEN;
    return r;
}

/* %bxy at p (p at 'x'). */
static const char *balanced(struct matcher *m, const char *s, const char *p)
{
    if (p + 1 >= m->pat_end)
        luaL_error(m->L, "unbalanced pattern");
    if (s >= m->src_end || *s != p[0])
        return NULL;
    int depth = 1;
    while (++s < m->src_end) {
        charge(m, 1);
        if (*s == p[1]) {
            if (--depth == 0)
                return s + 1;
        } else if (*s == p[0]) {
            depth++;
        }
    }
    return NULL;
}

/* The index of the closed capture that %d (digit d) names. */
static int capture_index(struct matcher *m, int d)
{
    int l = d - '1';
    if (l < 0 || l >= m->level || m->cap[l].len == CAP_OPEN)
        luaL_error(m->L, "invalid capture index");
    return l;
}

/* %1..%9: the same bytes as that capture. */
static const char *back_reference(struct matcher *m, const char *s, int d)
{
    int l = capture_index(m, d);
    /* A position capture's "length" is negative: as a size it never fits,
     * so %n of a () capture never matches (as in 5.1). */
    size_t len = (size_t)m->cap[l].len;
    if ((size_t)(m->src_end - s) < len)
        return NULL;
    charge(m, (long long)(len / 16));
    if (memcmp(m->cap[l].init, s, len) == 0)
        return s + len;
    return NULL;
}

/* Matches the pattern from p against the subject from s; returns where the
 * match ends, or NULL. */
static const char *match_here(struct matcher *m, const char *s, const char *p)
{
    if (++m->depth > MAX_DEPTH)
        luaL_error(m->L, "pattern too complex");
    for (;;) {
        charge(m, 1);
        if (p >= m->pat_end)
            break;
        if (*p == '(') {
            if (p + 1 < m->pat_end && p[1] == ')')
                s = open_capture(m, s, p + 2, CAP_POSITION);
            else
                s = open_capture(m, s, p + 1, CAP_OPEN);
            break;
        }
        if (*p == ')') {
            s = close_capture(m, s, p + 1);
            break;
        }
        if (*p == '$' && p + 1 == m->pat_end) {
            if (s != m->src_end)
                s = NULL;
            break;
        }
        if (*p == ESC && p + 1 < m->pat_end) {
            char e = p[1];
            if (e == 'b') {
                s = balanced(m, s, p + 2);
                if (!s)
                    break;
                p += 4;
                continue;
            }
            if (e == 'f') {
                p += 2;
                if (p >= m->pat_end || *p != '[')
                    luaL_error(m->L, "missing '[' after '%%f' in pattern");
                const char *ep = class_end(m, p);
                int before = s == m->src ? 0 : (unsigned char)s[-1];
                int at = s < m->src_end ? (unsigned char)*s : 0;
                if (in_set(before, p, ep - 1) || !in_set(at, p, ep - 1)) {
                    s = NULL;
                    break;
                }
                p = ep;
                continue;
            }
            if (isdigit((unsigned char)e)) {
                s = back_reference(m, s, (unsigned char)e);
                if (!s)
                    break;
                p += 2;
                continue;
            }
        }
        /* A single-character class, maybe followed by a repetition. */
        const char *ep = class_end(m, p);
        int hit = s < m->src_end && single((unsigned char)*s, p, ep);
        char rep = ep < m->pat_end ? *ep : '\0';
        if (rep == '?') {
            const char *r;
            if (hit && (r = match_here(m, s + 1, ep + 1)) != NULL) {
                s = r;
                break;
            }
            p = ep + 1;
            continue;
        }
        if (rep == '*') {
            s = repeat_longest(m, s, p, ep);
            break;
        }
        if (rep == '+') {
            s = hit ? repeat_longest(m, s + 1, p, ep) : NULL;
            break;
        }
        if (rep == '-') {
            s = repeat_shortest(m, s, p, ep);
            break;
        }
        if (!hit) {
            s = NULL;
            break;
        }
        s++;
        p = ep;
    }
    m->depth--;
    return s;
}

/* --- captures to Lua values ----------------------------------------------- */

/* Pushes capture i; with no captures, capture 0 is the whole match [s, e). */
static void push_capture(struct matcher *m, int i, const char *s, const char *e)
{
    if (i >= m->level) {
        if (i != 0)
            luaL_error(m->L, "invalid capture index");
        lua_pushlstring(m->L, s, (size_t)(e - s));
        return;
    }
    ptrdiff_t len = m->cap[i].len;
    if (len == CAP_OPEN)
        luaL_error(m->L, "unfinished capture");
    if (len == CAP_POSITION)
        lua_pushinteger(m->L, (lua_Integer)(m->cap[i].init - m->src + 1));
    else
        lua_pushlstring(m->L, m->cap[i].init, (size_t)len);
}

/* Pushes every capture (or the whole match when s is given and there are
 * none); returns how many. */
static int push_captures(struct matcher *m, const char *s, const char *e)
{
    int n = (m->level == 0 && s) ? 1 : m->level;
    luaL_checkstack(m->L, n, "too many captures");
    for (int i = 0; i < n; i++)
        push_capture(m, i, s, e);
    return n;
}

/* --- arguments ------------------------------------------------------------ */

/* An integer argument as 5.1 reads one: any number (or numeric string),
 * truncated; def when absent. */
static lua_Integer int_arg(lua_State *L, int arg, lua_Integer def)
{
    if (lua_isnoneornil(L, arg))
        return def;
    lua_Number n = luaL_checknumber(L, arg);
    if (n != n)
        return 0;
    if (n >= 9.2e18)
        return (lua_Integer)9.2e18;
    if (n <= -9.2e18)
        return -(lua_Integer)9.2e18;
    return (lua_Integer)n;
}

/* 5.1's start position: from the end when negative, then clamped to
 * [0, len] (0-based). */
static size_t start_at(lua_Integer init, size_t len)
{
    if (init < 0)
        init += (lua_Integer)len + 1;
    if (init < 1)
        return 0;
    if ((lua_Unsigned)(init - 1) > len)
        return len;
    return (size_t)(init - 1);
}

/* The host's budget for this call; 0 when the stock function should run. */
static int get_budget(lua_State *L, struct lua_pattern_budget *b)
{
    const struct lua_pattern_host *host =
        lua_touserdata(L, lua_upvalueindex(UP_HOST));
    memset(b, 0, sizeof *b);
    host->budget(L, b);
    return b->bounded;
}

static int stock(lua_State *L)
{
    lua_CFunction f = lua_tocfunction(L, lua_upvalueindex(UP_STOCK));
    return f(L);
}

/* --- find and match ------------------------------------------------------- */

static int find_or_match(lua_State *L, int find)
{
    struct lua_pattern_budget b;
    if (!get_budget(L, &b))
        return stock(L);
    size_t len, plen;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *p = luaL_checklstring(L, 2, &plen);
    size_t init = start_at(int_arg(L, 3, 1), len);
    if (find && (lua_toboolean(L, 4) || strpbrk(p, "^$*+?.([%-") == NULL)) {
        /* A plain search (memmem is linear, 5.1's was not). */
        const char *at =
            plen == 0 ? s + init : memmem(s + init, len - init, p, plen);
        if (at) {
            lua_pushinteger(L, (lua_Integer)(at - s + 1));
            lua_pushinteger(L, (lua_Integer)(at - s + plen));
            return 2;
        }
        lua_pushnil(L);
        return 1;
    }
    struct matcher m;
    int anchor = *p == '^';
    matcher_init(&m, L, &b, s, len, p + anchor);
    const char *from = s + init;
    do {
        m.level = 0;
        const char *e = match_here(&m, from, p + anchor);
        if (e) {
            if (!find)
                return push_captures(&m, from, e);
            lua_pushinteger(L, (lua_Integer)(from - s + 1));
            lua_pushinteger(L, (lua_Integer)(e - s));
            return push_captures(&m, NULL, NULL) + 2;
        }
    } while (from++ < m.src_end && !anchor);
    lua_pushnil(L);
    return 1;
}

static int l_find(lua_State *L)
{
    return find_or_match(L, 1);
}

static int l_match(lua_State *L)
{
    return find_or_match(L, 0);
}

/* --- gmatch --------------------------------------------------------------- */

/* The iterator: upvalues subject, pattern, next start (0-based), host. */
static int gmatch_next(lua_State *L)
{
    const struct lua_pattern_host *host =
        lua_touserdata(L, lua_upvalueindex(4));
    struct lua_pattern_budget b;
    memset(&b, 0, sizeof b);
    host->budget(L, &b);
    if (!b.bounded) /* its own matcher still, without a budget */
        b.steps = LLONG_MAX;
    size_t len;
    const char *s = lua_tolstring(L, lua_upvalueindex(1), &len);
    const char *p = lua_tostring(L, lua_upvalueindex(2));
    struct matcher m;
    matcher_init(&m, L, &b, s, len, p);
    for (const char *from = s + lua_tointeger(L, lua_upvalueindex(3));
         from <= m.src_end; from++) {
        m.level = 0;
        const char *e = match_here(&m, from, p);
        if (e) {
            /* An empty match moves on by one. */
            lua_Integer next = e - s + (e == from);
            lua_pushinteger(L, next);
            lua_replace(L, lua_upvalueindex(3));
            return push_captures(&m, from, e);
        }
    }
    return 0;
}

static int l_gmatch(lua_State *L)
{
    struct lua_pattern_budget b;
    if (!get_budget(L, &b))
        return stock(L);
    luaL_checkstring(L, 1);
    luaL_checkstring(L, 2);
    lua_settop(L, 2);
    lua_pushinteger(L, 0);
    lua_pushvalue(L, lua_upvalueindex(UP_HOST));
    lua_pushcclosure(L, gmatch_next, 4);
    return 1;
}

/* --- gsub ----------------------------------------------------------------- */

/* A replacement string: %0 the match, %1..%9 captures, % before anything
 * else that character (5.1). */
static void add_string(struct matcher *m, luaL_Buffer *out, const char *s,
                       const char *e)
{
    size_t n;
    const char *r = lua_tolstring(m->L, 3, &n);
    for (size_t i = 0; i < n; i++) {
        if (r[i] != ESC) {
            luaL_addchar(out, r[i]);
            continue;
        }
        i++; /* r[n] is the string's terminating NUL, as in 5.1 */
        unsigned char d = (unsigned char)r[i];
        if (!isdigit(d)) {
            luaL_addchar(out, (char)d);
        } else if (d == '0') {
            luaL_addlstring(out, s, (size_t)(e - s));
        } else {
            push_capture(m, d - '1', s, e);
            luaL_addvalue(out);
        }
    }
}

static void add_replacement(struct matcher *m, luaL_Buffer *out, const char *s,
                            const char *e)
{
    lua_State *L = m->L;
    int t = lua_type(L, 3);
    if (t == LUA_TNUMBER || t == LUA_TSTRING) {
        add_string(m, out, s, e);
        return;
    }
    if (t == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        int n = push_captures(m, s, e);
        lua_call(L, n, 1);
    } else {
        push_capture(m, 0, s, e);
        lua_gettable(L, 3);
    }
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        lua_pushlstring(L, s, (size_t)(e - s)); /* keep the original */
    } else if (!lua_isstring(L, -1)) {
        luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    }
    luaL_addvalue(out);
}

static int l_gsub(lua_State *L)
{
    struct lua_pattern_budget b;
    if (!get_budget(L, &b))
        return stock(L);
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *p = luaL_checkstring(L, 2);
    int t = lua_type(L, 3);
    luaL_argcheck(L,
                  t == LUA_TNUMBER || t == LUA_TSTRING || t == LUA_TFUNCTION ||
                      t == LUA_TTABLE,
                  3, "string/function/table expected");
    lua_Integer most = int_arg(L, 4, (lua_Integer)len + 1);
    int anchor = *p == '^';
    struct matcher m;
    matcher_init(&m, L, &b, s, len, p + anchor);
    luaL_Buffer out;
    luaL_buffinit(L, &out);
    const char *from = s;
    lua_Integer n = 0;
    while (n < most) {
        m.level = 0;
        const char *e = match_here(&m, from, p + anchor);
        if (e) {
            n++;
            add_replacement(&m, &out, from, e);
        }
        if (e && e > from)
            from = e;
        else if (from < m.src_end)
            luaL_addchar(&out, *from++);
        else
            break;
        if (anchor)
            break;
    }
    luaL_addlstring(&out, from, (size_t)(m.src_end - from));
    luaL_pushresult(&out);
    lua_pushinteger(L, n);
    return 2;
}

/* --- the table ------------------------------------------------------------ */

void lua_pattern_push(lua_State *L, const struct lua_pattern_host *host)
{
    static const struct {
        const char *name;
        lua_CFunction fn;
    } fns[] = {{"find", l_find},
               {"match", l_match},
               {"gmatch", l_gmatch},
               {"gsub", l_gsub}};
    lua_createtable(L, 0, 4);
    lua_getglobal(L, "string");
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        lua_pushlightuserdata(L, (void *)host);
        lua_getfield(L, -2, fns[i].name);
        lua_pushcclosure(L, fns[i].fn, 2);
        lua_setfield(L, -3, fns[i].name);
    }
    lua_pop(L, 1);
}
