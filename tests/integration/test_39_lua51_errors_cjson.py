"""Tier 39: script errors in Lua 5.1's words, and lua-cjson in scripts.

Differential EVAL sequences against redis-server 7.0, RESP2 and RESP3:
each runtime error form Lua 5.1 words differently from Lua 5.4 (the
operation x the kind of name: local, global, upvalue, field, field '?',
method, none for a constant), the 'for' loop texts, errors from stock
functions, errors raised by redis.call, redis.error_reply and error() (as
the whole reply, and as what pcall and xpcall hand the script); then
cjson: numbers, escapes, sparse arrays, nesting limits, decode errors,
cjson.null, redis.call replies and big numbers.

Known, deliberate differences kept out (README, "Scripts"): arithmetic on
a string that is no number names no variable (Lua 5.4 raises it in the
string's metamethods, which do not know the name); `-0` is an integer 0
in Lua 5.4; a float -0 concatenates as "-0.0"; object keys come out of
cjson.encode in each VM's own hash order (single-key objects here).
"""

import pytest

import harness
from differential import assert_same

SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


E = "EVAL"


def ev(body, *keys, argv=()):
    return [E, body, str(len(keys))] + list(keys) + list(argv)


seq("nil_values", [
    # concatenate / arithmetic / index / call / length x local, upvalue,
    # field, field '?', method, global
    ev("local x; return x .. 'a'"),
    ev("local x; return 'a' .. x"),
    ev("local x; return x + 1"),
    ev("local x; return -x"),
    ev("local x; return x.y"),
    ev("local x; x.y = 1"),
    ev("local x; x()"),
    ev("local x; return #x"),
    ev("local u; return (function() return u .. 'a' end)()"),
    ev("local u; return (function() return u * 2 end)()"),
    ev("local u; return (function() return u.f end)()"),
    ev("local u; return (function() return u() end)()"),
    ev("local t = {} return t.a .. 'x'"),
    ev("local t = {} return t.a - 1"),
    ev("local t = {} return t.a.b"),
    ev("local t = {} t.a.b = 1"),
    ev("local t = {} t.f()"),
    ev("local t = {} return #t.a"),
    ev("local t = {} return t[1] .. 'x'"),
    ev("local t = {} return t[1] % 2"),
    ev("local t = {} return t[1][2]"),
    ev("local t = {} local k = 'a' return t[k].x"),
    ev("local t = {} t[1]()"),
    ev("return KEYS[2] .. ':'", "@k"),
    ev("return ARGV[1] + 1"),
    ev("return #KEYS[1]"),
    ev("return KEYS.a.b"),
    ev("local t = {} t:m()"),
    ev("return ('x'):nosuch()"),
    ev("local n = 5 n:foo()"),
])

seq("other_values", [
    ev("return redis()"),
    ev("return redis .. 'x'"),
    ev("return redis + 1"),
    ev("return _VERSION.x.y"),
    ev("local f = function() end return f.x"),
    ev("local t = {} return t .. 'x'"),
    ev("local s = {} return s * 2"),
    ev("local b = true return b()"),
    ev("local t = {f = 1} t.f()"),
    ev("local t = {f = true} return t.f .. 'x'"),
    ev("local t = {a = {}} return t.a + 1"),
    # constants, for iterators, metamethods: 5.1 names nothing
    ev("return ('x')()"),
    ev("return (1)()"),
    ev("return 'a' + 1"),
    ev("return {} + 'a'"),
    ev("return -{}"),
    ev("return #5"),
    ev("for k in 5 do end"),
    ev("local t = setmetatable({}, {__add = 5}) return t + 1"),
    ev("local t = setmetatable({}, {__index = 5}) return t.x"),
    # comparisons (already the same words)
    ev("return {} < {}"),
    ev("return 1 < 'x'"),
    ev("local x return x < 1"),
    ev("return 'a' <= {}"),
    # 'for' loop texts
    ev("for i = 'a', 2 do end"),
    ev("for i = 1, 'x' do end"),
    ev("for i = 1, 2, {} do end"),
    ev("for i = 1, nil do end"),
    # stock functions' argument errors
    ev("return string.rep()"),
    ev("return string.rep('x')"),
    ev("return math.floor('a')"),
    ev("return string.format('%d', 'x')"),
    ev("return string.sub()"),
    ev("return table.concat({{}})"),
    ev("return tonumber()"),
    ev("return setmetatable(1, {})"),
    # lines: the position and the origin follow the failing line
    ev("local a = 1\nlocal b\nreturn b .. a"),
    ev("local function f(t)\n  return t.x.y\nend\nreturn f({})"),
    ev("local t = {}\n\n\nt:go()"),
])

