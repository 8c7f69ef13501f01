-- Pub/sub (scripts/pubsub*.lua) over the ZooKeeper model: local delivery,
-- routes through ZooKeeper only towards sidecars that registered interest,
-- a script's publish as part of its commit, and interest restored after a
-- new session.

local S = require "world"
local null, E = S.null, S.E

-- The ZooKeeper writes in W.ops since `from` (reads excluded).
local function writes(W, from)
    local n = 0
    for i = (from or 0) + 1, #W.ops do
        local k = W.ops[i].kind
        if k ~= "get" and k ~= "exists" and k ~= "children" and k ~= "sync" then n = n + 1 end
    end
    return n
end

local function frames(reply) return reply.frames end

-- The watch events that would tell sidecar sc of a route's change have not
-- come yet: its watches on the routes are dropped.
local function events_on_their_way(W, sc)
    for _, all in ipairs({ W.watches, W.cwatches }) do
        for path, ws in pairs(all) do
            if path:find("^/zkresp/ps/[cp]") then ws[sc] = nil end
        end
    end
end

describe("pub/sub", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("refuses a SUBSCRIBE past its caps whole, before anything is written", function()
        local c = W:sidecar({ config = { max_subscriptions_per_command = 3, max_subscriptions_per_client = 4 } })
        local from = #W.ops
        assert.same(E("ERR too many channels in one 'subscribe' command (4, the limit is 3)"),
                    c:call_as(7, "SUBSCRIBE", "a", "b", "c", "d"))
        assert.equal(0, writes(W, from))
        assert.is_nil(c.subcounts[7] and c.subcounts[7][1] > 0 or nil)
        assert.equal(3, #frames(c:call_as(7, "SUBSCRIBE", "a", "b", "c")))
        from = #W.ops
        assert.same(E("ERR max number of subscriptions per client reached (4)"),
                    c:call_as(7, "PSUBSCRIBE", "x*", "y*"))
        assert.equal(0, writes(W, from))
        assert.same({ 3, 0, 0 }, c.subcounts[7])
        -- names already held do not count
        assert.equal(3, #frames(c:call_as(7, "SUBSCRIBE", "a", "b", "e")))
        assert.same({ 4, 0, 0 }, c.subcounts[7])
        -- another client has its own allowance
        assert.equal(3, #frames(c:call_as(8, "SUBSCRIBE", "a", "b", "c")))
    end)

    it("answers SUBSCRIBE with one confirmation per channel", function()
        local r = b:call_as(7, "SUBSCRIBE", "x", "y", "x")
        assert.same({ { push = { "subscribe", "x", 1 } }, { push = { "subscribe", "y", 2 } },
                      { push = { "subscribe", "x", 2 } } }, frames(r))
        assert.same({ 2, 0, 0 }, b.subcounts[7])
        r = b:call_as(7, "UNSUBSCRIBE")
        assert.same({ { push = { "unsubscribe", "x", 1 } }, { push = { "unsubscribe", "y", 0 } } }, frames(r))
        assert.same({ 0, 0, 0 }, b.subcounts[7])
        r = b:call_as(7, "UNSUBSCRIBE")
        assert.same({ { push = { "unsubscribe", null, 0 } } }, frames(r))
    end)

    it("delivers across sidecars, messages and pattern messages, in order", function()
        b:call_as(7, "SUBSCRIBE", "news")
        b:call_as(8, "PSUBSCRIBE", "n*")
        assert.equal(2, a:call("PUBLISH", "news", "1"))
        assert.equal(2, a:call("PUBLISH", "news", "2"))
        W:run_until(function() return b.pushed[8] and #b.pushed[8] == 2 end)
        assert.same({ { push = { "message", "news", "1" } }, { push = { "message", "news", "2" } } }, b.pushed[7])
        assert.same({ { push = { "pmessage", "n*", "news", "1" } }, { push = { "pmessage", "n*", "news", "2" } } },
                    b.pushed[8])
    end)

    it("deletes delivered messages in batches", function()
        b:call_as(7, "SUBSCRIBE", "gc")
        local box = "/zkresp/ps/i/"
        local function messages_left()
            local n = 0
            for path in pairs(W.nodes) do
                if path:sub(1, #box) == box and path:sub(#box + 1):find("/", 1, true) then n = n + 1 end
            end
            return n
        end
        local from = #W.ops
        for i = 1, 70 do
            assert.equal(1, a:call("PUBLISH", "gc", tostring(i)))
            W:run_until(function() return b.pushed[7] and #b.pushed[7] == i end)
            -- a full batch goes at once; never more are left
            assert.is_true(messages_left() <= 32, tostring(messages_left()))
        end
        local lists, deletes = 0, 0
        for i = from + 1, #W.ops do
            local op = W.ops[i]
            if op.sc == b.id and op.kind == "children" then lists = lists + 1 end
            if op.sc == b.id and (op.kind == "delete" or op.kind == "multi") then deletes = deletes + 1 end
        end
        -- one listing per message, two batches of deletes
        assert.equal(70, lists)
        assert.equal(2, deletes)
        for i = 1, 70 do assert.same({ push = { "message", "gc", tostring(i) } }, b.pushed[7][i]) end
        -- the rest goes after a while
        W:advance(150)
        assert.equal(0, messages_left())
    end)

    it("deletes a delivered message later when its own delete fails", function()
        -- The batch's multi fails (one message went with its publisher's
        -- session), so they are deleted one by one; one of those deletes
        -- fails on a lost connection: that message waits for a later batch
        -- instead of staying in the inbox for good (seen, never listed).
        b:call_as(7, "SUBSCRIBE", "gc1")
        for i = 1, 2 do assert.equal(1, a:call("PUBLISH", "gc1", tostring(i))) end
        W:run_until(function() return b.pushed[7] and #b.pushed[7] == 2 end)
        local mine
        for path in pairs(W.nodes) do
            if path:match("^/zkresp/ps/i/[^/]+$") and W:children(path)[1] then mine = path end
        end
        local names = W:children(mine)
        table.sort(names, function(x, y) return x:sub(-10) < y:sub(-10) end)
        assert.equal(2, #names)
        W:raw_delete(mine .. "/" .. names[1])
        b:fail_next({ op = "delete", path = mine .. "/" .. names[2] })
        W:advance(1000)
        assert.same({}, W:children(mine))
    end)

    it("forgets the names it saw when its inbox is made again", function()
        -- Sequence numbers start again in a new inbox (ours swept while our
        -- session was gone), so a new message may carry the name of one
        -- delivered from the old inbox and not deleted yet.
        b:call_as(7, "SUBSCRIBE", "again")
        assert.equal(1, a:call("PUBLISH", "again", "x"))
        W:run_until(function() return b.pushed[7] and #b.pushed[7] == 1 end)
        local box = "/zkresp/ps/i/"
        local mine
        for path in pairs(W.nodes) do
            if path:sub(1, #box) == box and not path:sub(#box + 1):find("/", 1, true) and W:children(path)[1] then
                mine = path
            end
        end
        assert.is_not_nil(mine) -- the delivered message waits for its batch
        for _, name in ipairs(W:children(mine)) do W:raw_delete(mine .. "/" .. name) end
        W:raw_delete(mine)
        W:run_until(function() return W:node(mine) ~= nil end)
        assert.equal(1, a:call("PUBLISH", "again", "x"))
        W:run_until(function() return #b.pushed[7] == 2 end, 1000)
        assert.same({ push = { "message", "again", "x" } }, b.pushed[7][2])
    end)

    it("deletes nothing in its inbox after a new session before listing it", function()
        -- b's session goes; meanwhile its inbox is swept and made again (the
        -- events are lost with the connection), and a message arrives in it
        -- with the name of the one b delivered last, not deleted yet.  The
        -- batch's timer fires before b lists the new inbox.
        b:call_as(7, "SUBSCRIBE", "again")
        assert.equal(1, a:call("PUBLISH", "again", "x"))
        W:run_until(function() return b.pushed[7] and #b.pushed[7] == 1 end)
        local mine
        for path in pairs(W.nodes) do
            if path:match("^/zkresp/ps/i/[^/]+$") and W:children(path)[1] then mine = path end
        end
        local old = W:children(mine)[1]
        b:disconnect()
        W.cwatches[mine] = nil
        W:raw_delete(mine .. "/" .. old)
        W:raw_delete(mine)
        W:raw_create(mine, "")
        assert.equal(1, a:call("PUBLISH", "again", "x"))
        assert.same({ old }, W:children(mine))
        b:fail_next({ op = "exists", path = "/zkresp/ps/c", pass = true, latency = 300 })
        b:expire()
        W:run_until(function() return #b.pushed[7] == 2 end, 1000)
        assert.same({ push = { "message", "again", "x" } }, b.pushed[7][2])
    end)

    it("writes nothing to ZooKeeper when no other sidecar listens", function()
        a:call_as(3, "SUBSCRIBE", "local")
        local from = #W.ops
        for i = 1, 5 do assert.equal(1, a:call("PUBLISH", "local", tostring(i))) end
        assert.equal(0, a:call("PUBLISH", "nobody", "x"))
        assert.equal(0, writes(W, from))
        assert.equal(5, #a.pushed[3])
    end)

    it("stops writing once the remote subscriber leaves", function()
        b:call_as(7, "SUBSCRIBE", "ch")
        assert.equal(1, a:call("PUBLISH", "ch", "m"))
        b:call_as(7, "UNSUBSCRIBE", "ch")
        W:run_until(function() return #(W:children("/zkresp/ps/c/ch") or {}) == 0 end)
        W:advance(1000)
        local from = #W.ops
        assert.equal(0, a:call("PUBLISH", "ch", "m2"))
        assert.equal(0, writes(W, from))
    end)

    it("removes a channel's node some time after its last subscriber left", function()
        b:call_as(7, "SUBSCRIBE", "gone")
        assert.is_table(W:node("/zkresp/ps/c/gone"))
        b:call_as(7, "UNSUBSCRIBE", "gone")
        W:advance(1000)
        assert.is_table(W:node("/zkresp/ps/c/gone"))   -- kept a while: a waiter often comes back
        W:advance(65000)
        assert.is_nil(W:node("/zkresp/ps/c/gone"))
        -- and subscribing again works from scratch
        b:call_as(7, "SUBSCRIBE", "gone")
        assert.equal(1, a:call("PUBLISH", "gone", "again"))
    end)

    it("keeps a message over max-value-len on its own sidecar", function()
        b:call_as(7, "SUBSCRIBE", "big")
        a:call_as(3, "SUBSCRIBE", "big")
        local from = #W.ops
        local huge = string.rep("x", 300 * 1024)
        assert.equal(1, a:call("PUBLISH", "big", huge))
        assert.equal(0, writes(W, from))
        assert.equal(huge, a.pushed[3][1].push[3])
        assert.equal(2, a:call("PUBLISH", "big", "small"))
    end)

    it("sends a script's message only when the script commits", function()
        b:call_as(7, "SUBSCRIBE", "ch")
        local r = a:call("EVAL", "redis.call('set', KEYS[1], 'v'); redis.call('publish', 'ch', 'bad'); " ..
                                 "error('no')", "1", "k")
        assert.is_table(r)
        assert.truthy(r.err:find("no", 1, true))
        W:advance(1000)
        assert.is_nil(b.pushed[7])
        r = a:call("EVAL", "redis.call('set', KEYS[1], 'v'); return redis.call('publish', 'ch', 'good')", "1", "k")
        assert.equal(1, r)
        W:run_until(function() return b.pushed[7] ~= nil end)
        assert.same({ { push = { "message", "ch", "good" } } }, b.pushed[7])
    end)

    -- a's route for "ch" is cached as "nobody"; b subscribes; a's next
    -- commit must still reach b: by the watch event that tells a, or, when
    -- that has not come yet (a's watches on the routes are dropped), by the
    -- route's version check in its multi
    for _, on_its_way in ipairs({ false, true }) do
        it("re-runs a script whose route went stale before its commit" ..
           (on_its_way and ", the event of it still on its way" or ""), function()
            assert.equal(0, a:call("EVAL", "return redis.call('publish', 'ch', 'x')", "0"))
            if on_its_way then events_on_their_way(W, a) end
            b:call_as(7, "SUBSCRIBE", "ch")
            local r = a:call("EVAL", "redis.call('set', KEYS[1], 'v'); return redis.call('publish', 'ch', 'y')",
                             "1", "k")
            assert.equal(1, r)
            W:run_until(function() return b.pushed[7] ~= nil end)
            assert.same({ { push = { "message", "ch", "y" } } }, b.pushed[7])
        end)
    end

    it("answers a SUBSCRIBE only once registered, even while its last unregistration is on its way", function()
        b:call_as(7, "SUBSCRIBE", "again")
        -- the unregistration's delete takes a while, and the SUBSCRIBE
        -- comes meanwhile
        b:fail_next({ op = "delete", latency = 500, pass = true })
        local u = b:start("UNSUBSCRIBE", "again")
        u.client = 7
        W:advance(100)
        local t = b:start("SUBSCRIBE", "again")
        t.client = 8
        -- from its answer on, the interest is in ZooKeeper at every moment
        local seen_done_unregistered = false
        local until_t = W.now + 3000
        W:run_until(function()
            if t.done and #(W:children("/zkresp/ps/c/again") or {}) == 0 then seen_done_unregistered = true end
            return t.done and u.done and W.now >= until_t
        end)
        assert.is_true(t.done)
        assert.is_false(seen_done_unregistered)
        assert.equal(1, #W:children("/zkresp/ps/c/again"))
        assert.equal(1, a:call("EVAL", "return redis.call('publish', 'again', 'm')", "0"))
    end)

    it("re-runs a script that only reads and publishes when its route went stale", function()
        assert.equal(0, a:call("EVAL", "return redis.call('publish', 'ro', 'x')", "0"))
        events_on_their_way(W, a)
        b:call_as(7, "SUBSCRIBE", "ro")
        local r = a:call("EVAL", "if redis.call('get', KEYS[1]) == false then " ..
                                 "return redis.call('publish', 'ro', '0') end", "1", "ro-lock")
        assert.equal(1, r)
        W:run_until(function() return b.pushed[7] ~= nil end)
        assert.same({ { push = { "message", "ro", "0" } } }, b.pushed[7])
    end)

    it("delivers a long message whose read failed once, in order, a moment later", function()
        b:call_as(7, "SUBSCRIBE", "long")
        local big = string.rep("p", 2000)
        b:fail_next({ op = "get", rc = S.codes.CONNECTIONLOSS })
        assert.equal(1, a:call("PUBLISH", "long", big))
        assert.equal(1, a:call("PUBLISH", "long", "after"))
        W:advance(2000)
        assert.same({ { push = { "message", "long", big } }, { push = { "message", "long", "after" } } },
                    b.pushed[7])
    end)

    it("counts subscribers of every sidecar in PUBSUB NUMSUB and NUMPAT", function()
        b:call_as(7, "SUBSCRIBE", "ch")
        b:call_as(8, "SUBSCRIBE", "ch")
        a:call_as(1, "SUBSCRIBE", "ch")
        b:call_as(9, "PSUBSCRIBE", "c*")
        W:advance(1000)
        assert.same({ "ch", 3, "other", 0 }, a:call("PUBSUB", "NUMSUB", "ch", "other"))
        assert.equal(1, a:call("PUBSUB", "NUMPAT"))
        assert.same({ "ch" }, a:call("PUBSUB", "CHANNELS"))
        assert.same({}, a:call("PUBSUB", "CHANNELS", "x*"))
        assert.same(E("ERR unknown subcommand 'foo'. Try PUBSUB HELP."), a:call("PUBSUB", "foo"))
    end)

    it("refuses other commands in RESP2 subscribed mode, after the arity check", function()
        local t = b:start("GET", "k")
        t.client = 7
        assert.same(E("ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET " ..
                      "are allowed in this context"), b:run(function() return b.M.dispatch({ "GET", "k" }, true) end))
        assert.same(E("ERR wrong number of arguments for 'get' command"),
                    b:run(function() return b.M.dispatch({ "GET" }, true) end))
    end)

    it("drops a closed client's subscriptions and its interest", function()
        b:call_as(7, "SUBSCRIBE", "ch")
        assert.equal(1, a:call("PUBLISH", "ch", "m"))
        b:run(function() b.M.on_client_gone(7) end)
        W:advance(1000)
        assert.equal(0, a:call("PUBLISH", "ch", "m"))
    end)

    it("registers interest again in a new session", function()
        b:call_as(7, "SUBSCRIBE", "ch")
        b:expire()
        W:advance(1000)
        assert.equal(1, a:call("PUBLISH", "ch", "after"))
        W:run_until(function() return b.pushed[7] ~= nil end)
        assert.same({ "message", "ch", "after" }, b.pushed[7][#b.pushed[7]].push)
    end)

    it("makes up the unlock message of a free lock after a new session", function()
        b:call_as(7, "SUBSCRIBE", "redisson_lock__channel:{l}")
        b:call_as(8, "SUBSCRIBE", "redisson_lock__channel:{held}")
        b:call_as(9, "SUBSCRIBE", "redisson_lock__channel:{plain}")
        b:call_as(10, "SUBSCRIBE", "redisson_rwlock:{rw}")
        a:call("SET", "{held}", "x")
        a:call("HSET", "plain", "uuid:1", "1")   -- Redisson's lock named "plain"
        b:expire()
        W:advance(1000)
        assert.same({ { push = { "message", "redisson_lock__channel:{l}", "0" } } }, b.pushed[7])
        assert.is_nil(b.pushed[8])
        assert.is_nil(b.pushed[9])
        assert.same({ { push = { "message", "redisson_rwlock:{rw}", "0" } } }, b.pushed[10])
    end)
end)

describe("doorbells", function()
    local W, a, b, PS
    local lockch = "redisson_lock__channel:{L}"
    local unlock = "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], ARGV[1]) return 1"
    before_each(function()
        W, a, b = S.world(2)
        PS = b.require("pubsub")
    end)

    local function texts(list)
        local out = {}
        for i, f in ipairs(list or {}) do
            local payload = f.push[3]
            if #payload > 40 then payload = #payload .. " bytes" end
            out[i] = f.push[2] .. "=" .. payload
        end
        return out
    end
    local function bell_path()
        for path in pairs(W.nodes) do
            if path:match("^/zkresp/ps/b/[^/]+/.") then return path end
        end
    end

    it("deliver a lock channel's unlock at the event, before any read, once", function()
        b:call_as(7, "SUBSCRIBE", lockch)
        assert.is_not_nil(bell_path())
        for i = 1, 5 do
            assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
            W:run_until(function() return b.pushed[7] and #b.pushed[7] == i end)
            W:advance(5)
        end
        W:advance(50)
        assert.same({ lockch .. "=0", lockch .. "=0", lockch .. "=0", lockch .. "=0", lockch .. "=0" },
                    texts(b.pushed[7]))
        assert.equal(5, PS.stats.rung)
        assert.equal(5, PS.stats.messages_received) -- each also listed, and not delivered again
        -- plain PUBLISH rings too; other payloads and channels do not
        assert.equal(1, a:call("PUBLISH", lockch, "0"))
        assert.equal(1, a:call("PUBLISH", lockch, "1"))
        W:advance(50)
        assert.equal(6, PS.stats.rung)
        assert.same(lockch .. "=1", texts(b.pushed[7])[7])
    end)

    it("keep each publisher's order across doorbells and the inbox", function()
        b:call_as(7, "SUBSCRIBE", lockch, "news")
        local two = "redis.call('publish', KEYS[1], ARGV[1]) redis.call('publish', KEYS[2], ARGV[2]) return 1"
        local want = { "news=hello", lockch .. "=0", lockch .. "=0", "news=bye", "news=x", lockch .. "=0" }
        for round = 1, 2 do
            -- one at a time, b idle in between; then all at once
            local gap = round == 1 and 10 or 0
            assert.equal(1, a:call("EVAL", two, "2", "news", lockch, "hello", "0"))
            W:advance(gap)
            assert.equal(1, a:call("EVAL", two, "2", lockch, "news", "0", "bye"))
            W:advance(gap)
            assert.equal(1, a:call("PUBLISH", "news", "x"))
            W:advance(gap)
            assert.equal(1, a:call("PUBLISH", lockch, "0"))
            W:advance(50)
            if round == 1 then
                -- the first script's unlock came after another message in
                -- its multi, whose event came first: it was listed
                assert.equal(2, PS.stats.rung)
            end
        end
        local twice = {}
        for _, m in ipairs(want) do twice[#twice + 1] = m end
        for _, m in ipairs(want) do twice[#twice + 1] = m end
        assert.same(twice, texts(b.pushed[7]))
    end)

    it("drop a credit whose message never came; later messages still arrive", function()
        b:call_as(7, "SUBSCRIBE", lockch, "news")
        local D = bell_path()
        -- rung by a publisher whose message vanished with its session
        W:raw_set(D, "")
        W:advance(10)
        assert.same({ lockch .. "=0" }, texts(b.pushed[7]))
        assert.equal(1, a:call("PUBLISH", "news", "m"))
        W:advance(10)
        -- the doorbell's watch is being re-armed when the next one rings
        W.watches[D] = nil
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(50)
        assert.same({ lockch .. "=0", "news=m", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("go with the interest; a publisher finding one missing sends without it", function()
        b:call_as(7, "SUBSCRIBE", lockch)
        local D = bell_path()
        b:call_as(7, "UNSUBSCRIBE", lockch)
        W:advance(10)
        assert.is_nil(W:node(D))
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        b:call_as(7, "SUBSCRIBE", lockch)
        W:advance(10)
        assert.is_not_nil(W:node(D))
        -- removed behind b's back: a's scripts and publishes still go
        W:raw_delete(D)
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        assert.equal(1, a:call("PUBLISH", lockch, "0"))
        W:advance(50)
        assert.same({ lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("a plain PUBLISH that finds one missing sends without it, and answers", function()
        b:call_as(7, "SUBSCRIBE", lockch)
        local D = bell_path()
        assert.equal(1, a:call("PUBLISH", lockch, "first"))
        W:advance(50)
        W:raw_delete(D)
        assert.equal(1, a:call("PUBLISH", lockch, "0"))
        assert.equal(1, a:call("PUBLISH", lockch, "0"))
        W:advance(50)
        assert.same({ lockch .. "=first", lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("go when their first delete fails", function()
        b:call_as(7, "SUBSCRIBE", lockch)
        local D = bell_path()
        b:fail_next({ op = "delete", path = D })
        b:call_as(7, "UNSUBSCRIBE", lockch)
        W:advance(1000)
        assert.is_nil(W:node(D))
    end)

    it("go when the last subscriber left while ZooKeeper was away and the session then changed", function()
        -- The unsubscribe waits for the connection; the new session takes
        -- the interest node with the old one, and the doorbell (persistent)
        -- must not stay behind for the sidecar's lifetime.
        b:call_as(7, "SUBSCRIBE", lockch)
        local D = bell_path()
        b:disconnect()
        b:run(function() b.M.on_client_gone(7) end)
        W:advance(500)
        b:expire()
        W:advance(1000)
        assert.is_nil(W:node(D))
        -- a waiter that comes back has its doorbell rung again
        b:call_as(8, "SUBSCRIBE", lockch)
        assert.is_not_nil(W:node(D))
        local rung = PS.stats.rung
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(50)
        assert.same({ lockch .. "=0" }, texts(b.pushed[8]))
        assert.equal(rung + 1, PS.stats.rung)
    end)

    it("go when the last subscriber left while its interest was being written again", function()
        -- The doorbell is made, the interest's multi fails, and the client
        -- leaves before the next try.
        b:fail_next({ op = "multi" })
        local t = b:start("SUBSCRIBE", lockch)
        t.client = 7
        W:advance(50)
        assert.is_not_nil(bell_path())
        b:abandon(t)
        b:run(function() b.M.on_client_gone(7) end)
        W:advance(1000)
        assert.is_nil(bell_path())
    end)

    it("ring at their event again when watching one again failed as it fired", function()
        b:call_as(7, "SUBSCRIBE", lockch)
        local D = bell_path()
        local rung = PS.stats.rung
        b:fail_next({ op = "get", path = D })
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(50)
        assert.equal(rung + 1, PS.stats.rung)
        -- the connection that lost the watch's get comes back
        b:disconnect()
        b:reconnect()
        W:advance(50)
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(50)
        assert.equal(rung + 2, PS.stats.rung)
        assert.same({ lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("the interest node goes when its write's answer was lost and the subscriber left", function()
        -- The multi applied, its answer lost: the node is there, unknown to
        -- b, whose subscriber leaves before the next try.  Publishers would
        -- count it, and write to b's inbox, for the rest of b's session.
        b:fail_next({ op = "multi", when = "after" })
        local t = b:start("SUBSCRIBE", "news")
        t.client = 7
        W:advance(50)
        assert.equal(1, #(W:children("/zkresp/ps/c/news") or {}))
        b:abandon(t)
        b:run(function() b.M.on_client_gone(7) end)
        W:advance(1000)
        assert.equal(0, #(W:children("/zkresp/ps/c/news") or {}))
        assert.equal(0, a:call("PUBLISH", "news", "m"))
    end)

    -- Publish order (a doorbell's event delivers its message at once only
    -- while the inbox's child watch is known to be armed, every earlier
    -- message listed; after a reconnect, a failed listing, or one that
    -- broke off, the message comes from the inbox in its place instead).
    describe("keep publish order", function()
        before_each(function()
            b:call_as(7, "SUBSCRIBE", lockch, "news")
        end)

        local function inbox()
            return b:run(function() return b.require("pubsub_nodes").inbox() end)
        end

        it("after a reconnect whose server fires the doorbell's event before the inbox's", function()
            local rung = PS.stats.rung
            b:disconnect({ hold_events = true })
            assert.equal(1, a:call("PUBLISH", "news", "m"))
            assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
            assert.equal(1, a:call("PUBLISH", lockch, "0"))
            b:reconnect()
            W:advance(1000)
            assert.same({ "news=m", lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
            assert.equal(rung, PS.stats.rung) -- both from the listing
            -- and once the inbox is listed again, a doorbell delivers at its event
            assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
            W:advance(50)
            assert.equal(rung + 1, PS.stats.rung)
            assert.same({ "news=m", lockch .. "=0", lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
        end)

        -- (the listing is answered CONNECTIONLOSS as the connection drops,
        -- though the server applied it: its watch set, zkmodel.lua's
        -- drop_connection)
        it("after a reconnect, when the listing under way at the disconnect was applied, its answer lost", function()
            b:fail_next({ op = "children", path = inbox(), pass = true, latency = 20 })
            assert.equal(1, a:call("PUBLISH", "news", "m1"))
            W:advance(5)
            b:disconnect()
            W:advance(50)
            assert.same({}, texts(b.pushed[7]))
            assert.equal(1, a:call("PUBLISH", "news", "m2"))
            assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
            b:reconnect()
            W:advance(1000)
            assert.same({ "news=m1", "news=m2", lockch .. "=0" }, texts(b.pushed[7]))
        end)

        -- b's listing of `news=message` fails with `fault`; an unlock follows
        local function unlock_after_a_stalled_listing(fault, message, shown)
            b:fail_next(fault)
            assert.equal(1, a:call("PUBLISH", "news", message))
            W:advance(10)
            assert.is_nil(b.pushed[7])
            assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
            W:advance(1000)
            assert.same({ "news=" .. shown, lockch .. "=0" }, texts(b.pushed[7]))
        end

        it("after a listing of the inbox that failed (no watch set)", function()
            unlock_after_a_stalled_listing({ op = "children", path = inbox() }, "m", "m")
        end)

        it("after a listing that broke off to read a long message later", function()
            unlock_after_a_stalled_listing({ op = "get", rc = S.codes.CONNECTIONLOSS },
                                           string.rep("p", 2000), "2000 bytes")
        end)
    end)
end)

describe("pub/sub across a session's end", function()
    local lockch = "redisson_lock__channel:{L}"
    local function texts(list)
        local out = {}
        for i, f in ipairs(list or {}) do out[i] = f.push[2] .. "=" .. f.push[3] end
        return out
    end
    local W, a, b
    before_each(function() W, a, b = S.world(2) end)

    it("a script's committed message reaches its subscriber though the publisher shut down at once", function()
        b:call_as(7, "SUBSCRIBE", "news")
        assert.equal(1, a:call("EVAL", "redis.call('set', KEYS[1], 'v') return redis.call('publish', 'news', 'x')",
                               "1", "k"))
        a:close() -- SIGTERM: the last command answered, the session closed
        W:advance(1000)
        assert.same({ "news=x" }, texts(b.pushed[7]))
    end)

    it("so does a Redisson unlock that the waiter's sidecar, busy listing, reads from its inbox", function()
        b:call_as(7, "SUBSCRIBE", lockch, "news")
        local c = W:sidecar()
        b:fail_next({ op = "children", pass = true, latency = 50 }) -- b lists c's message slowly
        assert.equal(1, c:call("PUBLISH", "news", "m"))
        assert.equal(1, a:call("EVAL", "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], ARGV[1]) return 1",
                               "2", "L", lockch, "0"))
        a:close()
        W:advance(1000)
        assert.same({ "news=m", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    describe("a subscriber's sidecar that gave its session up", function()
        local function inst(sc) return sc:run(function() return sc.require("pubsub_nodes").inst() end) end
        local function lost_then_expired(sc)
            local old = sc:lose() -- the local lease passed; the server still has the old session
            W:advance(1000)
            W:expire_session(old) -- and ends it a little later
            W:advance(100)
        end

        it("is alive under its new session (its presence node is the new session's)", function()
            b:call_as(7, "SUBSCRIBE", "news")
            lost_then_expired(b)
            local p = W:node("/zkresp/ps/l/" .. inst(b))
            assert.is_not_nil(p)
            assert.equal(b.sid, p.stat.ephemeralOwner)
        end)

        it("keeps its inbox and doorbells past the sweep's delay, and gets what was published", function()
            b:call_as(7, "SUBSCRIBE", "news", lockch)
            lost_then_expired(b)
            b:disconnect()
            assert.equal(1, a:call("PUBLISH", "news", "m"))
            W:advance(35000) -- past --pubsub-gc-delay
            b:reconnect()
            W:advance(1000)
            local news = {}
            for _, t in ipairs(texts(b.pushed[7])) do
                if t:find("^news=") then news[#news + 1] = t end
            end
            assert.same({ "news=m" }, news) -- (and the lock channel's made-up unlock)
            assert.equal(1, #W:children("/zkresp/ps/b/" .. inst(b)))
        end)
    end)
end)

describe("an inbox's sequence numbers past 2^31", function()
    it("deliver every message in order across the wrap (ZooKeeper's counter is a signed int)", function()
        local W, a, b = S.world(2)
        b:call_as(7, "SUBSCRIBE", "news")
        local inst = b:run(function() return b.require("pubsub_nodes").inst() end)
        W.nodes["/zkresp/ps/i/" .. inst].stat.cversion = 2147483640
        local sent = {}
        for i = 1, 12 do
            sent[i] = { push = { "message", "news", "m" .. i } }
            assert.equal(1, a:call("PUBLISH", "news", "m" .. i))
            if i % 4 == 0 then W:advance(5) end -- (some listed together, some apart)
        end
        W:advance(1000)
        assert.same(sent, b.pushed[7])
        assert.is_true(W.nodes["/zkresp/ps/i/" .. inst].stat.cversion < 0)
    end)
end)
