/*
 * test_lua_pattern.c — the bounded Lua 5.1 pattern functions
 * (sidecar/lua_pattern.c).
 *
 * Differential: thousands of generated patterns and subjects, each through
 * the bounded find/match/gmatch/gsub and through a reference built on the
 * VM's own (Lua 5.4) matcher.  find and match are compared with string.find
 * and string.match directly (they agree with 5.1 on what is generated: no
 * %g or %z, no NUL in patterns, no init past the end); gmatch and gsub with
 * 5.1's loops written in Lua over string.find(s, '^' .. p, at), the one
 * step where 5.1 and 5.4 differ (an empty match right after a match).  Then
 * the 5.1 behaviours themselves, the budget, the host's check and the
 * fall back to the stock functions.
 */
#include "lua_pattern.h"
#include "unit.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static struct lua_pattern_budget test_budget;
static int checks;

static void count_check(lua_State *L, void *arg)
{
    (void)L;
    (void)arg;
    checks++;
}

static void budget(lua_State *L, struct lua_pattern_budget *b)
{
    (void)L;
    *b = test_budget;
}

static const struct lua_pattern_host host = {budget};

/* A VM with the bounded functions as global P, bounded by `steps`. */
static lua_State *vm(long long steps)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    test_budget.bounded = 1;
    test_budget.steps = steps;
    test_budget.check = count_check;
    test_budget.arg = NULL;
    lua_pattern_push(L, &host);
    lua_setglobal(L, "P");
    return L;
}

/* Runs chunk; on an error records it as this test's failure. */
static void run(lua_State *L, const char *chunk)
{
    if (luaL_dostring(L, chunk) != LUA_OK)
        unit_fail(__FILE__, __LINE__, "%s", lua_tostring(L, -1));
}

