-- session_watches_spec: ZooKeeper drops a session's watches when the
-- session ends (the server; the C client empties its tables and delivers
-- one session event; a handle closed for a new session takes its own), and
-- the model does so too (zkmodel.lua's World:drop_watches).  What a sidecar
-- kept current by watches must not be trusted once its session changed.

local S = require "world"
local null = S.null

-- a's session ends on the server while a is cut off; its new session is
-- handled in a task of its own (returned), as the bridge's "new" event
-- while clients' commands keep coming.
local function expired_then_new(W, sc)
    W:expire_session(sc.sid)
    sc.held = nil
    sc.sid = W:new_session()
    sc.connected = true
    return W:spawn(sc, sc.M.on_session, "new", sc.sid)
end

local function watching(W, sc, path)
    for _, all in ipairs({ W.watches, W.cwatches }) do
        if all[path] and all[path][sc] then return true end
    end
    return false
end

describe("the model: a session's watches end with it", function()
    it("drops the data, exists and child watches of an expired session, not another's", function()
        local W, a, b = S.world(2)
        W:raw_create("/w", "x")
        a:run(function() a.zk.get("/w", true); a.zk.exists("/none", true); a.zk.children("/w", true) end)
        b:run(function() b.zk.get("/w", true) end)
        W:expire_session(a.sid)
        assert.is_false(watching(W, a, "/w"))
        assert.is_false(watching(W, a, "/none"))
        assert.is_true(watching(W, b, "/w"))
    end)

    it("drops them when the lease passed (lose: the old session lives on in the server)", function()
        local W, a = S.world(1)
        W:raw_create("/w", "x")
        a:run(function() a.zk.get("/w", true) end)
        local fired = 0
        local on_watch = a.M.on_watch
        a.M.on_watch = function(e, p) if p == "/w" then fired = fired + 1 end return on_watch(e, p) end
        local old = a:lose({ gap = true })
        assert.is_true(W.sessions[old].alive)
        W:raw_set("/w", "y")
        a:next_session()
        W:raw_set("/w", "z")
        W:advance(10)
        assert.equal(0, fired)
    end)
end)

describe("plain PUBLISH's route cache under a new session", function()
    -- Before pubsub.lua's PS.session_changed: a has published on "news"
    -- (nobody listens: cached with watches).  a is cut off past its
    -- session; meanwhile a client of b subscribes to "news" (answered).
    -- The event that would tell a went with a's old session.  a's new
    -- session is being handled (K.init's round trips came first, pubsub's
    -- PR.new_session later), and a PUBLISH on a in that window trusted the
    -- cache: it answered 0 and the subscriber never got the message,
    -- though its SUBSCRIBE was answered well before (not "within one
    -- round trip", README).  Now the cache goes first of all.
    for _, how in ipairs({ "expired", "lease" }) do
        it("reaches a subscriber of another sidecar that came while a had no session (" .. how .. ")", function()
            local W, a, b = S.warm_world(2)
            assert.equal(0, a:call("PUBLISH", "news", "before"))
            W:advance(100)
            local t
            if how == "expired" then
                W:expire_session(a.sid)
                b:call_as(7, "SUBSCRIBE", "news")
                W:advance(100)
                a.sid = W:new_session()
                t = W:spawn(a, a.M.on_session, "new", a.sid)
            else
                a:lose({ gap = true })
                b:call_as(7, "SUBSCRIBE", "news")
                W:advance(100)
                a.sid = W:new_session()
                a.connected = true
                t = W:spawn(a, a.M.on_session, "new", a.sid)
            end
            local p = a:start("PUBLISH", "news", "after")
            W:run_until(function() return p.done and t.done end, 5000)
            assert.equal(1, p.result)
            W:advance(100)
            assert.equal(1, S.messages(b, 7, "news"), "the subscriber never got the message")
        end)
    end

    it("reaches a pattern subscriber of another sidecar that came while a had no session", function()
        local W, a, b = S.warm_world(2)
        assert.equal(0, a:call("PUBLISH", "news", "before"))
        W:advance(100)
        W:expire_session(a.sid)
        b:call_as(7, "PSUBSCRIBE", "ne*")
        W:advance(100)
        a.sid = W:new_session()
        local t = W:spawn(a, a.M.on_session, "new", a.sid)
        local p = a:start("PUBLISH", "news", "after")
        W:run_until(function() return p.done and t.done end, 5000)
        assert.equal(1, p.result)
    end)
end)

describe("the live sidecars' watch under a new session", function()
    -- The first sidecar in name order sweeps what a dead one leaves (its
    -- inbox with the messages in it, its doorbells): it learns of the
    -- death from its child watch on <root>/ps/l, which a new session must
    -- set again (PS.on_session: PN.watch_live).  When that one listing
    -- fails (a reply lost as the connection flaps right after the new
    -- session), nothing set the watch again until the next session
    -- event, and a dead sidecar's inbox stayed (before pubsub.lua's
    -- watch_live, which tries again every 250 ms).
    it("sweeps a dead sidecar's inbox after the new session's listing of l/ failed", function()
        local W, a, b, c = S.warm_world(3)
        c:call_as(7, "SUBSCRIBE", "news")
        W:advance(100)
        local l = a:run(function() return a.require("pubsub_nodes").ps() .. "/l" end)
        local cbox = c:run(function() return c.require("pubsub_nodes").inbox() end)
        a:fail_next({ op = "children", path = l, rc = S.codes.CONNECTIONLOSS })
        local t = expired_then_new(W, a)
        W:run_until(function() return t.done end, 5000)
        -- (b saw a's presence go with its old session: its sweep, a
        -- moment later, finds a back; from now on a is the sweeper)
        W:advance(31000)
        assert.equal(1, b:call("PUBLISH", "news", "m"))
        c:close()
        W:advance(31000)
        W:advance(31000)
        assert.is_nil(W:node(cbox), "the dead sidecar's inbox is never swept")
    end)
end)
