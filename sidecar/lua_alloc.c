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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GRAIN 16 /* class width up to FINE */
#define FINE 512
#define COARSE 256 /* class width from FINE to LUA_ALLOC_SMALL */
#define FINE_CLASSES (FINE / GRAIN)
#define CLASSES (FINE_CLASSES + (LUA_ALLOC_SMALL - FINE) / COARSE)
#define CHUNK (64 * 1024) /* at least; one page where pages are larger */
#define MAX_PAGES 16      /* pages of a chunk (4 KiB pages or larger) */

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

struct block {
    struct block *next;
};

/* A chunk: chunk bytes of mapped memory.  `released` has a bit per page
 * given back by lua_alloc_trim and not yet carved again. */
struct chunk {
    char *base;
    unsigned released;
};

struct lua_alloc {
    struct block *free[CLASSES]; /* per class, blocks Lua gave back */
    struct chunk *chunks;        /* every chunk, by address */
    size_t nchunks, cap;
    size_t page, chunk;    /* page size; chunk size, a multiple of it */
    size_t released;       /* pages given back and not carved again */
    char *tail, *end;      /* the part being carved */
    size_t used;           /* bytes handed out to Lua */
    size_t limit;          /* refuse growth past this (0: none) */
    unsigned long refused; /* requests refused since last taken */
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
    struct lua_alloc *a = calloc(1, sizeof(struct lua_alloc));
    if (!a)
        return NULL;
    long pg = sysconf(_SC_PAGESIZE);
    a->page = pg > 0 ? (size_t)pg : 4096;
    a->chunk = a->page >= CHUNK ? a->page : CHUNK;
    if (a->chunk / a->page > MAX_PAGES)
        a->page = a->chunk / MAX_PAGES; /* pages smaller than 4 KiB */
    return a;
}

void lua_alloc_free(struct lua_alloc *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->nchunks; i++)
        munmap(a->chunks[i].base, a->chunk);
    free(a->chunks);
    free(a);
}

/* Lists the bytes p..end (16-byte aligned) as free blocks, largest first. */
static void list_range(struct lua_alloc *a, char *p, char *end)
{
    while ((size_t)(end - p) >= GRAIN) {
        size_t j = class_within((size_t)(end - p));
        struct block *r = (struct block *)p;
        r->next = a->free[j];
        a->free[j] = r;
        p += class_size(j);
    }
}

/* The index of the chunk holding p, or nchunks (a binary search). */
static size_t chunk_of(const struct lua_alloc *a, const void *p)
{
    size_t lo = 0, hi = a->nchunks;
    uintptr_t u = (uintptr_t)p;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uintptr_t b = (uintptr_t)a->chunks[mid].base;
        if (u < b)
            hi = mid;
        else if (u >= b + a->chunk)
            lo = mid + 1;
        else
            return mid;
    }
    return a->nchunks;
}

/* Makes a new carving area: the first run of pages given back, lowest
 * address first, else a new chunk.  0, or -1 when out of memory. */