seq("caught", [
    ev("local ok, e = pcall(function() local x; return x .. 'a' end) return e"),
    ev("local ok, e = pcall(function() local t = {} return t.a.b end) return {tostring(ok), e}"),
    ev("local ok, e = pcall(function() return KEYS[1] + 1 end) return e"),
    ev("local ok, e = pcall(function() for i = 1, 'x' do end end) return e"),
    ev("local ok, e = pcall(function() return redis() end) return e"),
    ev("local ok, e = xpcall(function() local x; return x() end, function(m) return 'h:' .. m end) return e"),
    ev("local ok, e = xpcall(function() local t = {} t:m() end, function(m) return m end) return e"),
    ev("local ok, e = pcall(error, 'plain') return e"),
    ev("local ok, e = pcall(error, {err = 'X t'}) return e"),
    ev("local ok, e = pcall(redis.call, 'incr', KEYS[1]) return e", "@s"),
])

seq("raised", [
    "SET @s text",
    ev("return redis.call('incr', KEYS[1])", "@s"),
    ev("redis.call('incr', KEYS[1]) return 1", "@s"),
    ev("return redis.call('nosuch')"),
    ev("return redis.call('get')"),
    ev("return redis.pcall('incr', KEYS[1])", "@s"),
    ev("return redis.error_reply('My own')"),
    ev("return redis.error_reply('-WRONG way')"),
    ev("error(redis.error_reply('RAISED here'))"),
    ev("error('a string')"),
    ev("error('a string', 0)"),
    ev("error({err = 'CUSTOM error'})"),
    ev("error({err = 'no code'})"),
    ev("error(42)"),
    ev("error()"),
    ev("local t = {}\nerror('line three' .. tostring(#t))"),
])

seq("cjson_encode", [
    ev("return cjson.encode(42)"),
    ev("return cjson.encode(-7)"),
    ev("return cjson.encode(3.25)"),
    ev("return cjson.encode(0.1)"),
    ev("return cjson.encode(1/3)"),
    ev("return cjson.encode(2^53)"),
    ev("return cjson.encode(2^63)"),
    ev("return cjson.encode(1e300)"),
    ev("return cjson.encode(123456789012345)"),
    ev("return cjson.encode(0/-1)"),
    ev("return cjson.encode(1/0)"),
    ev("return cjson.encode(-1/0)"),
    ev("return cjson.encode(0/0)"),
    ev("return cjson.encode({1, 1/0})"),
    ev("return cjson.encode('plain')"),
    ev("return cjson.encode('q\"b\\\\s/n\\nt\\tr\\rb\\bf\\f')"),
    ev("return cjson.encode('\\1\\31\\127')"),
    ev("return cjson.encode('\\195\\169 \\226\\130\\172')"),
    ev("return cjson.encode('')"),
    ev("return cjson.encode({})"),
    ev("return cjson.encode({{}, {{}}})"),
    ev("return cjson.encode(true)"),
    ev("return cjson.encode({true, false})"),
    ev("return cjson.encode(cjson.null)"),
    ev("return cjson.encode({cjson.null, 1})"),
    ev("return cjson.encode({a = {1, 2, 'x'}})"),
    ev("return cjson.encode({[5] = 'x'})"),
    ev("return cjson.encode({[1] = 1, [2] = 2, [10] = 3})"),
    ev("return cjson.encode({[1] = 1, [2] = 2, [12] = 3})"),
    ev("return cjson.encode({[11] = 1})"),
    ev("return cjson.encode({[1] = 1, [3] = 3, [6] = 6})"),
    ev("return cjson.encode({[0] = 'z'})"),
    ev("return cjson.encode({[1.5] = 'h'})"),
    ev("return cjson.encode({[true] = 1})"),
    ev("return cjson.encode(function() end)"),
    ev("return cjson.encode({f = print})"),
    ev("return cjson.encode()"),
    ev("return cjson.encode(1, 2)"),
    ev("local t = {} for i = 1, 999 do t = {t} end return #cjson.encode(t)"),
    ev("local t = {} for i = 1, 1000 do t = {t} end return cjson.encode(t)"),
    ev("local t = {} for i = 1, 1100 do t = {a = t} end return cjson.encode(t)"),
    ev("local t = {} t[1] = t return cjson.encode(t)"),
])

