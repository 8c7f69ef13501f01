/*
 * test_lua_alloc.c — the Lua VM's allocator (sidecar/lua_alloc.c).
 *
 * Drives lua_alloc_fn the way Lua does (a new block with ptr NULL, resizes
 * and frees with the block's exact old size) and checks the lua_Alloc
 * contract: a block keeps its bytes across resizes up to the smaller size,
 * live blocks never overlap, every block is aligned for any Lua object, and
 * a freed small block is handed out again.  Built with LUA_ALLOC_POOLED=1
 * (Makefile), so the free lists are what is tested, even under ASan.
 */
#include "lua_alloc.h"
#include "unit.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

enum { SLOTS = 256, ROUNDS = 20000 };

struct slot {
    unsigned char *p;
    size_t size;
    unsigned char fill;
};

static void fill(struct slot *s, size_t from)
{
    for (size_t i = from; i < s->size; i++)
        s->p[i] = (unsigned char)(s->fill + i);
}

/* Whether s's first n bytes still hold its pattern. */
static int intact(const struct slot *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s->p[i] != (unsigned char)(s->fill + i))
            return 0;
    return 1;
}

/* Sizes around the small/large boundary and the class edges. */
static size_t any_size(void)
{
    switch (unit_rand() % 5) {
    case 0:
        return 1 + unit_rand() % 32;
    case 1:
        return 1 + unit_rand() % LUA_ALLOC_SMALL;
    case 2:
        return LUA_ALLOC_SMALL - 8 + unit_rand() % 16;
    case 3:
        return 512 - 8 + unit_rand() % 16; /* where the classes widen */
    default:
        return 1 + unit_rand() % (2 * LUA_ALLOC_SMALL);
    }
}

TEST(lua_alloc_keeps_bytes_across_resizes)
{
    struct lua_alloc *a = lua_alloc_create();
    ASSERT(a != NULL);
    struct slot slots[SLOTS] = {{0}};
    for (int r = 0; r < ROUNDS; r++) {
        struct slot *s = &slots[unit_rand() % SLOTS];
        if (s->p == NULL) {
            s->size = any_size();
            s->p = lua_alloc_fn(a, NULL, 5 /* LUA_TTABLE */, s->size);
            ASSERT(s->p != NULL);
            ASSERT_INT_EQ((uintptr_t)s->p % 16, 0);
            s->fill = (unsigned char)unit_rand();
            fill(s, 0);
        } else if (unit_rand() % 3 == 0) {
            ASSERT(intact(s, s->size));
            ASSERT(lua_alloc_fn(a, s->p, s->size, 0) == NULL);
            s->p = NULL;
        } else {
            size_t n = any_size();
            unsigned char *q = lua_alloc_fn(a, s->p, s->size, n);
            ASSERT(q != NULL);
            ASSERT_INT_EQ((uintptr_t)q % 16, 0);
            s->p = q;
            size_t kept = s->size < n ? s->size : n;
            ASSERT(intact(s, kept));
            s->size = n;
            fill(s, kept);
        }
    }
    /* Overlapping blocks would have broken each other's patterns. */
    for (int i = 0; i < SLOTS; i++) {
        if (slots[i].p) {
            ASSERT(intact(&slots[i], slots[i].size));
            lua_alloc_fn(a, slots[i].p, slots[i].size, 0);
        }
    }
    lua_alloc_free(a);
}

TEST(lua_alloc_reuses_freed_small_blocks)
{
    struct lua_alloc *a = lua_alloc_create();
    ASSERT(a != NULL);
    void *p = lua_alloc_fn(a, NULL, 0, 40);
    void *q = lua_alloc_fn(a, NULL, 0, 40);
    ASSERT(p != NULL && q != NULL && p != q);
    lua_alloc_fn(a, p, 40, 0);
    /* Same 16-byte class (33..48): the block just freed comes back. */
    void *r = lua_alloc_fn(a, NULL, 0, 48);
    ASSERT(r == p);
    /* A resize within the class keeps the block where it is. */
    ASSERT(lua_alloc_fn(a, r, 48, 33) == r);
    lua_alloc_fn(a, r, 33, 0);
    lua_alloc_fn(a, q, 40, 0);
    lua_alloc_free(a);
}

