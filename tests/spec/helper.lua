-- helper.lua — loaded by busted before the specs (make test-spec runs
-- `busted --helper=tests/spec/helper.lua -o TAP tests/spec` from the repo
-- root).  Makes tests/spec/zkmodel.lua and tests/spec/world.lua (the
-- replies and the world every spec shares) requirable and points the
-- model at scripts/.

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "tests/spec"
local root = here:gsub("/?tests/spec$", "")
if root == "" then root = "." end

package.path = here .. "/?.lua;" .. package.path

local zkmodel = require "zkmodel"
zkmodel.SCRIPTS = root .. "/scripts"

-- Retry jitter uses math.random: keep runs repeatable.
math.randomseed(20240601)
