-- command_table.lua — the one table of every command (M.commands in
-- zkresp.lua, which fills it): required by zkresp.lua and by eval.lua,
-- whose redis.call dispatches through the same table as the top level.
return {}
