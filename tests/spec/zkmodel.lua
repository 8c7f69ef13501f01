-- zkmodel.lua — an in-memory ZooKeeper and a fake C host, for the specs.
--
-- A world holds one ZooKeeper tree, a fake clock and a tiny scheduler.
-- Sidecars join it: each has its own session, its own `zk` and `host`
-- globals and its own copy of the scripts (loaded in a private
-- environment), exactly as the C host would give them (sidecar/lua_host.h).
--
--   local W = zkmodel.world()
--   local a, b = W:sidecar(), W:sidecar()
--   a:call("SET", "k", "v", "PX", "1000")      --> {ok = "OK"}
--   W:advance(1000)                            -- fake time passes
--   b:call("GET", "k")                         --> zkmodel.null
--
-- The tree has ZooKeeper's semantics: absolute paths, parent must exist,
-- versions, one zxid per transaction (czxid/mzxid/pzxid), ctime/mtime from
-- the leader's clock, ephemeral nodes owned by a session and deleted when it
-- expires, no children under ephemerals, multi all-or-nothing with one
-- result per op.  Every zk.* call yields and completes `latency` ms later,
-- in issue order.  Faults: a chosen next op fails with CONNECTIONLOSS (or
-- any code) before or after it applies; a sidecar can be disconnected
-- (what is in flight answers CONNECTIONLOSS, later ops wait for the
-- reconnect or return TIMEOUT at the command's deadline), lose its
-- session, or close.
--
-- The scheduler runs each command and background task in a coroutine; the
-- clock only moves when nothing is runnable (to the next timer), so specs
-- are fast and deterministic.  A Lua error in any task fails the spec at
-- once, with its traceback.

local Z = {}

Z.SCRIPTS = "scripts"

Z.codes = {
    OK = 0, SYSTEMERROR = -1, RUNTIMEINCONSISTENCY = -2, DATAINCONSISTENCY = -3,
    CONNECTIONLOSS = -4, MARSHALLINGERROR = -5, UNIMPLEMENTED = -6,
    OPERATIONTIMEOUT = -7, BADARGUMENTS = -8, INVALIDSTATE = -9,
    APIERROR = -100, NONODE = -101, NOAUTH = -102, BADVERSION = -103,
    NOCHILDRENFOREPHEMERALS = -108, NODEEXISTS = -110, NOTEMPTY = -111,
    SESSIONEXPIRED = -112, INVALIDCALLBACK = -113, INVALIDACL = -114,
    AUTHFAILED = -115, SESSIONMOVED = -118,
    TIMEOUT = -1000, CLOSING = -1001, TOOBIG = -1002, -- ours (lua_host.h)
    EPHEMERAL = 1, SEQUENCE = 2, CONTAINER = 4,
    PERM_WRITE = 2, PERM_CREATE = 4, PERM_DELETE = 8, PERM_ADMIN = 16,
    MAX_OPS = 10000,
}
local C = Z.codes

Z.null = setmetatable({}, { __tostring = function() return "null" end })

---------------------------------------------------------------------------
-- Key encoding, as sidecar/keyenc.h documents it.

local KEEP = "[A-Za-z0-9%-_:{}@=+,!]"

function Z.key_encode(key)
    if key == "" then return "%" end
    return (key:gsub("[^A-Za-z0-9%-_:{}@=+,!]", function(c)
        return string.format("%%%02X", c:byte())
    end))
end

function Z.key_decode(name)
    if name == "%" then return "" end
    if name == "" then return nil end
    local out, i = {}, 1
    while i <= #name do
        local c = name:sub(i, i)
        if c == "%" then
            local hex = name:sub(i + 1, i + 2)
            if not hex:match("^[0-9A-F][0-9A-F]$") then return nil end
            local b = string.char(tonumber(hex, 16))
            if b:match(KEEP) then return nil end -- not canonical
            out[#out + 1] = b
            i = i + 3
        elseif c:match(KEEP) then
            out[#out + 1] = c
            i = i + 1
        else
            return nil
        end
    end
    return table.concat(out)
end

---------------------------------------------------------------------------
-- The world

local World = {}
World.__index = World

local function copy(t)
    local r = {}
    for k, v in pairs(t) do r[k] = v end
    return r
end

local function newnode(tx, data, owner)
    return {
        data = data, children = {},
        stat = { czxid = tx.zxid, mzxid = tx.zxid, pzxid = tx.zxid,
                 ctime = tx.time, mtime = tx.time, version = 0, cversion = 0,
                 aversion = 0, ephemeralOwner = owner or 0,
                 dataLength = data and #data or 0, numChildren = 0 },
    }
end

function Z.world(opts)
    opts = opts or {}
    local W = setmetatable({
        now = 0,
        leader_offset = opts.leader_offset or 1700000000000,
        latency = opts.latency or 1,
        nodes = {}, zxid = 0, sessions = {}, next_sid = 0x10000,
        runq = {}, rq_head = 1, rq_tail = 0,
        timers = {}, seq = 0, tasks = setmetatable({}, { __mode = "k" }),
        sidecars = {}, ops = {}, op_times = {}, watches = {}, cwatches = {},
    }, World)
    local tx = { zxid = 0, time = W:leader_now() }
    W.nodes["/"] = newnode(tx, nil)
    W.nodes["/zookeeper"] = newnode(tx, nil)
    W.nodes["/"].children.zookeeper = true
    W.nodes["/"].stat.numChildren = 1
    return W
end

function World:leader_now()
    return self.now + self.leader_offset
end

-- A new leader: zxids go on in the next epoch (its high 32 bits, the
-- counter from 0), stamped by a clock `clock_delta` ms off the old one's.
function World:new_leader(clock_delta)
    self.zxid = ((self.zxid >> 32) + 1) << 32
    self.leader_offset = self.leader_offset + (clock_delta or 0)
end

---------------------------------------------------------------------------
-- Scheduler

function World:post(fn)
    self.rq_tail = self.rq_tail + 1
    self.runq[self.rq_tail] = fn
end

-- Runs fn at time t (after everything already due at t).  Returns a handle
-- with :cancel().
function World:at(t, fn)
    self.seq = self.seq + 1
    local ev = { t = math.max(t, self.now), seq = self.seq, fn = fn }
    local lo, hi = 1, #self.timers
    while lo <= hi do
        local mid = (lo + hi) // 2
        local m = self.timers[mid]
        if m.t < ev.t or (m.t == ev.t and m.seq < ev.seq) then lo = mid + 1 else hi = mid - 1 end
    end
    table.insert(self.timers, lo, ev)
    ev.cancel = function() ev.cancelled = true end
    return ev
end

function World:step()
    if self.rq_head <= self.rq_tail then
        local fn = self.runq[self.rq_head]
        self.runq[self.rq_head] = nil
        self.rq_head = self.rq_head + 1
        fn()
        return true
    end
    while self.timers[1] and self.timers[1].cancelled do table.remove(self.timers, 1) end
    local ev = table.remove(self.timers, 1)
    if not ev then return false end
    if ev.t > self.now then self.now = ev.t end
    ev.fn()
    return true
end

-- Runs until pred() holds.  Fails on a deadlock (nothing left to run) or
-- when more than max_ms of fake time pass.
function World:run_until(pred, max_ms)
    local limit = self.now + (max_ms or 3600 * 1000)
    while not pred() do
        if not self:step() then error("deadlock: nothing left to run", 2) end
        if self.now > limit then error("time limit passed", 2) end
    end
end

-- Runs everything that is due now, without moving the clock.
function World:settle()
    while true do
        if self.rq_head <= self.rq_tail then
            self:step()
        else
            while self.timers[1] and self.timers[1].cancelled do table.remove(self.timers, 1) end
            if self.timers[1] and self.timers[1].t <= self.now then
                self:step()
            else
                return
            end
        end
    end
end

-- Lets `ms` of fake time pass, running everything due meanwhile.
function World:advance(ms)
    local target = self.now + ms
    while true do
        self:settle()
        while self.timers[1] and self.timers[1].cancelled do table.remove(self.timers, 1) end
        local ev = self.timers[1]
        if not ev or ev.t > target then break end
        self:step()
    end
    self.now = target
    self:settle()
end

function World:spawn(sc, fn, ...)
    local task = { sc = sc, deadline = self.now + sc.config.request_timeout }
    local co = coroutine.create(fn)
    task.co = co
    self.tasks[co] = task
    local args = table.pack(...)
    self:post(function() self:resume(co, table.unpack(args, 1, args.n)) end)
    return task
end

function World:resume(co, ...)
    local task = self.tasks[co]
    if not task or task.done then return end
    if coroutine.status(co) ~= "suspended" then
        error("resuming a coroutine that is " .. coroutine.status(co))
    end
    task.waiting = nil
    if task.paused then
        task.paused = nil
        task.sc.paused[task] = nil
    end
    if task.yielded then
        task.waited = (task.waited or 0) + self.now - task.yielded
        task.yielded = nil
    end
    local res = table.pack(coroutine.resume(co, ...))
    if coroutine.status(co) == "suspended" then task.yielded = self.now end
    if not res[1] then
        task.done = true
        local msg = res[2]
        if type(msg) == "table" then
            msg = "error object " .. (msg.reply and tostring(msg.reply.err) or "")
        end
        error("task failed: " .. debug.traceback(co, tostring(msg)), 0)
    elseif coroutine.status(co) == "dead" then
        self.finished = (self.finished or 0) + 1
        task.done, task.finished = true, self.finished -- its reply's place
        task.result = res[2]
        task.results = res
    end
end

-- Closes a running task as the host would when it aborts a command: its
-- to-be-closed variables run, it never resumes.
function World:abort(task)
    task.done = true
    coroutine.close(task.co)
end

function World:task_of(co)
    return self.tasks[co or coroutine.running()]
end

---------------------------------------------------------------------------
-- The tree

local function valid_path(path)
    if type(path) ~= "string" or path:sub(1, 1) ~= "/" then return false end
    if path == "/" then return true end
    if path:sub(-1) == "/" or path:find("//", 1, true) or path:find("\0", 1, true) then
        return false
    end
    for part in path:gmatch("[^/]+") do
        if part == "." or part == ".." then return false end
    end
    return true
end

local function split(path)
    local p, name = path:match("^(.*)/([^/]+)$")
    if p == "" then p = "/" end
    return p, name
end

-- Watches: a one-shot watch left by zk.get/zk.exists(path, true) fires once
-- on the next change of path, delivered to the sidecar's M.on_watch ahead
-- of anything scheduled later, the reply of the write that made the change
-- included (its own sidecar's too), as ZooKeeper sends a watch event before
-- the replies that follow the change and the sidecar takes both in the
-- order they came (sidecar/zk.c).
-- zk.children(path, true) leaves a child watch: it fires "child" when a
-- child is created or deleted, "deleted" when path goes.
-- A watch belongs to the session that set it (ws[sc] = sid).  One set by
-- a request of a session the sidecar has given up (applied after the
-- bridge closed its handle) is never heard: not kept.
function World:watch(sc, path, child, sid)
    if sid ~= sc.sid then return end
    local all = child and self.cwatches or self.watches
    local ws = all[path]
    if not ws then
        ws = {}
        all[path] = ws
    end
    ws[sc] = sid
end

-- Session `sid` ended: its data, exists and child watches are gone, and
-- none of them ever fires.  This is ZooKeeper's rule, in one place: the
-- server drops an expired (or closed) session's watches; the C client, on
-- the expiry, empties its watch tables and gives each watcher one session
-- event with the expired state (the bridge's only watcher, shared by all
-- watches: one event, its "lost", see sidecar/zk_session.c); a handle the
-- bridge closes for a new session (the lease passed) takes its watches with
-- it, and its late events are ignored by generation (zk.c's zk_drain).  A
-- new session has no watches: the sidecar must set them again.  Events
-- held for the reconnect of that session (while disconnected) go too.
function World:drop_watches(sid)
    for _, all in ipairs({ self.watches, self.cwatches }) do
        for path, ws in pairs(all) do
            for sc, s in pairs(ws) do
                if s == sid then ws[sc] = nil end
            end
            if next(ws) == nil then all[path] = nil end
        end
    end
    for _, sc in ipairs(self.sidecars) do
        if sc.sid == sid and sc.held then sc.held = { data = {}, child = {} } end
    end
end

function World:note(tx, path, event)
    tx.events = tx.events or {}
    tx.events[#tx.events + 1] = { path, event }
end

-- Delivers the watch events of a committed transaction.  A disconnected
-- sidecar keeps them in sc.held for its reconnect (drop_connection),
-- as a data watch's ("data") or a child watch's ("child") event.
function World:fire(tx)
    for _, e in ipairs(tx.events or {}) do
        local path, event = e[1], e[2]
        local lists = {}
        if event ~= "child" then lists[#lists + 1] = self.watches end
        if event == "child" or event == "deleted" then lists[#lists + 1] = self.cwatches end
        local targets = {}
        for _, all in ipairs(lists) do
            local ws = all[path]
            if ws then
                all[path] = nil
                local kind = all == self.cwatches and "child" or "data"
                for sc in pairs(ws) do targets[sc] = targets[sc] or kind end
            end
        end
        for sc, kind in pairs(targets) do
            if sc.held then
                table.insert(sc.held[kind], { event, path })
            elseif sc.M and sc.M.on_watch and not sc.closing then
                self:spawn(sc, sc.M.on_watch, event, path)
            end
        end
    end
    tx.events = nil
end

function World:begin(journal)
    self.zxid = self.zxid + 1
    return { zxid = self.zxid, time = self:leader_now(), journal = journal and {} or nil }
end

local function deep(node)
    local n = { data = node.data, stat = copy(node.stat), children = copy(node.children) }
    return n
end

function World:save(tx, path)
    if tx.journal and tx.journal[path] == nil then
        local n = self.nodes[path]
        tx.journal[path] = n and deep(n) or false
    end
end

function World:rollback(tx)
    for path, n in pairs(tx.journal) do self.nodes[path] = n or nil end
end

-- ZooKeeper's cversion is a Java int: past 2^31 - 1 it goes on from -2^31
-- (and a sequential child's name with it, "%010d": "-2147483648").
local function int32(x) return (x + 2147483648) % 4294967296 - 2147483648 end

function World:op_create(tx, sid, path, data, flags)
    flags = flags or 0
    if not valid_path(path) or path == "/" then return C.BADARGUMENTS end
    local ppath, name = split(path)
    local parent = self.nodes[ppath]
    if flags & C.SEQUENCE ~= 0 then
        if not parent then return C.NONODE end
        local suffix = string.format("%010d", parent.stat.cversion)
        path, name = path .. suffix, name .. suffix
    end
    if self.nodes[path] then return C.NODEEXISTS end
    if not parent then return C.NONODE end
    if parent.stat.ephemeralOwner ~= 0 then return C.NOCHILDRENFOREPHEMERALS end
    self:save(tx, ppath)
    self:save(tx, path)
    local owner = (flags & C.EPHEMERAL ~= 0) and sid or 0
    local node = newnode(tx, data, owner)
    self.nodes[path] = node
    parent.children[name] = true
    parent.stat.cversion = int32(parent.stat.cversion + 1)
    parent.stat.numChildren = parent.stat.numChildren + 1
    parent.stat.pzxid = tx.zxid
    self:note(tx, path, "created")
    self:note(tx, ppath, "child")
    return C.OK, path, copy(node.stat)
end

function World:op_delete(tx, path, version)
    if not valid_path(path) or path == "/" then return C.BADARGUMENTS end
    local node = self.nodes[path]
    if not node then return C.NONODE end
    if version ~= -1 and version ~= node.stat.version then return C.BADVERSION end
    if node.stat.numChildren > 0 then return C.NOTEMPTY end
    local ppath, name = split(path)
    local parent = self.nodes[ppath]
    self:save(tx, ppath)
    self:save(tx, path)
    self.nodes[path] = nil
    parent.children[name] = nil
    parent.stat.cversion = int32(parent.stat.cversion + 1)
    parent.stat.numChildren = parent.stat.numChildren - 1
    parent.stat.pzxid = tx.zxid
    self:note(tx, path, "deleted")
    self:note(tx, ppath, "child")
    return C.OK
end

function World:op_set(tx, path, data, version)
    if not valid_path(path) then return C.BADARGUMENTS end
    local node = self.nodes[path]
    if not node then return C.NONODE end
    if version ~= -1 and version ~= node.stat.version then return C.BADVERSION end
    self:save(tx, path)
    node.data = data
    node.stat.version = int32(node.stat.version + 1)
    node.stat.mzxid = tx.zxid
    node.stat.mtime = tx.time
    node.stat.dataLength = data and #data or 0
    self:note(tx, path, "changed")
    return C.OK, copy(node.stat)
end

function World:op_check(tx, path, version)
    local node = self.nodes[path]
    if not node then return C.NONODE end
    if version ~= -1 and version ~= node.stat.version then return C.BADVERSION end
    return C.OK
end

-- The bridge's versions that wrap (zk.c's wrap_sets): a set at version -2
-- goes with a second set of the same data at -1 in one multi, so that no
-- node is ever read at -1 ("any version"), and answers as the one set.
local function wrap_sets(ops)
    local out, extra = {}, {}
    for _, o in ipairs(ops) do
        out[#out + 1] = o
        if o[1] == "set" and o[4] == -2 then
            out[#out + 1] = { "set", o[2], o[3], -1 }
            extra[#out] = true
        end
    end
    return out, extra
end

local function unwrap_sets(results, extra)
    local out = {}
    for i, r in ipairs(results) do
        local set = extra[i] and out[#out]
        if set then
            set.stat = r.stat or set.stat
            if set.rc == C.OK and r.rc ~= C.OK and r.rc ~= C.RUNTIMEINCONSISTENCY then set.rc = r.rc end
        else
            out[#out + 1] = r
        end
    end
    return out
end

function World:op_multi(sid, ops)
    local tx = self:begin(true)
    local results = {}
    for i, op in ipairs(ops) do
        local kind = op[1]
        local rc, a, b
        if kind == "create" then
            rc, a = self:op_create(tx, sid, op[2], op[3], op[4])
            results[i] = { rc = rc, path = rc == C.OK and a or nil }
        elseif kind == "delete" then
            rc = self:op_delete(tx, op[2], op[3] or -1)
            results[i] = { rc = rc }
        elseif kind == "set" then
            rc, b = self:op_set(tx, op[2], op[3], op[4] or -1)
            results[i] = { rc = rc, stat = rc == C.OK and b or nil }
        elseif kind == "check" then
            rc = self:op_check(tx, op[2], op[3] or -1)
            results[i] = { rc = rc }
        else
            rc = C.BADARGUMENTS
            results[i] = { rc = rc }
        end
        if rc ~= C.OK then
            tx.events = nil
            self:rollback(tx)
            for j = 1, #ops do
                if j < i then results[j] = { rc = C.OK }
                elseif j > i then results[j] = { rc = C.RUNTIMEINCONSISTENCY } end
            end
            return rc, results
        end
    end
    self:fire(tx)
    return C.OK, results
end

function World:new_session()
    self.next_sid = self.next_sid + 1
    local sid = (0x7a6b << 40) | self.next_sid
    self.sessions[sid] = { alive = true }
    return sid
end

-- The server expires a session: its ephemeral nodes go, one transaction.
function World:expire_session(sid)
    local s = self.sessions[sid]
    if not s or not s.alive then return end
    s.alive = false
    local tx = self:begin(false)
    local doomed = {}
    for path, node in pairs(self.nodes) do
        if node.stat.ephemeralOwner == sid then doomed[#doomed + 1] = path end
    end
    for _, path in ipairs(doomed) do self:op_delete(tx, path, -1) end
    self:drop_watches(sid)
    self:fire(tx)
end

-- Test helpers: read the tree directly (no scheduler).
function World:node(path)
    local n = self.nodes[path]
    if not n then return nil end
    return { data = n.data, stat = copy(n.stat) }
end

function World:children(path)
    local n = self.nodes[path]
    if not n then return nil end
    local out = {}
    for name in pairs(n.children) do out[#out + 1] = name end
    table.sort(out)
    return out
end

-- Writes straight into the tree, as another ZooKeeper client would
-- (zkCli, a sidecar we do not run).
function World:raw_create(path, data, owner)
    local tx = self:begin(false)
    local rc = self:op_create(tx, owner or 0, path, data, owner and C.EPHEMERAL or 0)
    assert(rc == C.OK, "raw_create " .. path .. ": " .. rc)
    self:fire(tx)
end

function World:raw_set(path, data)
    local tx = self:begin(false)
    local rc = self:op_set(tx, path, data, -1)
    assert(rc == C.OK, "raw_set " .. path .. ": " .. rc)
    self:fire(tx)
end

function World:raw_delete(path)
    local tx = self:begin(false)
    local rc = self:op_delete(tx, path, -1)
    assert(rc == C.OK, "raw_delete " .. path .. ": " .. rc)
    self:fire(tx)
end

---------------------------------------------------------------------------
-- A sidecar: a session, `zk`, `host`, and the scripts.

local Sidecar = {}
Sidecar.__index = Sidecar

-- The bytes ZooKeeper reads for a request, as the bridge computes them
-- (zk_group.c, zk_request_size): an 8-byte header, then the operation's record;
-- a multi has a 9-byte header before each operation and one at the end.
-- Strings and buffers carry a 4-byte length; a create carries the ACL of
-- world:anyone (the model's nodes are open) and its flags.
local function op_size(kind, path, data)
    local n = 4 + #path
    if kind == "get" or kind == "exists" or kind == "children" then return n + 1 end
    if kind == "create" then return n + 4 + #(data or "") + 4 + (4 + 4 + 5 + 4 + 6) + 4 end
    if kind == "set" then return n + 4 + #(data or "") + 4 end
    if kind == "delete" or kind == "check" then return n + 4 end
    return n
end
Z.op_size = op_size

local function multi_size(ops)
    local n = 8 + 9
    for _, o in ipairs(ops) do n = n + 9 + op_size(o[1], o[2], o[3]) end
    return n
end

local function make_zk(sc)
    local W = sc.world
    local zk = copy(C)

    -- The request limit (host.config.zk_max_request; the bridge's default).
    function zk.max_request()
        return sc.config.zk_max_request or 983040
    end
    function zk.request_size(ops) return multi_size(ops) end
    -- A request over the limit is never sent (recorded in W.refused).
    local function too_big(kind, path, bytes)
        if bytes <= zk.max_request() then return false end
        W.refused = W.refused or {}
        W.refused[#W.refused + 1] = { sc = sc.id, kind = kind, path = path, bytes = bytes }
        return true
    end

    -- Issues one operation for the running task; returns its results.
    -- grouped: the caller let the bridge group the write (the trailing
    -- `true`); recorded in W.ops.
    local function op(kind, path, apply, grouped)
        local co = coroutine.running()
        local task = W.tasks[co]
        assert(task, "zk." .. kind .. " called outside a task")
        W.ops[#W.ops + 1] = { sc = sc.id, kind = kind, path = path, grouped = grouped or nil }
        W.op_times[#W.ops] = W.now
        task.waiting = "zk"
        if sc.closing then
            W:post(function() W:resume(co, C.CLOSING) end)
        elseif not sc.connected then
            local p = { co = co, kind = kind, path = path, apply = apply }
            sc.pending[#sc.pending + 1] = p
            p.timeout = W:at(task.deadline, function()
                for i, q in ipairs(sc.pending) do
                    if q == p then
                        table.remove(sc.pending, i)
                        W:resume(co, C.TIMEOUT)
                        return
                    end
                end
            end)
        else
            sc:issue(co, kind, path, apply)
        end
        return coroutine.yield()
    end

    function zk.get(path, watch)
        return op("get", path, function(sid)
            local n = W.nodes[path]
            if not valid_path(path) then return C.BADARGUMENTS end
            if watch and n then W:watch(sc, path, false, sid) end
            if not n then return C.NONODE end
            return C.OK, n.data, copy(n.stat)
        end)
    end

    function zk.exists(path, watch)
        return op("exists", path, function(sid)
            local n = W.nodes[path]
            if watch then W:watch(sc, path, false, sid) end
            if not n then return C.NONODE end
            return C.OK, copy(n.stat)
        end)
    end

    function zk.children(path, watch)
        return op("children", path, function(sid)
            local names = W:children(path)
            if not names then return C.NONODE end
            if watch then W:watch(sc, path, true, sid) end
            return C.OK, names, copy(W.nodes[path].stat)
        end)
    end

    -- A grouped create answers its path and no stat, as the bridge's does
    -- when it goes out in a group: a multi answers a create's path only
    -- (zk.c, group commit).  sc.grouped_create_stat (W:sidecar's option
    -- grouped_create_stat) answers the stat too, as the bridge does when the
    -- create was alone in its turn (a group of one is sent as the create).
    function zk.create(path, data, flags, grouped)
        if too_big("create", path, 8 + op_size("create", path, data)) then return C.TOOBIG end
        return op("create", path, function(sid)
            local tx = W:begin(false)
            local res = table.pack(W:op_create(tx, sid, path, data, flags))
            W:fire(tx)
            if grouped and not sc.grouped_create_stat then res[3] = nil end
            return table.unpack(res, 1, res.n)
        end, grouped)
    end

    function zk.set(path, data, version, grouped)
        if too_big("set", path, 8 + op_size("set", path, data)) then return C.TOOBIG end
        return op("set", path, function(sid)
            if version == -2 then -- (the bridge's wrap_sets)
                local rc, results = W:op_multi(sid, wrap_sets({ { "set", path, data, version } }))
                return rc, rc == C.OK and results[2].stat or nil
            end
            local tx = W:begin(false)
            local res = table.pack(W:op_set(tx, path, data, version))
            W:fire(tx)
            return table.unpack(res, 1, res.n)
        end, grouped)
    end

    function zk.delete(path, version, grouped)
        return op("delete", path, function()
            local tx = W:begin(false)
            local res = table.pack(W:op_delete(tx, path, version))
            W:fire(tx)
            return table.unpack(res, 1, res.n)
        end, grouped)
    end

    -- Every node is open (world:anyone, all): the model has no ACLs.
    -- Read-ahead (zk_ahead.c): the model's events reach the scripts at
    -- once, so nothing is read ahead; the waiter reads.
    function zk.read_ahead(_watch, _read) end
    function zk.get_ahead(_path) return false end

    function zk.get_acl(path)
        return op("get_acl", path, function()
            if not W.nodes[path] then return C.NONODE end
            return C.OK, { { perms = 31, scheme = "world", id = "anyone" } }
        end)
    end

    function zk.sync(path)
        return op("sync", path, function() return C.OK end)
    end

    -- As lua_host.c: the results are always a table, empty when the multi
    -- answers none (a connection loss, an expired session, TIMEOUT, CLOSING,
    -- TOOBIG).
    function zk.multi(ops, grouped)
        local paths = {}
        for i, o in ipairs(ops) do paths[i] = o[1] .. " " .. o[2] end
        if too_big("multi", table.concat(paths, ", "), multi_size(ops)) then return C.TOOBIG, {} end
        local rc, results = op("multi", table.concat(paths, ", "), function(sid)
            local wrapped, extra = wrap_sets(ops)
            local rc, results = W:op_multi(sid, wrapped)
            return rc, unwrap_sets(results, extra)
        end, grouped)
        return rc, results or {}
    end

    function zk.session()
        return sc.sid, sc.connected
    end

    function zk.seen_zxid() return sc.seen_zxid end

    return zk
end

-- The newest zxid of the stats in an answer (res: its values), for
-- zk.seen_zxid, as zk.c's note_seen.
local function newest(seen, stat)
    return math.max(seen, stat.czxid or 0, stat.mzxid or 0, stat.pzxid or 0)
end

function Sidecar:note_seen(res)
    for i = 2, res.n do
        local v = res[i]
        if type(v) == "table" and v.mzxid then self.seen_zxid = newest(self.seen_zxid, v) end
        if type(v) == "table" and not v.mzxid then
            for _, r in ipairs(v) do
                local st = type(r) == "table" and r.stat
                if type(st) == "table" then self.seen_zxid = newest(self.seen_zxid, st) end
            end
        end
    end
end

-- Whether rc is one the bridge leaves as it is on a stale answer (zk.c's
-- zk_is_connection_rc, and its own TIMEOUT).
local connection_rc = { [C.CONNECTIONLOSS] = true, [C.OPERATIONTIMEOUT] = true,
                        [C.SESSIONMOVED] = true, [C.CLOSING] = true, [C.INVALIDSTATE] = true,
                        [C.SESSIONEXPIRED] = true, [C.TIMEOUT] = true }

-- Sends an operation under the current session; it is answered `latency`
-- ms later, unless the session is given up first (Sidecar:lose, :expire:
-- see take_inflight).  sc.inflight lists what is sent and unanswered.
function Sidecar:issue(co, kind, path, apply)
    local W = self.world
    local fault
    for i, f in ipairs(self.faults) do
        if (f.op == nil or f.op == kind) and (f.path == nil or f.path == path) then
            if (f.skip or 0) > 0 then
                f.skip = f.skip - 1
            else
                fault = table.remove(self.faults, i)
            end
            break
        end
    end
    local sid, gen = self.sid, self.gen
    local rec = { co = co, sid = sid, apply = apply, fault = fault }
    self.inflight[#self.inflight + 1] = rec
    rec.ev = W:at(W.now + (fault and fault.latency or W.latency), function()
        for i, r in ipairs(self.inflight) do
            if r == rec then table.remove(self.inflight, i) break end
        end
        local res
        if fault and not fault.pass and fault.when ~= "after" then
            res = { fault.rc or C.CONNECTIONLOSS, n = 1 }
        elseif not W.sessions[sid].alive then
            res = { C.SESSIONEXPIRED, n = 1 }
        else
            res = table.pack(apply(sid))
            if fault and not fault.pass then res = { fault.rc or C.CONNECTIONLOSS, n = 1 } end
        end
        if fault and fault.hook then fault.hook() end
        -- An answer that comes after the bridge gave its session up (the
        -- hook just did) speaks for a session over since: zk.c's zk_drain
        -- makes it a CONNECTIONLOSS (zk_session.c's zk_stale_answer:
        -- r->gen != z->gen), whatever the server did.
        if self.gen ~= gen and not connection_rc[res[1]] then res = { C.CONNECTIONLOSS, n = 1 } end
        W:post(function()
            self:note_seen(res)
            W:resume(co, table.unpack(res, 1, res.n))
        end)
    end)
end

local function make_host(sc, opts)
    local W = sc.world
    local host = {}
    host.config = {
        root = "/zkresp", max_key_len = 1024, max_value_len = 256 * 1024,
        request_timeout = 2000, session_timeout = 10000,
    }
    for k, v in pairs(opts.config or {}) do host.config[k] = v end
    sc.config = host.config
    host.null = Z.null
    -- 16 bytes, unique per sidecar in its first 8 (the real one is random).
    host.instance = string.format("%08dinstance", sc.id)
    host.redis_version = "7.2.4"

    local function task()
        local t = W.tasks[coroutine.running()]
        assert(t, "host call outside a task")
        return t
    end

    -- A float, as the C host's (lua_pushnumber): arithmetic on it never
    -- wraps around as an integer's would.
    function host.now() return (W.now + sc.mono_base) * 1.0 end
    -- As the C host: host.now() less the time the task spent yielded.
    function host.busy() return host.now() - (task().waited or 0) end

    -- The C host's caps (lua_caps.c's caps_hook), in Lua: the time and
    -- memory caps of client code and the sticky kill.  A Lua hook cannot
    -- yield, so the model never pauses a script between slices by itself;
    -- Sidecar:pause_script(task) marks a task (waiting for ZooKeeper) as
    -- paused, which is what host.busy_scripts and host.kill_scripts see.
    local kill_fn, client_source
    local function is_client(info)
        return info ~= nil and info.what ~= "C" and
               (info.source == client_source or info.source:sub(1, 1) ~= "@")
    end
    local function mark(t, why)
        t.killed = t.killed or why
        if t.caps_on then
            debug.sethook(t.co, function()
                if is_client(debug.getinfo(2, "S")) then kill_fn(t.killed) end
            end, "c", 1)
        end
    end
    function host.caps(deadline, mem0, limit, kill, count, time_every, _, chunk)
        local t = W.tasks[coroutine.running()]
        if not deadline then
            if t then t.caps_on = false end
            return debug.sethook()
        end
        t = task()
        kill_fn, client_source = kill, chunk
        t.caps_on = true
        if t.killed then return mark(t, t.killed) end
        local ticks = 0
        debug.sethook(function()
            if limit > 0 and collectgarbage("count") - mem0 > limit then
                collectgarbage("collect")
                if collectgarbage("count") - mem0 > limit then
                    mark(t, "memory")
                    kill("memory")
                end
            end
            ticks = ticks + 1
            if ticks >= time_every then
                ticks = 0
                if host.busy() > deadline then
                    mark(t, "time")
                    kill("time")
                end
            end
        end, "", count)
    end
    function host.killed()
        local t = W.tasks[coroutine.running()]
        return t and t.killed
    end
    function host.kill(why)
        local t = task()
        mark(t, why)
        kill_fn(t.killed)
    end
    function host.busy_scripts()
        if next(sc.paused) == nil then return end
        local me = W.tasks[coroutine.running()]
        local out = {}
        for t in pairs(sc.paused) do
            if me == nil or (t.client or 1) ~= (me.client or 1) then out[#out + 1] = t.co end
        end
        return table.unpack(out)
    end
    function host.kill_scripts()
        local n = 0
        for t in pairs(sc.paused) do
            mark(t, "killed")
            n = n + 1
        end
        return n
    end
    function host.wall() return (W.now + sc.wall_base) * 1.0 end

    function host.sleep(ms)
        local co = coroutine.running()
        task().waiting = "sleep"
        W:at(W.now + ms, function() W:resume(co) end)
        coroutine.yield()
    end

    -- queued (a command waiting its turn, lua_host.h): it also ends when
    -- the command's client goes (Sidecar:abandon), and the time suspended
    -- does not count against the deadline.
    -- queued = "blocked": it also ends at Sidecar:unblock (CLIENT UNBLOCK).
    function host.suspend(queued)
        local t = task()
        t.waiting, t.queued = "suspend", queued
        local since = W.now
        local r = table.pack(coroutine.yield())
        if queued then t.deadline = t.deadline + (W.now - since) end
        t.queued = nil
        return table.unpack(r, 1, r.n)
    end

    -- behind what is already posted (host.wake, host.spawn), as the
    -- loop's ready queue
    function host.pass()
        local co = coroutine.running()
        task().waiting = "pass"
        W:post(function() W:resume(co) end)
        coroutine.yield()
    end

    function host.wake(co, ...)
        local args = table.pack(...)
        -- already made ready (Sidecar:unblock, Sidecar:abandon): void, as
        -- C's host.wake of a coroutine no longer waiting for one
        local t0 = W.tasks[co]
        if t0 and t0.waiting == "ready" then return false end
        W:post(function()
            local t = W.tasks[co]
            if not t or t.done or t.waiting == "ready" then return end
            if t.waiting ~= "suspend" then
                error("host.wake of a coroutine waiting on " .. tostring(t.waiting))
            end
            W:resume(co, table.unpack(args, 1, args.n))
        end)
    end

    function host.spawn(fn, ...)
        W:spawn(sc, fn, ...)
    end

    function host.timer(fn)
        local t = {}
        function t:start(ms)
            if self.ev then self.ev.cancel() end
            self.ev = W:at(W.now + ms, function()
                self.ev = nil
                W:spawn(sc, fn)
            end)
        end
        function t:stop()
            if self.ev then self.ev.cancel() end
            self.ev = nil
        end
        return t
    end

    function host.deadline()
        return task().deadline + sc.mono_base
    end

    -- As the bridge: the command may wait for a reconnect while the
    -- session may live (the model has no lease clock: 90% of the session
    -- timeout from now).
    function host.lease_wait()
        local t = task()
        t.deadline = math.max(t.deadline, W.now + sc.config.session_timeout * 0.9)
    end

    -- A blocking wait (lua_host.h): Sidecar:unblock ends it.
    function host.block(on)
        local t = W.tasks[coroutine.running()]
        if t and on == false then t.blocked = nil
        elseif t and not t.unblock then t.blocked = true end
    end
    function host.unblocked()
        local t = W.tasks[coroutine.running()]
        return t and t.unblock or nil
    end

    -- (the model sends every reply: no session check to exempt it from)
    function host.outlives_session() end

    -- Clients: a task started by Sidecar:call_as(id, ...) runs for client
    -- id (default 1); pushes land in sc.pushed[id], subscription counts in
    -- sc.subcounts[id].
    sc.pushed, sc.subcounts = {}, {}
    function host.client()
        local t = W.tasks[coroutine.running()]
        if t and t.gone then return nil end
        local id = t and t.client or 1
        return { id = id, resp = 2, user = "default", addr = "127.0.0.1:" .. (40000 + id) }
    end
    -- A connection's order (queue.lua's Q.turn): a task given a client runs
    -- as that connection's; any other is a connection of its own, so that
    -- tasks started side by side run side by side, as from many clients.
    function host.client_id()
        local t = W.tasks[coroutine.running()]
        if not t or t.gone then return nil end
        return t.client or t
    end
    function host.push(id, value)
        sc.pushed[id] = sc.pushed[id] or {}
        table.insert(sc.pushed[id], value)
        return true
    end
    function host.subscriptions(id, c, p, s)
        sc.subcounts[id] = { c, p, s }
    end

    -- A start-up check that cannot pass (lua_host_set_fatal): recorded.
    function host.fatal(reason) sc.fatal = reason end

    function host.log(level, msg)
        sc.logs[#sc.logs + 1] = level .. " " .. msg
    end

    host.key_encode = Z.key_encode
    host.key_decode = Z.key_decode
    -- the 32-bit FNV-1a, as sidecar/lua_hostlib.c computes it
    function host.hash(s)
        local h = 2166136261
        for i = 1, #s do h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff end
        return h
    end
    return host
end

-- Loads the scripts for this sidecar in a private environment with its own
-- `zk`, `host`, `require` and `package`.
local function load_scripts(sc)
    local env = setmetatable({}, { __index = _G })
    env._G = env
    env.zk = sc.zk
    env.host = sc.host
    local loaded = {}
    env.package = { path = Z.SCRIPTS .. "/?.lua", loaded = loaded,
                    searchpath = package.searchpath }
    env.require = function(name)
        if loaded[name] == nil then
            local path = Z.SCRIPTS .. "/" .. name .. ".lua"
            local f = io.open(path)
            if f then
                f:close()
                local chunk = assert(loadfile(path, "t", env))
                loaded[name] = chunk(name) or true
            else -- a C module the host's package.cpath finds (cjson)
                loaded[name] = require(name)
            end
        end
        return loaded[name]
    end
    sc.env = env
    sc.require = env.require
    return env.require("zkresp")
end

-- A new sidecar.  opts: config (host.config entries), mono_base and
-- wall_base (where its clocks start), connect (default true: it connects
-- and runs the "connected" event), grouped_create_stat (default false: a
-- grouped create answers no stat, as the bridge's in a group; true: it
-- answers one, as a create alone in its turn does).
function World:sidecar(opts)
    opts = opts or {}
    local id = #self.sidecars + 1
    local sc = setmetatable({
        world = self, id = id, logs = {}, faults = {}, pending = {}, paused = {},
        mono_base = opts.mono_base or (id * 1000003),
        wall_base = opts.wall_base or (1800000000000 + id * 7919),
        connected = false, grouped_create_stat = opts.grouped_create_stat or false, seen_zxid = 0,
        inflight = {}, gen = 0,
    }, Sidecar)
    self.sidecars[id] = sc
    sc.sid = self:new_session()
    sc.zk = make_zk(sc)
    sc.host = make_host(sc, opts)
    sc.null = Z.null
    -- Loading runs outside any task; it must not call zk or yield.
    sc.M = load_scripts(sc)
    sc.K = sc.require("keyspace")
    sc.LK = sc.require("locks")
    if opts.connect ~= false then
        sc.connected = true
        sc:event("connected")
    end
    return sc
end

-- Runs M.on_session(event) in a task and waits for it.
function Sidecar:event(event, sid)
    local t = self.world:spawn(self, self.M.on_session, event, sid or self.sid)
    self.world:run_until(function() return t.done end)
end

-- SIGHUP: M.on_reload in a fresh task, run to its end.
function Sidecar:reload()
    local t = self.world:spawn(self, self.M.on_reload)
    self.world:run_until(function() return t.done end)
end

-- Starts a command; returns its task (task.done, task.result).
function Sidecar:start(...)
    local args = table.pack(...)
    local list = {}
    for i = 1, args.n do list[i] = args[i] end
    local M = self.M
    return self.world:spawn(self, function() return M.dispatch(list) end)
end

-- Marks a started script's task, now waiting, as paused between slices
-- (the C host pauses a script that runs past sandbox.SLICE_MS; a Lua hook
-- cannot): until it is resumed the VM is busy for other clients.
function Sidecar:pause_script(task)
    assert(not task.done and task.yielded, "pause_script: the task must be waiting")
    task.paused = true
    self.paused[task] = true
end

-- The client of a started command went away (lua_host_abandon): the
-- command finishes without a reply; one in host.suspend(true) wakes now.
function Sidecar:abandon(task)
    task.gone = true
    if task.waiting == "suspend" and task.queued then
        task.waiting = "ready"
        self.world:post(function() self.world:resume(task.co) end)
    end
end

-- CLIENT UNBLOCK of a started command (lua_host_unblock), how: "timeout"
-- or "error".  1 when it was blocked (host.block), its wait ended now.
function Sidecar:unblock(task, how)
    if task.done or task.gone or not task.blocked then return 0 end
    task.blocked, task.unblock = nil, how or "timeout"
    if task.waiting == "suspend" and task.queued == "blocked" then
        task.waiting = "ready" -- (as lua_co_ready: a later host.wake is void)
        self.world:post(function() self.world:resume(task.co) end)
    end
    return 1
end

-- Runs a command of client id to completion and returns its reply.
function Sidecar:call_as(id, ...)
    local t = self:start(...)
    t.client = id
    self.world:run_until(function() return t.done end)
    return t.result
end

-- Runs a command to completion and returns its reply.
function Sidecar:call(...)
    local t = self:start(...)
    self.world:run_until(function() return t.done end)
    return t.result
end

-- Runs fn(...) in a task of this sidecar (with zk and host available) and
-- returns what it returns.
function Sidecar:run(fn, ...)
    local t = self.world:spawn(self, fn, ...)
    self.world:run_until(function() return t.done end)
    return table.unpack(t.results, 2, t.results.n)
end

-- The next operation matching f.op (and f.path) fails with f.rc (default
-- CONNECTIONLOSS), f.when = "before" (not applied, the default) or "after"
-- (applied, reply lost); f.pass = true does not fail it at all (with
-- f.latency: only slow).  f.skip lets that many matching operations pass
-- first; f.latency delays it instead of the world's latency.  f.hook runs
-- when it fires.
function Sidecar:fail_next(f)
    self.faults[#self.faults + 1] = f
end

-- The connection to the server drops; the session lives on.  As the
-- ZooKeeper C client's handle_error (zookeeper.c): it queues the session
-- event ZOO_CONNECTING_STATE, then cleanup_bufs/free_completions ends
-- every request it has sent or queued with ZCONNECTIONLOSS, though the
-- server may have applied it (a lost reply; opts.unapplied: it had not);
-- the bridge drains them in that order (zk.c's zk_drain): zk_session_state
-- emits "disconnected" (M.on_session runs at once up to its first wait),
-- then each request is answered.  A request asked from then on is parked
-- (zk.c's zk_send_or_park: the handle is not usable), answered TIMEOUT at
-- its deadline (zk_session.c's on_tick, zk_expire_parked), SESSIONEXPIRED
-- when the session is given up (restart_session), or sent at the
-- reconnect.  The server cannot tell a disconnected client of its
-- watches: their events wait for the reconnect (sc.held), when the client
-- sets its watches again (Sidecar:reconnect).  Returns the "disconnected"
-- task (nil when already disconnected).
local take_inflight
local function drop_connection(sc, unapplied)
    if not sc.connected then return nil end
    local W = sc.world
    local inflight = take_inflight(sc, unapplied)
    sc.connected = false
    sc.held = sc.held or { data = {}, child = {} }
    local t = W:spawn(sc, sc.M.on_session, "disconnected", sc.sid)
    W:post(function()
        for _, rec in ipairs(inflight) do
            W:post(function() W:resume(rec.co, C.CONNECTIONLOSS) end)
        end
    end)
    return t
end

-- The connection is gone (drop_connection); runs until "disconnected" is
-- handled.  opts.unapplied: what was in flight had not reached the server.
function Sidecar:disconnect(opts)
    local t = drop_connection(self, opts and opts.unapplied)
    if t then self.world:run_until(function() return t.done end) end
end

local function flush(sc)
    local pending = sc.pending
    sc.pending = {}
    for _, p in ipairs(pending) do
        p.timeout.cancel()
        sc:issue(p.co, p.kind, p.path, p.apply)
    end
end

-- The connection is back, the session alive (zk_session.c's
-- zk_session_state on ZOO_CONNECTED_STATE: zk_flush_parked sends what was
-- parked, in its order, then emits "connected").  The events of watches
-- that fired meanwhile follow "connected" as the server sends them when
-- the client sets its watches again (the C client's send_set_watches,
-- ZooKeeper's DataTree.setWatches), before the answers to the parked
-- requests it sent after: the data watches' first, then the child
-- watches', each posted right after "connected", not after its handling
-- has finished.
function Sidecar:reconnect()
    self.connected = true
    flush(self)
    local held = self.held or { data = {}, child = {} }
    self.held = nil
    local t = self.world:spawn(self, self.M.on_session, "connected", self.sid)
    for _, kind in ipairs({ "data", "child" }) do
        for _, e in ipairs(held[kind]) do self.world:spawn(self, self.M.on_watch, e[1], e[2]) end
    end
    self.world:run_until(function() return t.done end)
end

-- The session is given up: what was parked for it is answered, never sent
-- under the next one (as the bridge does).
local function fail_pending(sc)
    local pending = sc.pending
    sc.pending = {}
    for _, p in ipairs(pending) do
        p.timeout.cancel()
        sc.world:post(function() sc.world:resume(p.co, C.SESSIONEXPIRED) end)
    end
end

-- What the sidecar has sent under the session it is giving up, still
-- unanswered: the server got it before the connection broke (or before it
-- expired the session) and applied it, unless `unapplied`; its answer
-- never comes (end_session answers it).  Taken before the session's end
-- on the server, so that an ephemeral node it created goes with it.
function take_inflight(sc, unapplied)
    local W, list = sc.world, sc.inflight
    sc.inflight = {}
    for _, rec in ipairs(list) do
        rec.ev.cancel()
        local f = rec.fault
        local dropped = f and not f.pass and f.when ~= "after"
        if not unapplied and not dropped and W.sessions[rec.sid].alive then rec.apply(rec.sid) end
    end
    return list
end

-- The bridge gives session `old` up (zk_session.c: zk_session_state on
-- ZOO_EXPIRED_SESSION_STATE, on_tick when the lease passed): it emits
-- "lost", whose M.on_session runs at once up to its first wait (lua_host.c's
-- call_hook), while the bridge is not connected (a request it makes is
-- parked); then restart_session closes the handle: each request in flight
-- (`inflight`, from take_inflight) is answered CONNECTIONLOSS (zk.c's
-- fail_unanswered: an unknown outcome, though the server may have applied
-- it), each parked for the old session SESSIONEXPIRED, and there is no
-- session (zk.session() answers 0, not connected) until the new handle
-- connects (Sidecar:next_session): a request made meanwhile is parked and
-- sent then.  Answers of the old handle that come later are stale
-- (Sidecar:issue).  Returns the "lost" task.
function Sidecar:end_session(old, inflight)
    local W = self.world
    self.connected = false
    self.gen = self.gen + 1
    local lost = W:spawn(self, self.M.on_session, "lost", old)
    local restarted = false
    W:post(function()
        for _, rec in ipairs(inflight) do
            W:post(function() W:resume(rec.co, C.CONNECTIONLOSS) end)
        end
        fail_pending(self)
        self.sid = 0
        restarted = true
    end)
    W:run_until(function() return restarted end)
    return lost
end

-- The local lease deadline passed while disconnected: "lost", then a new
-- session ("new").  The old session lives on in the server (its nodes stay)
-- unless opts.expire_old.  With opts.gap the next session is not there yet
-- (zk.session() answers 0, as the bridge's between two sessions) until
-- Sidecar:next_session().  opts.unapplied: what was in flight had not
-- reached the server (by default it applied it, its reply lost).
function Sidecar:lose(opts)
    opts = opts or {}
    local old = self.sid
    -- (the lease runs out only while disconnected: the connection dropped
    -- first, see drop_connection)
    if drop_connection(self, opts.unapplied) then self.world:settle() end
    local inflight = take_inflight(self, opts.unapplied)
    self.held = nil
    self.world:drop_watches(old) -- (its handle closed)
    local lost = self:end_session(old, inflight)
    if opts.expire_old then self.world:expire_session(old) end
    if opts.gap then
        self.world:settle()
        return old
    end
    self:next_session(lost)
    return old
end

-- After lose({gap = true}) or expire({gap = true}): the new session
-- connects.  What was parked meanwhile is sent, then "new" (zk_session.c's
-- zk_session_state: zk_flush_parked, then emit); runs until it is handled
-- (and the "lost" task `lost`, when given).
function Sidecar:next_session(lost)
    local W = self.world
    W:settle()
    self.sid = W:new_session()
    self.connected = true
    flush(self)
    local t = W:spawn(self, self.M.on_session, "new", self.sid)
    W:run_until(function() return t.done and (not lost or lost.done) end)
end

-- The server expired our session (its ephemeral nodes and watches gone):
-- the bridge, told so when it reconnects, gives it up as end_session says
-- ("lost"), then its new session connects ("new").  opts.gap and
-- opts.unapplied as Sidecar:lose's.
function Sidecar:expire(opts)
    opts = opts or {}
    local old = self.sid
    -- The client sees the connection drop first ("disconnected", what was
    -- in flight answered CONNECTIONLOSS: drop_connection), then, on its
    -- reconnect, the server's word that the session expired.
    if drop_connection(self, opts.unapplied) then self.world:settle() end
    local inflight = take_inflight(self, opts.unapplied)
    self.held = nil -- the old session's watches are gone
    self.world:expire_session(old)
    local lost = self:end_session(old, inflight)
    if opts.gap then
        self.world:settle()
        return old
    end
    self:next_session(lost)
    return old
end

-- Shutting down: operations answer CLOSING, the session closes.
function Sidecar:close()
    self.closing = true
    self.world:expire_session(self.sid)
end

-- The znode path of a key under the default policy.
function Sidecar:path(key)
    return self.config.root .. "/k/" .. Z.key_encode(key)
end

return Z
