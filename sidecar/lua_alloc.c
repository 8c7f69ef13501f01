/*
 * lua_alloc.c — size-class free lists for the Lua VM (see lua_alloc.h).
 *
 *   nsize 1..512   class (nsize - 1) / 16  ->  free list  ->  chunk tail
 *   nsize > 512    malloc / realloc / free
 *
 * Lua always tells the allocator a block's size when it frees or resizes
 * it (osize), so a block needs no header: its class follows from osize.
 */
#include "lua_alloc.h"

#include <stdlib.h>
#include <string.h>

#define GRAIN 16
#define CLASSES (LUA_ALLOC_SMALL / GRAIN)
#define CHUNK (64 * 1024)

/* LUA_ALLOC_POOLED=1 keeps the free lists under ASan (the unit test). */
#if defined(LUA_ALLOC_POOLED)
#define POOLED LUA_ALLOC_POOLED
#elif defined(__SANITIZE_ADDRESS__)
#define POOLED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOLED 0
#endif
#endif
#ifndef POOLED
#define POOLED 1
#endif

struct chunk {
    struct chunk *next;
    /* The blocks follow, aligned like max_align_t. */
};

struct block {
    struct block *next;
};

struct lua_alloc {
    struct block *free[CLASSES]; /* per class, blocks Lua gave back */
    struct chunk *chunks;        /* every chunk, for lua_alloc_free */
    char *tail, *end;            /* the newest chunk's unused part */
};

/* The class of a small size (1..LUA_ALLOC_SMALL). */
static size_t class_of(size_t n)
{
    return (n - 1) / GRAIN;
}

static int small(size_t n)
{
    return POOLED && n > 0 && n <= LUA_ALLOC_SMALL;
}

struct lua_alloc *lua_alloc_create(void)
{
    return calloc(1, sizeof(struct lua_alloc));
}

void lua_alloc_free(struct lua_alloc *a)
{
    if (!a)
        return;
    struct chunk *c = a->chunks;
    while (c) {
        struct chunk *next = c->next;
        free(c);
        c = next;
    }
    free(a);
}

/* A block of class k, or NULL when out of memory. */
static void *take(struct lua_alloc *a, size_t k)
{
    struct block *b = a->free[k];
    if (b) {
        a->free[k] = b->next;
        return b;
    }
    size_t size = (k + 1) * GRAIN;
    if ((size_t)(a->end - a->tail) < size) {
        /* The rest of the old chunk is given to the lists it fits. */
        while ((size_t)(a->end - a->tail) >= GRAIN) {
            size_t left = (size_t)(a->end - a->tail);
            size_t j = class_of(left < LUA_ALLOC_SMALL ? left / GRAIN * GRAIN
                                                       : LUA_ALLOC_SMALL);
            struct block *r = (struct block *)a->tail;
            r->next = a->free[j];
            a->free[j] = r;
            a->tail += (j + 1) * GRAIN;
        }
        size_t head = (sizeof(struct chunk) + GRAIN - 1) / GRAIN * GRAIN;
        struct chunk *c = malloc(head + CHUNK);
        if (!c)
            return NULL;
        c->next = a->chunks;
        a->chunks = c;
        a->tail = (char *)c + head;
        a->end = a->tail + CHUNK;
    }
    void *p = a->tail;
    a->tail += size;
    return p;
}

static void give(struct lua_alloc *a, void *p, size_t k)
{
    struct block *b = p;
    b->next = a->free[k];
    a->free[k] = b;
}

void *lua_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct lua_alloc *a = ud;
    if (!ptr)
        osize = 0; /* then osize only says what kind of object it is */
    if (nsize == 0) {
        if (small(osize))
            give(a, ptr, class_of(osize));
        else
            free(ptr);
        return NULL;
    }
    if (!small(nsize)) {
        if (!small(osize))
            return realloc(ptr, nsize);
        void *n = malloc(nsize);
        if (n && ptr) {
            memcpy(n, ptr, osize);
            give(a, ptr, class_of(osize));
        }
        return n;
    }
    if (small(osize) && class_of(osize) == class_of(nsize))
        return ptr;
    void *n = take(a, class_of(nsize));
    if (!n)
        return NULL;
    if (ptr) {
        memcpy(n, ptr, osize < nsize ? osize : nsize);
        if (small(osize))
            give(a, ptr, class_of(osize));
        else
            free(ptr);
    }
    return n;
}