TEST(lua_alloc_counts_and_refuses_growth_past_its_limit)
{
    struct lua_alloc *a = lua_alloc_create();
    ASSERT(a != NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 0);
    void *p = lua_alloc_fn(a, NULL, 0, 40);
    void *big = lua_alloc_fn(a, NULL, 0, 10000);
    ASSERT(p != NULL && big != NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 10040);
    p = lua_alloc_fn(a, p, 40, 100);
    ASSERT(p != NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 10100);
    ASSERT_INT_EQ(lua_alloc_set_limit(a, 10150), 0);
    void *q = lua_alloc_fn(a, NULL, 0, 40);
    ASSERT(q != NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 10140);
    /* Past the limit: refused, counted, nothing changes. */
    ASSERT(lua_alloc_fn(a, NULL, 0, 20) == NULL);
    memset(p, 7, 100);
    ASSERT(lua_alloc_fn(a, p, 100, 200) == NULL);
    ASSERT(((unsigned char *)p)[99] == 7);
    ASSERT(lua_alloc_fn(a, NULL, 0, (size_t)-1) == NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 10140);
    ASSERT_INT_EQ(lua_alloc_take_refused(a), 3);
    ASSERT_INT_EQ(lua_alloc_take_refused(a), 0);
    /* Shrinking and freeing never fail, whatever the limit. */
    ASSERT_INT_EQ(lua_alloc_set_limit(a, 1), 10150);
    big = lua_alloc_fn(a, big, 10000, 5000);
    ASSERT(big != NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 5140);
    ASSERT(lua_alloc_fn(a, q, 40, 0) == NULL);
    ASSERT_INT_EQ(lua_alloc_used(a), 5100);
    ASSERT_INT_EQ(lua_alloc_take_refused(a), 0);
    lua_alloc_set_limit(a, 0);
    lua_alloc_fn(a, big, 5000, 0);
    lua_alloc_fn(a, p, 100, 0);
    ASSERT_INT_EQ(lua_alloc_used(a), 0);
    lua_alloc_free(a);
}

/* The limit holds for one C call that grows a lauxlib buffer (which Lua's
 * own memory count does not see): table.concat of 200 references to one
 * 1 MB string fails with "not enough memory" and nothing stays allocated. */
TEST(lua_alloc_limit_holds_for_one_c_call)
{
    struct lua_alloc *a = lua_alloc_create();
    ASSERT(a != NULL);
    lua_State *L = lua_newstate(lua_alloc_fn, a);
    ASSERT(L != NULL);
    luaL_openlibs(L);
    ASSERT(luaL_dostring(L, "s = string.rep('x', 1000000) t = {} "
                            "for i = 1, 200 do t[i] = s end") == LUA_OK);
    lua_gc(L, LUA_GCCOLLECT);
    size_t before = lua_alloc_used(a);
    lua_alloc_set_limit(a, before + 8 * 1024 * 1024);
    int rc = luaL_dostring(L, "return #table.concat(t)");
    lua_alloc_set_limit(a, 0);
    ASSERT(rc != LUA_OK);
    ASSERT_STR_EQ(lua_tostring(L, -1), "not enough memory");
    ASSERT(lua_alloc_take_refused(a) > 0);
    lua_settop(L, 0);
    lua_gc(L, LUA_GCCOLLECT);
    ASSERT(lua_alloc_used(a) < before + 64 * 1024);
    /* Without the limit the same call works. */
    ASSERT(luaL_dostring(L, "return #table.concat(t, '', 1, 3)") == LUA_OK);
    ASSERT_INT_EQ(lua_tointeger(L, -1), 3000000);
    lua_close(L);
    lua_alloc_free(a);
}

/* lua_alloc_trim gives back exactly the pages with no live byte: after
 * 3 MB of small blocks are freed but one, only the page (or two) under the
 * live block stays, its bytes intact; the pages given back are carved again
 * before any new chunk is mapped; with nothing live, nothing stays. */
