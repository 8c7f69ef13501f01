/*
 * lua_alloc.c — size-class free lists for the Lua VM (see lua_alloc.h).
 *
 *   nsize 1..512      class (nsize - 1) / 16          -> free list -> chunk
 *   nsize 513..4096   class 32 + (nsize - 513) / 256  -> free list -> chunk
 *   nsize > 4096      malloc / realloc / free
 *
 * Lua always tells the allocator a block's size when it frees or resizes
 * it (osize), so a block needs no header: its class follows from osize.
 * The same sizes keep `used` exact, and let a limit refuse growth before
 * anything is allocated.
 *
 * lua_alloc_trim (when the VM is idle) finds the chunks whose every block
 * is on a free list and gives them back to malloc:
 *
 *   chunks sorted by address -> each free block counted to its chunk
 *   -> a chunk with free == carved is dropped from the lists and freed
 */
#include "lua_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GRAIN 16 /* class width up to FINE */
#define FINE 512
#define COARSE 256 /* class width from FINE to LUA_ALLOC_SMALL */
#define FINE_CLASSES (FINE / GRAIN)
#define CLASSES (FINE_CLASSES + (LUA_ALLOC_SMALL - FINE) / COARSE)
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
    struct chunk *carving;       /* the chunk tail..end belongs to */
    char *tail, *end;            /* the newest chunk's unused part */
    size_t used;                 /* bytes handed out to Lua */
    size_t nchunks;              /* chunks held */
    size_t limit;                /* refuse growth past this (0: none) */
    unsigned long refused;       /* requests refused since last taken */
};

/* The class of a small size (1..LUA_ALLOC_SMALL). */
static size_t class_of(size_t n)
{
    if (n <= FINE)
        return (n - 1) / GRAIN;
    return FINE_CLASSES + (n - FINE - 1) / COARSE;
}

/* The bytes of a block of class k. */
static size_t class_size(size_t k)
{
    if (k < FINE_CLASSES)
        return (k + 1) * GRAIN;
    return FINE + (k - FINE_CLASSES + 1) * COARSE;
}

/* The largest class whose blocks fit in n bytes (n >= GRAIN). */
static size_t class_within(size_t n)
{
    if (n >= LUA_ALLOC_SMALL)
        return CLASSES - 1;
    if (n >= FINE + COARSE)
        return FINE_CLASSES + (n - FINE) / COARSE - 1;
    return (n < FINE ? n : FINE) / GRAIN - 1;
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
    size_t size = class_size(k);
    if ((size_t)(a->end - a->tail) < size) {
        /* The rest of the old chunk is given to the lists it fits. */
        while ((size_t)(a->end - a->tail) >= GRAIN) {
            size_t j = class_within((size_t)(a->end - a->tail));
            struct block *r = (struct block *)a->tail;
            r->next = a->free[j];
            a->free[j] = r;
            a->tail += class_size(j);
        }
        size_t head = (sizeof(struct chunk) + GRAIN - 1) / GRAIN * GRAIN;
        struct chunk *c = malloc(head + CHUNK);
        if (!c)
            return NULL;
        c->next = a->chunks;
        a->chunks = c;
        a->nchunks++;
        a->carving = c;
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

size_t lua_alloc_used(const struct lua_alloc *a)
{
    return a->used;
}

size_t lua_alloc_set_limit(struct lua_alloc *a, size_t limit)
{
    size_t old = a->limit;
    a->limit = limit;
    return old;
}

size_t lua_alloc_pooled(const struct lua_alloc *a)
{
    return a->nchunks * CHUNK;
}

/* What lua_alloc_trim knows of one chunk. */
struct span {
    char *start; /* its first block */
    size_t free; /* bytes of it on the free lists */
    size_t size; /* bytes carved from it (CHUNK but for the newest) */
    struct chunk *c;
};

static int span_cmp(const void *x, const void *y)
{
    uintptr_t a = (uintptr_t)((const struct span *)x)->start;
    uintptr_t b = (uintptr_t)((const struct span *)y)->start;
    return a < b ? -1 : a > b;
}

/* The span holding p, or NULL (a binary search of the sorted spans). */
static struct span *span_of(struct span *s, size_t n, const void *p)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)p < (uintptr_t)s[mid].start)
            hi = mid;
        else if ((uintptr_t)p >= (uintptr_t)s[mid].start + CHUNK)
            lo = mid + 1;
        else
            return &s[mid];
    }
    return NULL;
}

size_t lua_alloc_trim(struct lua_alloc *a)
{
    if (a->nchunks == 0)
        return 0;
    struct span *s = malloc(a->nchunks * sizeof *s);
    if (!s)
        return 0;
    size_t head = (sizeof(struct chunk) + GRAIN - 1) / GRAIN * GRAIN;
    size_t n = 0;
    for (struct chunk *c = a->chunks; c; c = c->next, n++) {
        s[n].c = c;
        s[n].start = (char *)c + head;
        s[n].free = 0;
        /* Every byte of an older chunk went to Lua or to a free list; the
         * newest one is carved up to tail. */
        s[n].size = c == a->carving ? (size_t)(a->tail - s[n].start) : CHUNK;
    }
    qsort(s, n, sizeof *s, span_cmp);
    for (size_t k = 0; k < CLASSES; k++)
        for (struct block *b = a->free[k]; b; b = b->next) {
            struct span *sp = span_of(s, n, b);
            if (sp)
                sp->free += class_size(k);
        }
    /* A chunk is released when all of it is free; the newest one too (the
     * next block then starts a new chunk). */
    size_t released = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].free != s[i].size) {
            s[i].c = NULL; /* kept */
            continue;
        }
        released++;
        if (s[i].c == a->carving) {
            a->carving = NULL;
            a->tail = a->end = NULL;
        }
    }
    if (released) {
        for (size_t k = 0; k < CLASSES; k++) {
            struct block **pp = &a->free[k];
            while (*pp) {
                struct span *sp = span_of(s, n, *pp);
                if (sp && sp->c)
                    *pp = (*pp)->next;
                else
                    pp = &(*pp)->next;
            }
        }
        for (struct chunk **cp = &a->chunks; *cp;) {
            struct span *sp = span_of(s, n, (char *)*cp + head);
            if (sp && sp->c) {
                struct chunk *dead = *cp;
                *cp = dead->next;
                free(dead);
                a->nchunks--;
            } else {
                cp = &(*cp)->next;
            }
        }
    }
    free(s);
    return released * CHUNK;
}

unsigned long lua_alloc_take_refused(struct lua_alloc *a)
{
    unsigned long n = a->refused;
    a->refused = 0;
    return n;
}

/* The block resized (or made, or freed) as Lua asked; the caller keeps the
 * count. */
static void *resize(struct lua_alloc *a, void *ptr, size_t osize, size_t nsize)
{
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

void *lua_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct lua_alloc *a = ud;
    if (!ptr)
        osize = 0; /* then osize only says what kind of object it is */
    if (nsize > osize && a->limit &&
        (nsize - osize > a->limit || a->used > a->limit - (nsize - osize))) {
        a->refused++;
        return NULL;
    }
    void *p = resize(a, ptr, osize, nsize);
    if (p || nsize == 0)
        a->used = a->used - osize + nsize;
    return p;
}
