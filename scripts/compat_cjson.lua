-- compat_cjson.lua — the parts of lua-cjson that Redis scripts use:
-- cjson.encode, cjson.decode and cjson.null (the reply null, so that a
-- decoded null returned by a script answers a null reply, as in Redis).

local J = {}

function J.new(null)
    local C = { null = null }

    local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
                  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["/"] = "\\/" }

    local function str(s)
        return '"' .. s:gsub('[%c"\\/]', function(c)
            return ESC[c] or string.format("\\u%04x", c:byte())
        end) .. '"'
    end

    local function num(n)
        if math.type(n) == "integer" then return string.format("%d", n) end
        if n ~= n or n == math.huge or n == -math.huge then
            error("Cannot serialise number: must not be NaN or Inf", 0)
        end
        return string.format("%.14g", n)
    end

    local encode
    local function array_len(t)
        local max, n = 0, 0
        for k in pairs(t) do
            if math.type(k) ~= "integer" or k < 1 then return nil end
            if k > max then max = k end
            n = n + 1
        end
        if max > 10 and max > n * 2 then return nil end -- cjson's sparse rule
        return max
    end

    encode = function(v, depth)
        local tv = type(v)
        if v == nil or v == null then return "null" end
        if tv == "boolean" then return v and "true" or "false" end
        if tv == "number" then return num(v) end
        if tv == "string" then return str(v) end
        if tv ~= "table" then error("Cannot serialise " .. tv .. ": type not supported", 0) end
        if depth > 1000 then error("Cannot serialise, excessive nesting (1001)", 0) end
        local n = array_len(v)
        local out = {}
        if n and (n > 0 or next(v) == nil) and not (n == 0) then
            for i = 1, n do out[i] = encode(v[i], depth + 1) end
            return "[" .. table.concat(out, ",") .. "]"
        end
        if n == 0 then return "{}" end
        for k, val in pairs(v) do
            local tk = type(k)
            if tk == "number" then k = num(k)
            elseif tk ~= "string" then error("Cannot serialise " .. tk .. ": table key must be a number or string", 0) end
            out[#out + 1] = str(k) .. ":" .. encode(val, depth + 1)
        end
        return "{" .. table.concat(out, ",") .. "}"
    end

    function C.encode(v)
        return encode(v, 0)
    end

    local function decode_error(s, i, what)
        error(string.format("Expected %s but found invalid token at character %d", what, i), 0)
    end

    local function skip(s, i)
        return s:find("[^ \t\r\n]", i) or #s + 1
    end

    local value
    local function string_at(s, i)
        local out, j = {}, i + 1
        while true do
            local c = s:sub(j, j)
            if c == "" then decode_error(s, i, "string") end
            if c == '"' then return table.concat(out), j + 1 end
            if c == "\\" then
                local e = s:sub(j + 1, j + 1)
                local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
                if map[e] then
                    out[#out + 1] = map[e]
                    j = j + 2
                elseif e == "u" then
                    local hex = s:sub(j + 2, j + 5)
                    if not hex:find("^%x%x%x%x$") then decode_error(s, j, "unicode escape") end
                    out[#out + 1] = utf8.char(tonumber(hex, 16))
                    j = j + 6
                else
                    decode_error(s, j, "escape")
                end
            else
                out[#out + 1] = c
                j = j + 1
            end
        end
    end

    value = function(s, i, depth)
        if depth > 1000 then error("Found too many nested data structures (1001)", 0) end
        i = skip(s, i)
        local c = s:sub(i, i)
        if c == "{" then
            local t = {}
            i = skip(s, i + 1)
            if s:sub(i, i) == "}" then return t, i + 1 end
            while true do
                if s:sub(i, i) ~= '"' then decode_error(s, i, "object key string") end
                local k
                k, i = string_at(s, i)
                i = skip(s, i)
                if s:sub(i, i) ~= ":" then decode_error(s, i, "colon") end
                t[k], i = value(s, i + 1, depth + 1)
                i = skip(s, i)
                local d = s:sub(i, i)
                if d == "}" then return t, i + 1 end
                if d ~= "," then decode_error(s, i, "comma or object end") end
                i = skip(s, i + 1)
            end
        elseif c == "[" then
            local t, n = {}, 0
            i = skip(s, i + 1)
            if s:sub(i, i) == "]" then return t, i + 1 end
            while true do
                n = n + 1
                t[n], i = value(s, i, depth + 1)
                i = skip(s, i)
                local d = s:sub(i, i)
                if d == "]" then return t, i + 1 end
                if d ~= "," then decode_error(s, i, "comma or array end") end
                i = i + 1
            end
        elseif c == '"' then
            return string_at(s, i)
        elseif s:find("^true", i) then
            return true, i + 4
        elseif s:find("^false", i) then
            return false, i + 5
        elseif s:find("^null", i) then
            return null, i + 4
        else
            local lit = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
            if not lit or lit == "" or lit == "-" then decode_error(s, i, "value") end
            local n = math.tointeger(tonumber(lit)) or tonumber(lit)
            if n == nil then decode_error(s, i, "value") end
            return n, i + #lit
        end
    end

    function C.decode(s)
        if type(s) ~= "string" then error("bad argument #1 to 'decode' (string expected)", 0) end
        local v, i = value(s, 1, 0)
        i = skip(s, i)
        if i <= #s then decode_error(s, i, "the end") end
        return v
    end

    return C
end

return J
