/*
 * lua_pattern.h — the pattern functions client scripts get: Lua 5.1's
 * string.find, string.match, string.gmatch and string.gsub (the ones
 * Redis's scripts have), with a step budget per call.
 *
 * Lua's own matcher backtracks in C, where the count hook that enforces a
 * script's time cap never runs: `string.find(string.rep('a', 300),
 * '.-.-.-x')` takes seconds, and the loop with it.  This matcher follows
 * the rules of the Lua 5.1 manual (section 5.4.1) and counts its steps (one
 * per pattern item tried, per character a repetition or %b looks at, per
 * byte a back-reference compares); past the budget the call raises
 * "pattern too complex", and every LUA_PATTERN_CHECK_EVERY steps it calls
 * the host's check (which may raise: the script's time cap).
 *
 * Lua 5.1, not 5.4 (where they differ): %z is NUL and %g is a plain 'g';
 * a pattern ends at its first NUL; an init past the end of the subject is
 * the end; in a gsub replacement string '%' before anything but a digit is
 * that character; gsub and gmatch count an empty match right after a
 * non-empty one; gmatch takes no init; numbers with a fraction are
 * truncated where an integer is expected.  Recursion deeper than 200
 * (pattern items under repetitions and captures) raises "pattern too
 * complex" as in 5.4, where 5.1 would run out of C stack.
 */
#ifndef ZKRESP_LUA_PATTERN_H
#define ZKRESP_LUA_PATTERN_H

#include <lua.h>

#define LUA_PATTERN_CHECK_EVERY 65536

/* What one call may do, filled in by the host's budget function. */
struct lua_pattern_budget {
    /* 0: the call is not a client script's: the stock function of the
     * VM's string library runs instead (the system layer's). */
    int bounded;
    long long steps; /* the most steps this call may take */
    /* Called every LUA_PATTERN_CHECK_EVERY steps with arg (may raise). */
    void (*check)(lua_State *L, void *arg);
    void *arg;
};

struct lua_pattern_host {
    /* Fills b for one call made by L. */
    void (*budget)(lua_State *L, struct lua_pattern_budget *b);
};

/* Pushes a table {find, match, gmatch, gsub} of the bounded functions.
 * host must outlive the VM.  The stock functions they fall back on are
 * read from the global `string` table now. */
void lua_pattern_push(lua_State *L, const struct lua_pattern_host *host);

#endif
