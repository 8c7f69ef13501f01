-- locktable.lua — the grant table's text (a native lock node's data,
-- lockstore.lua): its lines, the queue its writer decided on, and the
-- reference its times are written against.
--
--   "<seq> <mode> <token> <lease end> [<converting to> <convert_at> <asked>]"
--                  a granted request (times in leader ms, as estimated by
--                  the writer)
--   "r <ms>"       the writer's estimate of the leader's clock when it wrote
--   "q <name>"     the queue, request by request (up to LT.NAMES_MAX)
--
-- A time in the table counts from the write that committed it: a reader
-- takes `time - ref` after the node's mtime (LT.anchor), so it reads the
-- same lease whatever leader committed the write and whatever clock its
-- writer had learned (a leader change the writer did not know of yet, to
-- a server whose clock is off, moves nothing).  The mtime is stamped after
-- the writer's estimate: a lease read so ends late by the write's round
-- trip, never early.  A table without "r" (a writer before it) is read as
-- written, on the clock of the leader that committed it.

local Z = require "zkio"

local LT = {}

-- Queues longer than this are not written beside the table (a waiter then
-- lists the lock itself after its grant).
LT.NAMES_MAX = 32

local Q_LINE = ("q "):byte(1, 2)
local R_LINE = ("r "):byte(1, 2)

-- The grant table: seq -> {mode, token, lease_end, convert, convert_at,
-- asked}, the queue's names (or nil when it wrote none), and the
-- reference (or nil), as written.
function LT.decode(data)
    local t, names, ref = {}, nil, nil
    data = data or ""
    local at, len = 1, #data
    while at <= len do
        local nl = data:find("\n", at, true) or len + 1
        local b = data:byte(at)
        if (b == Q_LINE or b == R_LINE) and data:byte(at + 1) == 32 then
            if b == R_LINE then
                ref = math.tointeger(tonumber(data:sub(at + 2, nl - 1)))
            elseif nl > at + 2 then
                names = names or {}
                names[#names + 1] = data:sub(at + 2, nl - 1)
            end
        elseif nl > at then
            local seq, mode, token, lease_end, rest = data:sub(at, nl - 1):match("^(%-?%d+) (%u%u) (%d+) (%d+)(.*)$")
            if seq then
                local g = { mode = mode, token = tonumber(token), lease_end = tonumber(lease_end) }
                if rest ~= "" then
                    local conv, cat, asked = rest:match("^ (%u%u) (%-?%d+) (%d+)$")
                    if conv then g.convert, g.convert_at, g.asked = conv, tonumber(cat), tonumber(asked) end
                end
                t[tonumber(seq)] = g
            end
        end
        at = nl + 1
    end
    return t, names, ref
end

-- A time `ms` written against `ref` moved onto the clock of the leader
-- that stamped `mtime`, the write's commit: from then on it maps as that
-- node's times do (Z.local_time).  As written without a reference (nil,
-- or a request's 0) or without a time (0).
function LT.at(ms, ref, mtime)
    if ref and ref ~= 0 and mtime and ms > 0 then return mtime + (ms - ref) end
    return ms
end

-- The times of `lines` (LT.decode's, LT.encode's) so moved (LT.at).
function LT.anchor(lines, ref, mtime)
    for _, g in pairs(lines) do
        g.lease_end = LT.at(g.lease_end, ref, mtime)
        if g.asked then g.asked = LT.at(g.asked, ref, mtime) end
    end
    return lines
end

-- The table of `queue`'s granted entries (leftovers dropped), then the
-- names of queue's requests: the queue the grants were decided on, which a
-- waiter of another sidecar granted by this write takes as its view (the
-- listing its release grants from) instead of listing the lock itself.
-- A time carried unchanged from table `from` as read goes onto the clock
-- of the leader we know (Z.carry), as the reference is.  Also answers what
-- LT.decode reads back from it (lines, names, ref).
function LT.encode(queue, from)
    local out, lines, names = {}, {}, nil
    for _, e in ipairs(queue) do
        if e.granted then
            local lease_end = from and e.lease_end == e.read_lease and Z.carry(e.lease_end, from.mzxid, from.mtime)
                              or e.lease_end or 0 -- (carried from table `from` as read: Z.carry)
            local line = string.format("%d %s %d %d", e.seq, e.granted, e.token, lease_end)
            local g = { mode = e.granted, token = e.token, lease_end = lease_end }
            if e.convert then
                local asked = from and e.asked_convert == e.read_asked and Z.carry(e.asked_convert, from.mzxid,
                                                                                     from.mtime) or e.asked_convert
                line = line .. string.format(" %s %d %d", e.convert, e.convert_at, asked)
                g.convert, g.convert_at, g.asked = e.convert, e.convert_at, asked
            end
            out[#out + 1] = line
            lines[e.seq] = g
        end
    end
    local ref = Z.state.offset and math.floor(host.now() + Z.state.offset)
    if ref then out[#out + 1] = "r " .. ref end
    if #queue <= LT.NAMES_MAX then
        names = {}
        for i, e in ipairs(queue) do
            out[#out + 1] = "q " .. e.name
            names[i] = e.name
        end
        if #names == 0 then names = nil end
    end
    return table.concat(out, "\n"), lines, names, ref
end

return LT
