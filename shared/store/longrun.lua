#!lua name=longrun
-- longrun's Redis Functions. Every key a function touches is declared in KEYS and shares the
-- agent's partition hash tag, so each call is atomic on one Redis or one Cluster slot.
-- A function does not roll back: every check runs before the first write.

-- The library's version: raise it with every change a running process could notice. A loader
-- never replaces a newer version (shared/store/functions.py), and the source's own digest,
-- filled in at load time, tells two builds of one version apart.
local LIBRARY_VERSION = 5
local SOURCE_DIGEST = '@SOURCE_DIGEST@'

-- lr_version: which library is loaded. Returns {version, source digest}.
local function lr_version(keys, args)
  return {LIBRARY_VERSION, SOURCE_DIGEST}
end

-- lr_load: read everything a ledger decision needs for one agent, in one round trip.
-- KEYS: 1 idempotency, 2 agent hash, 3 fence, 4 items hash (open), 5 waits hash, 6 waits-done
--       hash, 7 capability (or any key of the tag), 8 delivery mark (or any key), 9 (from
--       version 4, optional) finished items hash: a named item not open is looked up there
-- ARGV: work item ids the command names; wait ids the command names (prefixed "w:"); and
--       optionally "v:<version>", the agent version of a slice the caller holds
-- Returns: {stored_reply|false, agent_doc|false, version, fence, {active wait docs},
--           cap_doc|false, delivery_seen (0/1), {item docs of named, current and waited items},
--           {named cancelled wait docs}}; when the agent is still at the caller's version, the
--           agent doc, waits and items are left out (false, {}, {}) and a tenth element 1 says so
local function lr_load_full(keys, args, agent)
  local stored = redis.call('GET', keys[1])
  local fence = redis.call('GET', keys[3]) or '0'
  local waits = redis.call('HVALS', keys[5])
  local cap = redis.call('GET', keys[7])
  local seen = redis.call('EXISTS', keys[8])
  local wanted, done_wanted = {}, {}
  for _, id in ipairs(args) do
    if string.sub(id, 1, 2) == 'w:' then
      table.insert(done_wanted, string.sub(id, 3))
    elseif string.sub(id, 1, 2) == 'v:' then
      -- the caller's version hint: not an item
    else
      wanted[id] = true
    end
  end
  if agent[3] and agent[3] ~= '' then wanted[agent[3]] = true end
  for _, doc in ipairs(waits) do
    local item_id = cjson.decode(doc)['work_item_id']
    if type(item_id) == 'string' then wanted[item_id] = true end
  end
  local ids = {}
  for id, _ in pairs(wanted) do table.insert(ids, id) end
  local items = {}
  if #ids > 0 then
    local docs = redis.call('HMGET', keys[4], unpack(ids))
    local missing = {}
    for i = 1, #ids do
      if docs[i] then table.insert(items, docs[i]) else table.insert(missing, ids[i]) end
    end
    if keys[9] and #missing > 0 then
      for _, doc in ipairs(redis.call('HMGET', keys[9], unpack(missing))) do
        if doc then table.insert(items, doc) end
      end
    end
  end
  local done = {}
  if #done_wanted > 0 then
    local docs = redis.call('HMGET', keys[6], unpack(done_wanted))
    for i = 1, #done_wanted do
      if docs[i] then table.insert(done, docs[i]) end
    end
  end
  return {stored or false, agent[1] or false, agent[2] or '0', fence, waits, cap or false, seen,
          items, done}
end

