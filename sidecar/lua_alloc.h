/*
 * lua_alloc.h — the Lua VM's allocator: small blocks from size-class lists.
 *
 * Every command runs in its own coroutine and leaves a few hundred small,
 * short-lived objects behind (its argument table, strings, records,
 * closures).  Through glibc's malloc and free they cost about a quarter of
 * the loop thread's CPU under load.  Here a block of up to LUA_ALLOC_SMALL
 * bytes comes from a free list per size class (16 bytes wide up to 512, 256
 * bytes wide above: a coroutine's stack grows through 1, 2 and 4 KiB in a
 * single command), carved from 64 KiB chunks, and goes back to its list when
 * Lua frees it: an allocation is a pointer pop.  Larger blocks go to malloc.
 *
 * Freed small blocks stay on their lists, so after a burst the pool holds
 * the VM's peak; lua_alloc_trim, run when the sidecar is idle after a full
 * collection, gives back to malloc every chunk none of whose blocks is in
 * use (a chunk that still holds one live object stays).  Under
 * AddressSanitizer every block goes to malloc, so that ASan still sees the
 * VM's heap.
 *
 * The allocator also counts the bytes it has handed out (every block at the
 * size Lua asked for, including the buffers lauxlib grows through it
 * directly, which Lua's own count misses) and can refuse growth past a
 * limit: the host arms it while a client script's code runs, so that one C
 * call (a gsub, a table.concat) cannot take the VM past the script's memory
 * cap.  Lua turns a refused request into a "not enough memory" error.
 */
#ifndef ZKRESP_LUA_ALLOC_H
#define ZKRESP_LUA_ALLOC_H

#include <stddef.h>

#define LUA_ALLOC_SMALL 4096

struct lua_alloc;

/* A new, empty allocator, or NULL when out of memory. */
struct lua_alloc *lua_alloc_create(void);

/* Frees every chunk; call after lua_close of the VM that used it. */
void lua_alloc_free(struct lua_alloc *a);

/* The lua_Alloc function; ud is the struct lua_alloc. */
void *lua_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize);

/* Bytes handed out to Lua and not yet given back. */
size_t lua_alloc_used(const struct lua_alloc *a);

/* From now on, a request that grows a block (or makes a new one) and would
 * take lua_alloc_used() past limit bytes is refused (NULL); 0: no limit.
 * Shrinking and freeing never fail, as Lua requires.  Returns the limit it
 * replaces. */
size_t lua_alloc_set_limit(struct lua_alloc *a, size_t limit);

/* Bytes of the chunks small blocks are carved from (in use or free). */
size_t lua_alloc_pooled(const struct lua_alloc *a);

/* Gives every chunk whose blocks are all free back to malloc (they leave
 * the free lists); returns the bytes given back.  O(free blocks x log
 * chunks): for idle moments, not for every command.  Needs a scratch array
 * of a few bytes per chunk from malloc; without it, gives nothing back. */
size_t lua_alloc_trim(struct lua_alloc *a);

/* How many requests were refused since the last call (and resets it). */
unsigned long lua_alloc_take_refused(struct lua_alloc *a);

#endif
