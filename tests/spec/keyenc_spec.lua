-- Key -> znode path: sidecar/keyenc.h's encoding (implemented by the fake
-- host as the C host will), the default path and the policy hook.

local S = require "world"

describe("key encoding", function()
    local enc, dec = S.model.key_encode, S.model.key_decode

    it("keeps the safe bytes and escapes every other byte in upper-case hex", function()
        assert.equal("lock:{order-1}@a=b+c,d!_x", enc("lock:{order-1}@a=b+c,d!_x"))
        assert.equal("a%2Fb", enc("a/b"))
        assert.equal("%2E", enc("."))
        assert.equal("%2E%2E", enc(".."))
        assert.equal("%25", enc("%"))
        assert.equal("%00", enc("\0"))
        assert.equal("%20%0D%0A%FF", enc(" \r\n\255"))
        assert.equal("zookeeper", enc("zookeeper")) -- under <root>/k, harmless
        assert.equal("%", enc(""))
    end)

    it("round-trips every byte and rejects names it could not have made", function()
        for b = 0, 255 do
            local k = "x" .. string.char(b) .. "y"
            assert.equal(k, dec(enc(k)))
        end
        assert.equal("", dec("%"))
        assert.is_nil(dec(""))
        assert.is_nil(dec("%2e"))     -- lower-case hex
        assert.is_nil(dec("%41"))     -- 'A' never escaped
        assert.is_nil(dec("a.b"))     -- '.' always escaped
        assert.is_nil(dec("%4"))
    end)

    it("never produces '.', '..', '/' or NUL in a name, and no two keys collide", function()
        local seen = {}
        local keys = { "", ".", "..", "/", "a/b", "a%2Fb", "%", "%25", "\0", "zookeeper",
                       "\255\254", "a b", "A", "a" }
        for _, k in ipairs(keys) do
            local n = enc(k)
            assert.is_nil(n:find("[/%z]"))
            assert.is_true(n ~= "." and n ~= "..")
            assert.is_nil(seen[n], "collision on " .. n)
            seen[n] = k
        end
    end)
end)

describe("key paths", function()
    it("puts a key at <root>/k/<encoded key>", function()
        local W, a = S.world(1)
        assert.equal("/zkresp/k/a%2Fb", a.K.path("a/b"))
        assert.same({ ok = "OK" }, a:call("SET", "a/b", "v"))
        assert.is_not_nil(W:node("/zkresp/k/a%2Fb"))
        assert.same({ "a%2Fb" }, W:children("/zkresp/k"))
    end)

    it("follows host.config.root and creates it on start", function()
        local W, a = S.world({ { config = { root = "/apps/locks" } } })
        assert.is_not_nil(W:node("/apps/locks/k"))
        a:call("SET", "k", "v")
        assert.is_not_nil(W:node("/apps/locks/k/k"))
    end)

    it("uses the policy's key_path first, creating missing parents", function()
        local W = S.world(0)
        local file = S.policy_file([[
            return { key_path = function(key)
                local t = key:match("^tenant:(%w+):")
                if t then return "/tenants/" .. t .. "/" .. host.key_encode(key) end
            end }
        ]])
        local a = W:sidecar({ config = { policy = file } })
        assert.same({ ok = "OK" }, a:call("SET", "tenant:x:lock", "v"))
        assert.is_not_nil(W:node("/tenants/x/tenant:x:lock"))
        assert.equal("v", a:call("GET", "tenant:x:lock"))
        a:call("SET", "plain", "v")
        assert.is_not_nil(W:node("/zkresp/k/plain"))
        os.remove(file)
    end)
end)