static const char DIFFERENTIAL[] =
    "math.randomseed(15)\n"
    "local R = math.random\n"
    "local function pick(t) return t[R(#t)] end\n"
    "local CLASSES = {'a','b','c','.','%a','%d','%s','%w','%p','%A','[ab]',"
    "'[^a]','[a-c]','[%d]','x','%.','%%'}\n"
    "local REPS = {'','','','*','+','-','?'}\n"
    "local function item(depth)\n"
    "  local k = R(12)\n"
    "  if k == 1 and depth < 3 then\n"
    "    local inner = {} for i = 1, R(3) do inner[i] = item(depth + 1) end\n"
    "    return '(' .. table.concat(inner) .. ')'\n"
    "  elseif k == 2 then return '()'\n"
    "  elseif k == 3 then return '%b()'\n"
    "  elseif k == 4 then return pick({'%f[%w]','%f[%W]','%f[a]'})\n"
    "  end\n"
    "  return pick(CLASSES) .. pick(REPS)\n"
    "end\n"
    "local function pattern()\n"
    "  local t = {} for i = 1, R(5) do t[i] = item(0) end\n"
    "  local p = table.concat(t)\n"
    "  if R(4) == 1 then p = '^' .. p end\n"
    "  if R(4) == 1 then p = p .. '$' end\n"
    "  if R(8) == 1 and p:find('%(', 1, true) then p = p .. '%1' end\n"
    "  if R(30) == 1 then p = p:sub(1, R(#p)) end -- maybe malformed\n"
    "  return p\n"
    "end\n"
    "local function subject()\n"
    "  local t = {} for i = 1, R(0, 14) do t[i] = pick({'a','b','c','(',')',"
    "' ','1','x','.','%'}) end\n"
    "  return table.concat(t)\n"
    "end\n"
    "local function pack(ok, ...)\n"
    "  if not ok then return 'error' end\n"
    "  local t = table.pack(...)\n"
    "  for i = 1, t.n do t[i] = tostring(t[i]) end\n"
    "  return table.concat(t, '|', 1, t.n)\n"
    "end\n"
    "-- 5.1's gmatch and gsub, on the stock anchored find.\n"
    "local function captures(s, from, r)\n"
    "  if #r == 2 then return {s:sub(from, r[2])} end\n"
    "  return table.move(r, 3, #r, 1, {})\n"
    "end\n"
    "local function ref_gmatch(s, p)\n"
    "  local out, at = {}, 1\n"
    "  while at <= #s + 1 do\n"
    "    local r = {string.find(s, '^' .. p, at)}\n"
    "    if r[1] then\n"
    "      out[#out + 1] = table.concat((function(c) for i = 1, #c do c[i] = "
    "tostring(c[i]) end return c end)(captures(s, at, r)), ',')\n"
    "      at = r[2] + 1 + (r[2] + 1 == at and 1 or 0)\n"
    "    else at = at + 1 end\n"
    "  end\n"
    "  return table.concat(out, '|')\n"
    "end\n"
    "local function bounded_gmatch(s, p)\n"
    "  local out = {}\n"
    "  local it = P.gmatch(s, p)\n"
    "  while true do\n"
    "    local t = table.pack(it())\n"
    "    if t[1] == nil then break end\n"
    "    for i = 1, t.n do t[i] = tostring(t[i]) end\n"
    "    out[#out + 1] = table.concat(t, ',', 1, t.n)\n"
    "  end\n"
    "  return table.concat(out, '|')\n"
    "end\n"
    "local function expand(repl, whole, caps)\n"
    "  return (repl:gsub('%%(.)', function(d)\n"
    "    if d == '0' then return whole end\n"
    "    if d:find('%d') then\n"
    "      local i = tonumber(d)\n"
    "      if #caps == 0 and i == 1 then return whole end\n"
    "      if caps[i] == nil then error('invalid capture index') end\n"
    "      return tostring(caps[i])\n"
    "    end\n"
    "    return d\n"
    "  end))\n"
    "end\n"
    "local function ref_gsub(s, p, repl, max)\n"
    "  local anchor = p:sub(1, 1) == '^'\n"
    "  if anchor then p = p:sub(2) end\n"
    "  local out, at, n = {}, 1, 0\n"
    "  while n < (max or #s + 1) do\n"
    "    local r = {string.find(s, '^' .. p, at)}\n"
    "    local e\n"
    "    if r[1] then\n"
    "      e = r[2] + 1\n"
    "      n = n + 1\n"
    "      local whole, caps = s:sub(at, r[2]), table.move(r, 3, #r, 1, {})\n"
    "      if type(repl) == 'string' then out[#out + 1] = expand(repl, whole, "
    "caps)\n"
    "      else\n"
    "        local v = repl(table.unpack(#caps > 0 and caps or {whole}))\n"
    "        out[#out + 1] = v and tostring(v) or whole\n"
    "      end\n"
    "    end\n"
    "    if e and e > at then at = e\n"
    "    elseif at <= #s then out[#out + 1] = s:sub(at, at) at = at + 1\n"
    "    else break end\n"
    "    if anchor then break end\n"
    "  end\n"
    "  out[#out + 1] = s:sub(at)\n"
    "  return table.concat(out), n\n"
    "end\n"
    "local function fn_repl(...)\n"
    "  local t = {...}\n"
    "  if #t > 0 and tostring(t[1]):find('b') then return false end\n"
    "  for i = 1, #t do t[i] = tostring(t[i]) end\n"
    "  return '<' .. table.concat(t, ',') .. '>'\n"
    "end\n"
    "local compared = 0\n"
    "for round = 1, 4000 do\n"
    "  local p, s = pattern(), subject()\n"
    "  local init = R(-#s - 2, #s + 1)\n"
    "  local function same(what, a, b)\n"
    "    if a ~= b then error(string.format('%s differs for s=%q p=%q init=%d: "
    "%s vs %s', what, s, p, init, a, b), 0) end\n"
    "    compared = compared + 1\n"
    "  end\n"
    "  same('find', pack(pcall(P.find, s, p, init)), pack(pcall(string.find, "
    "s, p, init)))\n"
    "  same('match', pack(pcall(P.match, s, p, init)), "
    "pack(pcall(string.match, "
    "s, p, init)))\n"
    "  same('plain find', pack(pcall(P.find, s, p, init, true)), "
    "pack(pcall(string.find, s, p, init, true)))\n"
    "  -- (the reference's find pushes every capture: an unfinished one\n"
    "  -- errs where gsub with no %1 would not)\n"
    "  if pcall(string.find, s, p) then\n"
    "  same('gmatch', pack(pcall(bounded_gmatch, s, p)), "
    "pack(pcall(ref_gmatch, "
    "s, p)))\n"
    "  local repl = pick({'-', '[%0]', '%1', '%2%1', '%%', 'x%1y'})\n"
    "  local max = R(3) == 1 and R(0, 3) or nil\n"
    "  same('gsub', pack(pcall(P.gsub, s, p, repl, max)), pack(pcall(ref_gsub, "
    "s, p, repl, max)))\n"
    "  same('gsub function', pack(pcall(P.gsub, s, p, fn_repl)), "
    "pack(pcall(ref_gsub, s, p, fn_repl)))\n"
    "  end\n"
    "end\n"
    "assert(compared > 20000, compared)\n";

TEST(lua_pattern_agrees_with_lua_on_generated_patterns)
{
    lua_State *L = vm(1LL << 40);
    run(L, DIFFERENTIAL);
    lua_close(L);
}