seq("cjson_decode", [
    ev("return cjson.decode('[1,2,3]')"),
    ev("return cjson.decode('{\"a\":{\"b\":[true,false,null]}}').a.b"),
    ev("return cjson.decode('\"q\\\\\"b\\\\\\\\s\\\\/n\\\\n\\\\u00e9\\\\ud83d\\\\ude00\"')"),
    ev("return cjson.decode('3.75')"),
    ev("return tostring(cjson.decode('3.75'))"),
    ev("return tostring(cjson.decode('12')) .. '|' .. cjson.decode('12')"),
    ev("return 'k:' .. cjson.decode('[7]')[1]"),
    ev("return tostring(cjson.decode('1e2'))"),
    ev("return tostring(cjson.decode('123456789012345678'))"),
    ev("return cjson.decode('123456789012345678')"),
    ev("return tostring(cjson.decode('99999999999999'))"),
    ev("return tostring(cjson.decode('100000000000000'))"),
    ev("return tostring(cjson.decode('-5'))"),
    ev("return tostring(cjson.decode('1e400'))"),
    ev("return tostring(cjson.decode('-0'))"),
    ev("return cjson.decode('0x10')"),
    ev("return cjson.decode('[1,2')"),
    ev("return cjson.decode('{\"a\" 1}')"),
    ev("return cjson.decode('{1:2}')"),
    ev("return cjson.decode('[1,]')"),
    ev("return cjson.decode('tru')"),
    ev("return cjson.decode('')"),
    ev("return cjson.decode('[1] x')"),
    ev("return cjson.decode('\"\\\\x\"')"),
    ev("return cjson.decode('\"\\\\u12\"')"),
    ev("return cjson.decode('\"abc')"),
    ev("return cjson.decode('0\\0')"),
    ev("return cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000))[1] ~= nil"),
    ev("return cjson.decode(string.rep('[', 1001))"),
    ev("return cjson.decode(string.rep('{\"a\":', 1200))"),
    ev("return cjson.decode()"),
    ev("return cjson.decode({})"),
    ev("return cjson.decode('1', '2')"),
    ev("return cjson.decode(12)"),
    ev("local ok, e = pcall(cjson.decode, '[') return e"),
    ev("local ok, e = pcall(cjson.encode, 0/0) return e"),
])

seq("cjson_values", [
    "HSET @h f v",
    "RPUSH @l a b c",
    ev("return cjson.decode('null') == cjson.null"),
    ev("return type(cjson.null)"),
    ev("return cjson.null"),
    ev("return {1, cjson.null, 2}"),
    ev("return cjson.encode(cjson.decode('[1,null,\"x\"]'))"),
    ev("return cjson.encode(cjson.decode('{\"k\":null}'))"),
    ev("return cjson.decode('[null]')[1] == cjson.null"),
    ev("return cjson.encode(redis.call('lrange', KEYS[1], 0, -1))", "@l"),
    ev("return cjson.encode(redis.call('hgetall', KEYS[1]))", "@h"),
    ev("return cjson.encode(redis.call('get', KEYS[1]))", "@missing"),
    ev("return cjson.encode(redis.call('set', KEYS[1], 'v'))", "@s"),
    ev("return cjson.encode(redis.call('incr', KEYS[1]))", "@n"),
    ev("return cjson.encode(redis.call('incrby', KEYS[1], 1234567890123456))", "@n"),
    ev("return cjson.encode(cjson.decode(ARGV[1]))", argv=["[1,2.5,-3,\"s\",[true]]"]),
    ev("local v = cjson.decode(ARGV[1]) return redis.call('set', KEYS[1], v.n)", "@j", argv=['{"n":30000}']),
    ev("return redis.call('get', KEYS[1])", "@j"),
    ev("local v = cjson.decode(ARGV[1]) redis.call('set', KEYS[1], 'p:' .. v.id) "
       "return redis.call('get', KEYS[1])", "@j", argv=['{"id":17}']),
    ev("return cjson.encode_max_depth()"),
    ev("return cjson.decode_max_depth()"),
    ev("return cjson.encode_number_precision()"),
    ev("return {cjson.encode_sparse_array()}"),
    ev("return tostring(cjson.encode_keep_buffer())"),
    ev("return tostring(cjson.encode_invalid_numbers())"),
    ev("return tostring(cjson.decode_invalid_numbers())"),
    ev("return cjson.new().encode({1, 2})"),
    ev("return tostring(cjson.new().decode('5'))"),
    ev("return cjson._NAME .. ' ' .. cjson._VERSION"),
    ev("cjson.x = 1"),
])


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_same_as_redis(name, proto, zkr, redis_ref):
    assert_same(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")
