-- sha1.lua — SHA-1 in pure Lua 5.4 (64-bit integers), for EVALSHA and
-- redis.sha1hex.
--
--   sha1.hex(s) -> the 40-character lower-case hex digest of s

local S = {}

local M32 = 0xffffffff

local function rol(x, n)
    return ((x << n) | (x >> (32 - n))) & M32
end

function S.hex(msg)
    local h0, h1, h2, h3, h4 = 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0
    local len = #msg
    msg = msg .. "\128" .. string.rep("\0", (55 - len) % 64) .. string.pack(">I8", len * 8)
    local w = {}
    for chunk = 1, #msg, 64 do
        for i = 0, 15 do
            w[i] = string.unpack(">I4", msg, chunk + i * 4)
        end
        for i = 16, 79 do
            w[i] = rol(w[i - 3] ~ w[i - 8] ~ w[i - 14] ~ w[i - 16], 1)
        end
        local a, b, c, d, e = h0, h1, h2, h3, h4
        for i = 0, 79 do
            local f, k
            if i < 20 then
                f, k = (b & c) | ((~b) & d), 0x5A827999
            elseif i < 40 then
                f, k = b ~ c ~ d, 0x6ED9EBA1
            elseif i < 60 then
                f, k = (b & c) | (b & d) | (c & d), 0x8F1BBCDC
            else
                f, k = b ~ c ~ d, 0xCA62C1D6
            end
            local tmp = (rol(a, 5) + (f & M32) + e + k + w[i]) & M32
            a, b, c, d, e = tmp, a, rol(b, 30), c, d
        end
        h0 = (h0 + a) & M32
        h1 = (h1 + b) & M32
        h2 = (h2 + c) & M32
        h3 = (h3 + d) & M32
        h4 = (h4 + e) & M32
    end
    return string.format("%08x%08x%08x%08x%08x", h0, h1, h2, h3, h4)
end

return S
