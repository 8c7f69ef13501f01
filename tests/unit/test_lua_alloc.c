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

#include <stdint.h>
#include <stdlib.h>

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
