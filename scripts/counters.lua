-- counters.lua — event counters the command modules bump and M.stats
-- (zkresp.lua) reports on /metrics.  Plain numbers; nothing here yields.

return {
    published = 0, -- PUBLISH/SPUBLISH calls (messages offered to pub/sub)
}
