-- lockstore.lua's encodings: the grant table in the lock node's data,
-- request names and the hex of nonces.  locks_spec drives them through
-- the commands; this pins the formats other sidecars (and older ones)
-- read.

local S = require "world"

describe("lockstore", function()
    local LS = S.module("lockstore")
    local LT = S.module("locktable")

    local function entry(seq, fields)
        local e = { seq = seq, name = "EX." .. LS.owner_hash("o" .. seq) .. ".30000.00ff-" .. string.format("%010d", seq) }
        for k, v in pairs(fields or {}) do e[k] = v end
        return e
    end

    it("writes the grants and the queue, and reads back what it wrote", function()
        local queue = {
            entry(3, { granted = "PR", token = 41, lease_end = 1700000030000 }),
            entry(5, { granted = "PR", token = 42, lease_end = 1700000031000,
                       convert = "EX", convert_at = 7, asked_convert = 1700000000123 }),
            entry(8),
        }
        local data = LS.encode_table(queue)
        local t, names = LS.decode_table(data)
        assert.same({ mode = "PR", token = 41, lease_end = 1700000030000 }, t[3])
        assert.same({ mode = "PR", token = 42, lease_end = 1700000031000, convert = "EX",
                      convert_at = 7, asked = 1700000000123 }, t[5])
        assert.is_nil(t[8])
        assert.same({ queue[1].name, queue[2].name, queue[3].name }, names)
    end)

    it("reads a table without a queue, skips lines it does not know, and an empty one", function()
        local t, names = LS.decode_table("3 EX 9 100\n\nz something newer\n4 PR 10 200 EX 2 5\nq ")
        assert.same({ mode = "EX", token = 9, lease_end = 100 }, t[3])
        assert.same({ mode = "PR", token = 10, lease_end = 200, convert = "EX", convert_at = 2, asked = 5 }, t[4])
        assert.is_nil(names)
        t, names = LS.decode_table("")
        assert.same({}, t)
        assert.is_nil(names)
        t = LS.decode_table(nil)
        assert.same({}, t)
    end)

    it("reads a table's times and a request's lease from the write's mtime, by the reference written", function()
        -- (a writer whose clock estimate is 60 s behind the leader that
        -- committed: a 30 s lease reads as 30 s from the commit)
        local t, _, ref = LS.decode_table("3 EX 9 1699999970000 PR 4 1699999939000\nr 1699999940000")
        assert.equal(1699999940000, ref)
        LT.anchor(t, ref, 1700000000000)
        assert.same({ mode = "EX", token = 9, lease_end = 1700000030000, convert = "PR", convert_at = 4,
                      asked = 1699999999000 }, t[3])
        -- a table without one (an older writer's) reads as written
        t = LS.decode_table("3 EX 9 1699999970000")
        LT.anchor(t, nil, 1700000000000)
        assert.equal(1699999970000, t[3].lease_end)
        -- a request's data: the reference after the write id
        local data = string.pack(">s4 I4 i8 i8 s2 s2 s1 i8", "o", 1, 1699999970000, 5, "sc", "cl", "w", 1699999940000)
        local d = LS.decode_req(data, { mtime = 1700000000000, mzxid = 1 << 32 })
        assert.same({ 1700000030000, 1699999970000, "w" }, { d.lease_end, d.lv, d.wid })
        assert.equal(1699999970000, LS.decode_req(data).lease_end) -- (no stat: as written)
        local old = string.pack(">s4 I4 i8 i8 s2 s2 s1", "o", 1, 1699999970000, 5, "sc", "cl", "w")
        assert.equal(1699999970000, LS.decode_req(old, { mtime = 1700000000000, mzxid = 1 << 32 }).lease_end)
    end)

    it("leaves the queue out when it is longer than NAMES_MAX", function()
        local queue = {}
        for i = 1, LS.NAMES_MAX + 1 do queue[i] = entry(i) end
        local _, names = LS.decode_table(LS.encode_table(queue))
        assert.is_nil(names)
    end)

    it("parses request names once and the sequence of a path", function()
        local t = { version = 0, mzxid = 1, czxid = 1, lines = {} }
        local a, b = entry(12).name, entry(2).name
        local snap = LS.build("/zkresp/l/k", t, { a, b, "not-a-request", (a:gsub("^EX", "ex")) }, 5)
        assert.equal(2, #snap.queue)
        assert.same({ 2, 12 }, { snap.queue[1].seq, snap.queue[2].seq })
        assert.same({ "EX", 30000 }, { snap.queue[2].mode, snap.queue[2].px })
        assert.equal(12, LS.seq_of("/zkresp/l/k/" .. a))
        assert.equal(2147483647, LS.seq_of("/x/EX.ab.1.00-2147483647"))
    end)

    it("writes bytes as lowercase hex, two digits each, at any length", function()
        assert.equal("", LS.hex(""))
        assert.equal("00ff0a41", LS.hex("\0\255\n" .. "A"))
        local long = string.rep("\1\254", 100)
        assert.equal(string.rep("01fe", 100), LS.hex(long))
        local all = {}
        for b = 0, 255 do all[#all + 1] = string.char(b) end
        assert.equal(string.format(string.rep("%02x", 256), string.byte(table.concat(all), 1, -1)),
                     LS.hex(table.concat(all)))
    end)

    it("answers from its caches what it answered the first time", function()
        -- FNV-1a's published vectors, asked twice (the second from the cache)
        for _ = 1, 2 do
            assert.equal("cbf29ce484222325", LS.owner_hash(""))
            assert.equal("af63dc4c8601ec8c", LS.owner_hash("a"))
        end
        local long = string.rep("x", 300) -- past the cached length
        assert.equal(LS.owner_hash(long), LS.owner_hash(long))
        assert.are_not.equal(LS.owner_hash(long), LS.owner_hash(long .. "y"))
        -- one name listed under two locks, and under a lock too long to keep
        local t = { version = 0, mzxid = 1, czxid = 1, lines = {} }
        local a = entry(7).name
        local far = "/zkresp/l/" .. string.rep("k", 400)
        for _ = 1, 2 do
            for _, lock in ipairs({ "/zkresp/l/k1", "/zkresp/l/k2", far }) do
                local snap = LS.build(lock, t, { a }, 5)
                assert.equal(lock .. "/" .. a, snap.queue[1].path)
                assert.equal(7, snap.queue[1].seq)
            end
            assert.equal(42, LS.seq_of(far .. "/EX.ab.1.00-0000000042"))
            assert.equal(42, LS.seq_of("/x/EX.ab.1.00-0000000042"))
        end
    end)
end)