local function lr_load(keys, args)
  local agent = redis.call('HMGET', keys[2], 'doc', 'version', 'current')
  local known = args[#args]
  if known and string.sub(known, 1, 2) == 'v:' and agent[2] == string.sub(known, 3) then
    return {redis.call('GET', keys[1]) or false, false, agent[2], redis.call('GET', keys[3]) or '0',
            {}, redis.call('GET', keys[7]) or false, redis.call('EXISTS', keys[8]), {}, {}, 1}
  end
  return lr_load_full(keys, args, agent)
end

-- Arguments each write op takes after its key index.
-- reply (to the sender's reply stream, standalone Redis only: the stream has no partition tag)
-- and xack (of the command's own entry) let a run be answered and acknowledged in the same step.
local ARITY = {hset = 2, hdel = 1, set = 1, setex = 2, zadd = 2, zrem = 1, rpush = 1,
               ltrim = 2, lpop = 1, xadd = 3, reply = 3, xack = 2, hincrby = 2,
               lrem = 2}

local function apply(keys, op, k, a)
  local key = keys[tonumber(k)]
  if op == 'hset' then redis.call('HSET', key, a[1], a[2])
  elseif op == 'hdel' then redis.call('HDEL', key, a[1])
  elseif op == 'set' then redis.call('SET', key, a[1])
  elseif op == 'setex' then redis.call('SET', key, a[2], 'EX', a[1])
  elseif op == 'zadd' then redis.call('ZADD', key, a[1], a[2])
  elseif op == 'zrem' then redis.call('ZREM', key, a[1])
  elseif op == 'rpush' then redis.call('RPUSH', key, a[1])
  elseif op == 'ltrim' then redis.call('LTRIM', key, a[1], a[2])
  elseif op == 'lrem' then redis.call('LREM', key, a[1], a[2])
  elseif op == 'hincrby' then redis.call('HINCRBY', key, a[1], a[2])
  elseif op == 'lpop' then
    if tonumber(a[1]) > 0 then redis.call('LPOP', key, a[1]) end
  elseif op == 'xadd' then redis.call('XADD', key, 'MAXLEN', '~', a[1], '*', 'm', a[2], 'k', a[3])
  elseif op == 'reply' then
    redis.call('XADD', key, 'MAXLEN', '~', a[1], '*', 'm', a[3])
    redis.call('EXPIRE', key, a[2])
  elseif op == 'xack' then redis.call('XACK', key, a[1], a[2])
  end
end

-- lr_commit: apply a run of one agent's decided commands, each exactly once, in one step.
-- KEYS: 1 agent hash, 2 fence, then whatever the commands name by index.
-- ARGV: 1 reply ttl seconds, 2 number of commands, then per command: idempotency key index,
--       expected agent version ('*' = no check, '0' = agent must not exist), version after it
--       ('' = unchanged), fencing token ('' = none), reply to store, count of op args that
--       follow, then ops: name, key index, args (ARITY[name] of them)...
-- Every command's checks run before the first write. The commands before the first that fails
-- a check are applied; the rest are not.
-- Returns {applied count} when all applied, else {applied count, 'duplicate', stored reply} |
--   {applied count, 'conflict', version} | {applied count, 'stale', fence}
local function lr_commit(keys, args)
  local n = tonumber(args[2])
  local version = redis.call('HGET', keys[1], 'version') or '0'
  local fence = nil
  local replies = {}
  local starts = {}
  local failed = nil
  local i = 3
  for c = 1, n do
    local idem = keys[tonumber(args[i])]
    if not idem then return redis.error_reply('lr_commit: undeclared idempotency key') end
    local stored = replies[idem] or redis.call('GET', idem)
    if stored then failed = {c - 1, 'duplicate', stored}; break end
    if args[i + 1] ~= '*' and args[i + 1] ~= version then
      failed = {c - 1, 'conflict', version}; break
    end
    if args[i + 3] ~= '' then
      fence = fence or redis.call('GET', keys[2]) or '0'
      if fence ~= args[i + 3] then failed = {c - 1, 'stale', fence}; break end
    end
    if args[i + 2] ~= '' then version = args[i + 2] end
    replies[idem] = args[i + 4]
    -- Validate the op list fully before the first write: a script does not roll back.
    local j, last = i + 6, i + 5 + tonumber(args[i + 5])
    while j <= last do
      local arity = ARITY[args[j]]
      if not arity then return redis.error_reply('lr_commit: unknown op ' .. tostring(args[j])) end
      if not keys[tonumber(args[j + 1])] then
        return redis.error_reply('lr_commit: op ' .. args[j] .. ' names an undeclared key')
      end
      j = j + 2 + arity
    end
    if j ~= last + 1 or last > #args then return redis.error_reply('lr_commit: truncated op list') end
    starts[c] = i
    i = last + 1
  end
  if not failed and i ~= #args + 1 then return redis.error_reply('lr_commit: trailing arguments') end
  for c = 1, #starts do
    local s = starts[c]
    local j, last = s + 6, s + 5 + tonumber(args[s + 5])
    while j <= last do
      local arity = ARITY[args[j]]
      apply(keys, args[j], args[j + 1], {unpack(args, j + 2, j + 1 + arity)})
      j = j + 2 + arity
    end
    redis.call('SET', keys[tonumber(args[s])], args[s + 4], 'EX', args[1])
  end
  return failed or {n}
end

-- lr_lease_acquire: take the agent's turn lease and a new fencing token in one step.
-- KEYS: 1 lease, 2 fence counter. ARGV: 1 owner, 2 ttl ms. Returns the token, or false if held.
local function lr_lease_acquire(keys, args)
  if redis.call('SET', keys[1], args[1], 'NX', 'PX', args[2]) then
    return redis.call('INCR', keys[2])
  end
  return false
end

-- lr_lease_renew / lr_lease_release: only the owner may extend or drop its lease.
-- KEYS: 1 lease. ARGV: 1 owner, 2 ttl ms (renew). Returns 1 when done, 0 when not the owner.
local function lr_lease_renew(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('PEXPIRE', keys[1], args[2])
    return 1
  end
  return 0
end

local function lr_lease_release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('DEL', keys[1])
    return 1
  end
  return 0
end

-- lr_tick_release: clear the agent's outstanding-tick marker if it still names this tick.
-- KEYS: 1 marker. ARGV: 1 tick id. Returns 1 when cleared.
local function lr_tick_release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('DEL', keys[1])
    return 1
  end
  return 0
end

-- lr_tick_publish: publish ticks of one partition, each unless its agent has one outstanding:
-- set the agent's marker (NX, PX ttl) and append the tick in one step, so a crash never leaves
-- a marker without its tick. One call carries every tick a batch decided for the partition.
-- KEYS: 1 ticks stream, 2.. one marker per tick. ARGV: 1 ttl ms, 2 stream maxlen, then per
-- tick: tick id, envelope, agent id.
-- Returns one 1 (published) or 0 (a tick was already outstanding) per tick, in order.
local function lr_tick_publish(keys, args)
  local out = {}
  for t = 2, #keys do
    local a = 3 * (t - 2) + 3
    if redis.call('SET', keys[t], args[a], 'NX', 'PX', args[1]) then
      redis.call('XADD', keys[1], 'MAXLEN', '~', args[2], '*', 'm', args[a + 1], 'k', args[a + 2])
      out[t - 1] = 1
    else
      out[t - 1] = 0
    end
  end
  return out
end

-- lr_timer_schedule: arm a timer once per scheduling event, so a redelivered event never
-- re-arms a timer that already fired.
-- KEYS: 1 timers zset, 2 the event's mark. ARGV: 1 due ms, 2 member, 3 mark ttl seconds.
-- Returns 1 when armed, 0 when this event was already applied.
local function lr_timer_schedule(keys, args)
  if not redis.call('SET', keys[2], '1', 'NX', 'EX', args[3]) then return 0 end
  redis.call('ZADD', keys[1], args[1], args[2])
  return 1
end

-- lr_snapshot: everything the scheduling decisions of some agents (of one partition) read, in
-- one round trip.
-- KEYS: per agent, in this order: agent hash, lease, tick marker, waits hash, inbox,
--       due-rechecks zset, items hash (open), [finished items hash,] then the class indexes
--       (one per ARGV depth)
-- ARGV: 1 '1' to read every item ('0' not), followed by 'f' when each agent's keys include its
--       finished items hash (from version 4), 2 most due rechecks to read, 3.. head depth per
--       class index
-- Returns one reply per agent: {false} for an unknown agent, else {doc, lease (0/1),
--   marker|false, {wait docs}, inbox length, {due ids}, {zcard per index},
--   {item docs: heads, due and current}}; an id the open hash lacks is read from the finished
--   one, so a head of a completed class parses only the items it shows
local function item_docs(hash, finished, ids)
  local items = {}
  if #ids == 0 then return items end
  local missing = {}
  for i, doc in ipairs(redis.call('HMGET', hash, unpack(ids))) do
    if doc then table.insert(items, doc) else table.insert(missing, ids[i]) end
  end
  if finished and #missing > 0 then
    for _, doc in ipairs(redis.call('HMGET', finished, unpack(missing))) do
      if doc then table.insert(items, doc) end
    end
  end
  return items
end

local function snapshot_one(keys, base, args, extra)
  local agent = redis.call('HMGET', keys[base + 1], 'doc', 'current')
  if not agent[1] then return {false} end
  local due = redis.call('ZRANGE', keys[base + 6], 0, tonumber(args[2]) - 1)
  local counts, wanted, ids = {}, {}, {}
  local function want(id)
    if not wanted[id] then wanted[id] = true; table.insert(ids, id) end
  end
  for i = 3, #args do
    local index = keys[base + i + 5 + extra]
    table.insert(counts, redis.call('ZCARD', index))
    local depth = tonumber(args[i])
    if depth > 0 then
      for _, id in ipairs(redis.call('ZRANGE', index, 0, depth - 1)) do want(id) end
    end
  end
  for _, id in ipairs(due) do want(id) end
  if agent[2] and agent[2] ~= '' then want(agent[2]) end
  local finished = nil
  if extra == 1 then finished = keys[base + 8] end
  local items
  if string.sub(args[1], 1, 1) == '1' then
    items = redis.call('HVALS', keys[base + 7])
    if finished then
      for _, doc in ipairs(redis.call('HVALS', finished)) do table.insert(items, doc) end
    end
  else
    items = item_docs(keys[base + 7], finished, ids)
  end
  return {agent[1], redis.call('EXISTS', keys[base + 2]), redis.call('GET', keys[base + 3]) or false,
          redis.call('HVALS', keys[base + 4]), redis.call('LLEN', keys[base + 5]), due, counts,
          items}
end

local function lr_snapshot(keys, args)
  local extra = 0
  if string.sub(args[1], 2, 2) == 'f' then extra = 1 end
  local stride = 7 + extra + #args - 2
  if #keys % stride ~= 0 then
    return redis.error_reply('lr_snapshot: keys are not whole agents')
  end
  local out = {}
  for base = 0, #keys - stride, stride do
    table.insert(out, snapshot_one(keys, base, args, extra))
  end
  return out
end

-- lr_items_head: the first members of a class index and their WorkItems, in one step (a turn's
-- opening reads the recently completed items it shows this way, never the whole finished hash).
-- KEYS: 1 class index, 2 items hash (open), 3 finished items hash. ARGV: 1 how many.
-- Returns {members of the index, {item docs of its first ARGV[1] members}}.
local function lr_items_head(keys, args)
  local count = redis.call('ZCARD', keys[1])
  local depth = tonumber(args[1])
  if depth <= 0 then return {count, {}} end
  return {count, item_docs(keys[2], keys[3], redis.call('ZRANGE', keys[1], 0, depth - 1))}
end

-- lr_timers_due: move due timers from the partition's sorted set to its fired stream in one
-- step, so several scheduler replicas never fire one timer twice.
-- KEYS: 1 timers zset, 2 fired stream. ARGV: 1 now ms, 2 limit, 3 stream maxlen.
-- Returns the number moved.
local function lr_timers_due(keys, args)
  local due = redis.call('ZRANGEBYSCORE', keys[1], '-inf', args[1], 'WITHSCORES', 'LIMIT', 0, args[2])
  for i = 1, #due, 2 do
    redis.call('XADD', keys[2], 'MAXLEN', '~', args[3], '*', 'm', due[i], 'due', due[i + 1])
    redis.call('ZREM', keys[1], due[i])
  end
  return #due / 2
end

-- lr_xadd_all: append several entries to one stream in one command. Redis serves a reader
-- blocked on a stream after each command, so entries added one XADD at a time reach a waiting
-- ledger one by one (a batch and a commit each); added by one call, they arrive in one batch.
-- KEYS: 1 stream. ARGV: 1 stream maxlen, 2.. one envelope per entry ('m').
-- Returns the number of entries appended.
local function lr_xadd_all(keys, args)
  for i = 2, #args do
    redis.call('XADD', keys[1], 'MAXLEN', '~', args[1], '*', 'm', args[i])
  end
  return #args - 1
end

-- A pending entry is what brings a dead consumer's work back, so a consumer touches or
-- acknowledges it only while its delivery still owns it: once another consumer has claimed it
-- (a duplicate delivery, after this one looked idle), that delivery decides. "Check the owner,
-- then act" must be one step.
local function owns(keys, args)
  local entry = redis.call('XPENDING', keys[1], args[1], args[2], args[2], 1)[1]
  return entry and entry[2] == args[3]
end

-- lr_touch_if_mine: reset a pending entry's idle time if this consumer still owns it (a JUSTID
-- claim counts no delivery).
-- KEYS: 1 stream. ARGV: 1 group, 2 entry id, 3 consumer. Returns 1 when touched, else 0.
local function lr_touch_if_mine(keys, args)
  if owns(keys, args) then
    return #redis.call('XCLAIM', keys[1], args[1], args[3], 0, args[2], 'JUSTID')
  end
  return 0
end

-- lr_ack_if_mine: acknowledge a pending entry if this consumer still owns it.
-- KEYS: 1 stream. ARGV: 1 group, 2 entry id, 3 consumer. Returns 1 when acknowledged, else 0.
local function lr_ack_if_mine(keys, args)
  if owns(keys, args) then
    return redis.call('XACK', keys[1], args[1], args[2])
  end
  return 0
end

redis.register_function('lr_lease_acquire', lr_lease_acquire)
redis.register_function('lr_lease_renew', lr_lease_renew)
redis.register_function('lr_lease_release', lr_lease_release)
redis.register_function('lr_tick_release', lr_tick_release)
redis.register_function('lr_tick_publish', lr_tick_publish)
redis.register_function('lr_timer_schedule', lr_timer_schedule)
redis.register_function('lr_timers_due', lr_timers_due)
redis.register_function{function_name = 'lr_load', callback = lr_load, flags = {'no-writes'}}
redis.register_function{function_name = 'lr_snapshot', callback = lr_snapshot,
                        flags = {'no-writes'}}
redis.register_function{function_name = 'lr_items_head', callback = lr_items_head,
                        flags = {'no-writes'}}
redis.register_function('lr_commit', lr_commit)
redis.register_function('lr_xadd_all', lr_xadd_all)
redis.register_function('lr_touch_if_mine', lr_touch_if_mine)
redis.register_function('lr_ack_if_mine', lr_ack_if_mine)
redis.register_function{function_name = 'lr_version', callback = lr_version,
                        flags = {'no-writes'}}