TEST(lua_alloc_trim_gives_back_free_pages)
{
    enum { N = 3 * 1024 * 1024 / 48 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct lua_alloc *a = lua_alloc_create();
    ASSERT(a != NULL);
    ASSERT_INT_EQ(lua_alloc_trim(a), 0);
    unsigned char **p = malloc(N * sizeof *p);
    ASSERT(p != NULL);
    for (int i = 0; i < N; i++) {
        p[i] = lua_alloc_fn(a, NULL, 0, 48);
        ASSERT(p[i] != NULL);
        memset(p[i], i & 0xff, 48);
    }
    size_t pooled = lua_alloc_pooled(a);
    ASSERT(pooled >= (size_t)N * 48);
    /* Nothing is free yet: at most the newest chunk's uncarved pages go. */
    ASSERT(lua_alloc_trim(a) < 64 * 1024);
    ASSERT(lua_alloc_pooled(a) > pooled - 64 * 1024);
    pooled = lua_alloc_pooled(a);
    int keep = N / 2;
    for (int i = 0; i < N; i++)
        if (i != keep)
            lua_alloc_fn(a, p[i], 48, 0);
    size_t given = lua_alloc_trim(a);
    ASSERT(given > 0);
    ASSERT_INT_EQ(lua_alloc_pooled(a), pooled - given);
    ASSERT(lua_alloc_pooled(a) <= 2 * page);
    for (int k = 0; k < 48; k++)
        ASSERT(p[keep][k] == (keep & 0xff));
    ASSERT_INT_EQ(lua_alloc_used(a), 48);
    /* A second trim finds nothing more. */
    ASSERT_INT_EQ(lua_alloc_trim(a), 0);
    /* A new round of allocations reuses the pages given back (no more
     * memory than the first round) and never overlaps the live block. */
    for (int i = 0; i < N; i++) {
        if (i == keep)
            continue;
        p[i] = lua_alloc_fn(a, NULL, 0, 48);
        ASSERT(p[i] != NULL);
        memset(p[i], 0xee, 48);
    }
    ASSERT(lua_alloc_pooled(a) <= pooled + 64 * 1024);
    for (int k = 0; k < 48; k++)
        ASSERT(p[keep][k] == (keep & 0xff));
    for (int i = 0; i < N; i++)
        lua_alloc_fn(a, p[i], 48, 0);
    ASSERT(lua_alloc_trim(a) > 0);
    ASSERT_INT_EQ(lua_alloc_pooled(a), 0);
    ASSERT_INT_EQ(lua_alloc_used(a), 0);
    /* And from nothing again. */
    void *q = lua_alloc_fn(a, NULL, 0, 100);
    ASSERT(q != NULL);
    lua_alloc_fn(a, q, 100, 0);
    free(p);
    lua_alloc_free(a);
}

/* Trims between random allocations, resizes and frees never lose a live
 * block's bytes (a page given back under a live block would read zeros),
 * and with nothing live nothing stays. */
TEST(lua_alloc_trim_keeps_live_blocks)
{
    struct lua_alloc *a = lua_alloc_create();
    ASSERT(a != NULL);
    static struct slot slots[4096];
    memset(slots, 0, sizeof slots);
    for (int r = 0; r < 200000; r++) {
        struct slot *s = &slots[unit_rand() % 4096];
        if (r % 10000 == 0) {
            lua_alloc_trim(a);
            for (int i = 0; i < 4096; i++)
                ASSERT(slots[i].p == NULL || intact(&slots[i], slots[i].size));
        }
        if (s->p == NULL) {
            s->size = any_size();
            s->p = lua_alloc_fn(a, NULL, 0, s->size);
            ASSERT(s->p != NULL);
            s->fill = (unsigned char)unit_rand();
            fill(s, 0);
        } else if (unit_rand() % 2 == 0) {
            ASSERT(intact(s, s->size));
            lua_alloc_fn(a, s->p, s->size, 0);
            s->p = NULL;
        } else {
            size_t n = any_size();
            unsigned char *q = lua_alloc_fn(a, s->p, s->size, n);
            ASSERT(q != NULL);
            s->p = q;
            size_t kept = s->size < n ? s->size : n;
            ASSERT(intact(s, kept));
            s->size = n;
            fill(s, kept);
        }
    }
    for (int i = 0; i < 4096; i++) {
        if (slots[i].p) {
            ASSERT(intact(&slots[i], slots[i].size));
            lua_alloc_fn(a, slots[i].p, slots[i].size, 0);
        }
    }
    lua_alloc_trim(a);
    ASSERT_INT_EQ(lua_alloc_pooled(a), 0);
    lua_alloc_free(a);
}