static int refill(struct lua_alloc *a)
{
    if (a->released) {
        for (size_t i = 0; i < a->nchunks; i++) {
            struct chunk *c = &a->chunks[i];
            if (!c->released)
                continue;
            unsigned first = (unsigned)__builtin_ctz(c->released), n = 0;
            while (first + n < MAX_PAGES && (c->released >> (first + n) & 1))
                c->released &= ~(1u << (first + n++));
            a->released -= n;
            a->tail = c->base + first * a->page;
            a->end = a->tail + n * a->page;
            return 0;
        }
    }
    if (a->nchunks == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        struct chunk *t = realloc(a->chunks, cap * sizeof *t);
        if (!t)
            return -1;
        a->chunks = t;
        a->cap = cap;
    }
    void *m = mmap(NULL, a->chunk, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    size_t i = a->nchunks;
    while (i > 0 && (uintptr_t)a->chunks[i - 1].base > (uintptr_t)m) {
        a->chunks[i] = a->chunks[i - 1];
        i--;
    }
    a->chunks[i].base = m;
    a->chunks[i].released = 0;
    a->nchunks++;
    a->tail = m;
    a->end = a->tail + a->chunk;
    return 0;
}

/* A block of class k, or NULL when out of memory. */
static void *take(struct lua_alloc *a, size_t k)
{
    struct block *b = a->free[k];
    if (b) {
        /* The new head is read at the next take of class k: a block freed
         * long ago (a collection's sweep) is out of the cache by then, and
         * that read was most of this allocator's time. */
        a->free[k] = b->next;
        if (b->next)
            __builtin_prefetch(b->next);
        return b;
    }
    size_t size = class_size(k);
    if ((size_t)(a->end - a->tail) < size) {
        /* The rest of the old area is given to the lists it fits. */
        list_range(a, a->tail, a->end);
        a->tail = a->end = NULL;
        if (refill(a) < 0)
            return NULL;
    }
    void *p = a->tail;
    a->tail += size;
    return p;
}

size_t lua_alloc_pooled(const struct lua_alloc *a)
{
    return a->nchunks * a->chunk - a->released * a->page;
}

size_t lua_alloc_trim(struct lua_alloc *a)
{
    if (a->nchunks == 0)
        return 0;
    size_t np = a->chunk / a->page;
    /* Bytes free per page of every chunk. */
    size_t *fr = calloc(a->nchunks * np, sizeof *fr);
    if (!fr)
        return 0;
    /* The part being carved counts as free; its whole pages are given
     * back with the rest, its partial first page goes to the lists. */
    if (a->tail) {
        uintptr_t pb = ((uintptr_t)a->tail + a->page - 1) & ~(a->page - 1);
        char *cut = (char *)pb < a->end ? (char *)pb : a->end;
        list_range(a, a->tail, cut);
        size_t ci = chunk_of(a, cut < a->end ? cut : a->end - 1);
        for (char *p = cut; p < a->end; p += a->page)
            fr[ci * np + (size_t)(p - a->chunks[ci].base) / a->page] = a->page;
        a->tail = a->end = NULL;
    }
    for (size_t k = 0; k < CLASSES; k++)
        for (struct block *b = a->free[k]; b; b = b->next) {
            size_t ci = chunk_of(a, b);
            char *base = a->chunks[ci].base;
            char *p = (char *)b, *e = p + class_size(k);
            while (p < e) {
                size_t pg = (size_t)(p - base) / a->page;
                char *pe = base + (pg + 1) * a->page;
                char *q = pe < e ? pe : e;
                fr[ci * np + pg] += (size_t)(q - p);
                p = q;
            }
        }
    /* The wholly free pages, not given back yet. */
    size_t given = 0;
    for (size_t ci = 0; ci < a->nchunks; ci++) {
        struct chunk *c = &a->chunks[ci];
        for (size_t pg = 0; pg < np; pg++) {
            if (c->released >> pg & 1)
                fr[ci * np + pg] = 0; /* already given back */
            else if (fr[ci * np + pg] == a->page)
                given++;
        }
    }
    if (given) {
        /* Off the lists: the blocks on given pages; what of them lies on
         * kept pages is listed again. */
        struct block *old[CLASSES];
        memcpy(old, a->free, sizeof old);
        memset(a->free, 0, sizeof a->free);
        for (size_t k = 0; k < CLASSES; k++) {
            struct block *b = old[k];
            while (b) {
                struct block *next = b->next;
                size_t ci = chunk_of(a, b);
                char *base = a->chunks[ci].base;
                char *p = (char *)b, *e = p + class_size(k);
                size_t p0 = (size_t)(p - base) / a->page;
                size_t p1 = (size_t)(e - 1 - base) / a->page;
                int any = 0;
                for (size_t pg = p0; pg <= p1; pg++)
                    any |= fr[ci * np + pg] == a->page;
                if (!any) {
                    b->next = a->free[k];
                    a->free[k] = b;
                } else {
                    /* Keep the parts on kept pages, page by page. */
                    for (size_t pg = p0; pg <= p1; pg++) {
                        if (fr[ci * np + pg] == a->page)
                            continue;
                        char *lo = base + pg * a->page, *hi = lo + a->page;
                        list_range(a, lo > p ? lo : p, hi < e ? hi : e);
                    }
                }
                b = next;
            }
        }
        for (size_t ci = 0; ci < a->nchunks; ci++) {
            struct chunk *c = &a->chunks[ci];
            for (size_t pg = 0; pg < np;) {
                if (fr[ci * np + pg] != a->page) {
                    pg++;
                    continue;
                }
                size_t run = 0;
                while (pg + run < np && fr[ci * np + pg + run] == a->page) {
                    c->released |= 1u << (pg + run);
                    run++;
                }
                madvise(c->base + pg * a->page, run * a->page, MADV_DONTNEED);
                a->released += run;
                pg += run;
            }
        }
    }
    free(fr);
    /* Chunks given back whole are unmapped. */
    unsigned all = np >= 32 ? ~0u : (1u << np) - 1;
    size_t kept = 0;
    for (size_t ci = 0; ci < a->nchunks; ci++) {
        struct chunk *c = &a->chunks[ci];
        if (c->released == all) {
            munmap(c->base, a->chunk);
            a->released -= np;
        } else {
            a->chunks[kept++] = *c;
        }
    }
    a->nchunks = kept;
    return given * a->page;
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