TEST(lua_pattern_keeps_lua_5_1_behaviours)
{
    lua_State *L = vm(1LL << 40);
    run(L,
        "local function same(a, b) assert(a == b, tostring(a) .. ' vs ' .. "
        "tostring(b)) end\n"
        "-- an init past the end is the end\n"
        "same(select(1, P.find('abc', '', 10)), 4)\n"
        "same(P.match('abc', '', 10), '')\n"
        "same(P.find('abc', 'b', 10), nil)\n"
        "-- an empty match right after a match counts\n"
        "local r, n = P.gsub('hello world', '%w*', '-')\n"
        "same(r, '-- --') same(n, 4)\n"
        "local t = {} for w in P.gmatch('hello world', '%w*') do t[#t + 1] = "
        "w end\n"
        "same(table.concat(t, '|'), 'hello||world|')\n"
        "-- '%' before a non-digit in a replacement is that character\n"
        "same(P.gsub('abc', 'b', '%x'), 'axc')\n"
        "same(P.gsub('a-b', '-', '%-'), 'a-b')\n"
        "same(P.gsub('ab', 'b', '%'), 'a\\0')\n"
        "-- %z is NUL, %g a plain g; a pattern ends at its first NUL\n"
        "same(P.find('a\\0b', '%z'), 2)\n"
        "same(P.match('g1', '%g'), 'g') same(P.match('x1', '%g'), nil)\n"
        "same(P.match('ab', 'a\\0c'), 'a')\n"
        "same(select(2, P.find('xa\\0c', 'a\\0c')), 4) -- plain: all of it\n"
        "-- a back-reference to a position capture never matches\n"
        "same(P.match('aa', '()a%1'), nil)\n"
        "-- fractions are truncated\n"
        "same(P.find('abc', 'c', 2.9), 3)\n"
        "same(select(2, P.gsub('aaa', 'a', 'b', 2.5)), 2)\n"
        "-- gmatch has no anchor and no init\n"
        "same(P.gmatch('a', '^a')(), nil) same(P.gmatch('^a', '^a')(), '^a')\n"
        "-- errors\n"
        "local function err(f, ...) local ok, e = pcall(f, ...) assert(not "
        "ok, 'no error for ' .. tostring(select(2, ...))) return e end\n"
        "assert(err(P.find, 'a', '[a'):find(\"missing ']'\", 1, true))\n"
        "assert(err(P.find, 'a', 'a%'):find(\"ends with '%'\", 1, true))\n"
        "assert(err(P.find, 'a', '(a'):find('unfinished capture', 1, true))\n"
        "assert(err(P.match, 'a', 'a)'):find('invalid pattern capture', 1, "
        "true))\n"
        "assert(err(P.find, 'a', '%1'):find('invalid capture index', 1, "
        "true))\n"
        "assert(err(P.find, 'a', '%b'):find('unbalanced pattern', 1, true))\n"
        "assert(err(P.find, 'a', '%fa'):find(\"missing '['\", 1, true))\n"
        "assert(err(P.gsub, 'a', 'a', true):find('string/function/table', 1, "
        "true))\n"
        "assert(err(P.gsub, 'a', 'a', {a = {}}):find('invalid replacement "
        "value (a table)', 1, true))\n"
        "assert(err(P.find, 'a', string.rep('(', 40)):find('too many "
        "captures', 1, true))\n"
        "assert(err(P.find, string.rep('a', 300), string.rep('a?', "
        "300)):find('pattern too complex', 1, true))\n");
    lua_close(L);
}

TEST(lua_pattern_stops_at_its_budget)
{
    lua_State *L = vm(1000000);
    checks = 0;
    run(L, "local ok, e = pcall(P.find, string.rep('a', 300), "
           "'.-.-.-x')\n"
           "assert(not ok and e:find('pattern too complex (the match "
           "ran past its budget of 1000000 steps)', 1, true), e)\n"
           "ok, e = pcall(P.gsub, string.rep('a', 200), '.-.-x', 'b')\n"
           "assert(not ok and e:find('pattern too complex', 1, true))\n"
           "ok, e = pcall(P.gmatch(string.rep('(', 2000), '%b()'))\n"
           "assert(not ok and e:find('pattern too complex', 1, true))\n"
           "-- linear work within the budget goes through\n"
           "assert(select(2, P.gsub(string.rep('ab', 50000), 'a', "
           "'c')) == 50000)\n");
    lua_close(L);
    /* The host's check ran every LUA_PATTERN_CHECK_EVERY steps. */
    ASSERT(checks >= 1000000 / LUA_PATTERN_CHECK_EVERY);
}

/* Outside client code (budget.bounded 0) the VM's own function runs. */
TEST(lua_pattern_falls_back_to_the_stock_functions)
{
    lua_State *L = vm(1000);
    test_budget.bounded = 0;
    run(L, "local ok, e = pcall(P.gsub, 'abc', 'b', '%x')\n"
           "assert(not ok and e:find(\"invalid use of '%' in "
           "replacement string\", 1, true), e)\n"
           "assert(P.find('abc', '', 10) == nil)\n"
           "local t = {} for w in P.gmatch('hello world', '%w*') do "
           "t[#t + 1] = w end\n"
           "assert(table.concat(t, '|') == 'hello|world', "
           "table.concat(t, '|'))\n"
           "assert(P.match(string.rep('a', 5000) .. 'b', '.-.-b') ~= "
           "nil)\n");
    lua_close(L);
}
