//! The Lua scripts of the approvals' Redis store ([`super::redis_store`]):
//! one per atomic change, each given the fixed keys and the key prefix.

/// The keys every script is given (KEYS[1..8]), after the prefix.
pub(super) const FIXED: [&str; 8] = [
    "pending",
    "principals",
    "expiries",
    "all",
    "history",
    "grant_seq",
    "events",
    "event_id",
];

/// Shared by every script: ARGV[1] is the key prefix; the fixed keys.
pub(super) const PRELUDE: &str = r"
local P = ARGV[1]
local PENDING, PRINCIPALS, EXPIRIES, ALL = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local HISTORY, SEQ, EVENTS, EVENT_ID = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local function akey(id) return P .. 'approval:' .. id end
local function gkey(k) return P .. 'grants:' .. k end
local function emit(ev, max)
  local id = redis.call('INCR', EVENT_ID)
  redis.call('ZADD', EVENTS, id, id .. ' ' .. ev)
  redis.call('ZREMRANGEBYRANK', EVENTS, 0, -(tonumber(max) + 1))
end
local function close_grant(a, state, ttl, ev, max)
  redis.call('HDEL', a, 'g', 'gj', 'ge')
  redis.call('HSET', a, 's', state)
  redis.call('HINCRBY', a, 'v', 1)
  redis.call('PEXPIRE', a, ttl)
  emit(ev, max)
end
local function unpend(id, call, principal, max_history)
  redis.call('ZREM', EXPIRIES, id)
  if redis.call('HGET', PENDING, call) == id then redis.call('HDEL', PENDING, call) end
  if redis.call('HINCRBY', PRINCIPALS, principal, -1) <= 0 then redis.call('HDEL', PRINCIPALS, principal) end
  redis.call('RPUSH', HISTORY, id)
  while redis.call('LLEN', HISTORY) > tonumber(max_history) do
    local old = redis.call('LPOP', HISTORY)
    if redis.call('HEXISTS', akey(old), 'g') == 0 then
      redis.call('DEL', akey(old))
      redis.call('ZREM', ALL, old)
    end
  end
end
local function pending() return tostring(redis.call('ZCARD', EXPIRIES)) end
";

/// ARGV: prefix, now, batch. Returns {pending, then per due request: id,
/// j, s, v, n}.
pub(super) const DUE_LUA: &str = r"
local out = {pending()}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', EXPIRIES, '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))) do
  local r = redis.call('HMGET', akey(id), 'j', 's', 'v', 'n')
  table.insert(out, id)
  for i = 1, 4 do table.insert(out, r[i]) end
end
return out
";

/// ARGV: prefix, id, version read, call key, principal hash, event, TTL
/// after (ms), max history, max events. Expires a pending request unless
/// another agent did or it changed. Returns {1, pending}, {0} (already
/// done: nothing to do) or {-1} (changed: read again).
pub(super) const EXPIRE_LUA: &str = r"
local id = ARGV[2]
local a = akey(id)
if not redis.call('ZSCORE', EXPIRIES, id) then return {0} end
if redis.call('EXISTS', a) == 0 then
  redis.call('ZREM', EXPIRIES, id)
  if redis.call('HGET', PENDING, ARGV[4]) == id then redis.call('HDEL', PENDING, ARGV[4]) end
  return {0}
end
if redis.call('HGET', a, 'v') ~= ARGV[3] or redis.call('HGET', a, 's') ~= 'pending' then return {-1} end
unpend(id, ARGV[4], ARGV[5], ARGV[8])
redis.call('HSET', a, 's', 'expired')
redis.call('HINCRBY', a, 'v', 1)
redis.call('PEXPIRE', a, ARGV[7])
emit(ARGV[6], ARGV[9])
return {1, tonumber(pending())}
";

/// ARGV: prefix, now, then the call, session and tool keys that apply.
/// Drops the grants past their time; returns {grant_seq, {{key index, id,
/// grant, j, s, v, n}, ...}} in the order a call tries them.
pub(super) const LOAD_LUA: &str = r"
local now = tonumber(ARGV[2])
local out = {}
for k = 3, #ARGV do
  local g = gkey(ARGV[k])
  for _, id in ipairs(redis.call('ZRANGE', g, 0, -1)) do
    local r = redis.call('HMGET', akey(id), 'gj', 'ge', 'g', 'j', 's', 'v', 'n')
    if not r[1] or r[3] ~= ARGV[k] or tonumber(r[2]) <= now then
      redis.call('ZREM', g, id)
    else
      table.insert(out, {tostring(k - 2), id, r[1], r[4], r[5], r[6], r[7]})
    end
  end
end
return {redis.call('GET', SEQ) or '0', out}
";

/// ARGV: prefix, id, version read, grant_seq read, grant key, event, TTL
/// after (ms), max events. Takes an `allow_once` grant: 1, or -1 when it
/// is gone (another call took it) or the grants changed (read again).
pub(super) const CONSUME_LUA: &str = r"
local id = ARGV[2]
local a = akey(id)
if (redis.call('GET', SEQ) or '0') ~= ARGV[4] then return -1 end
if redis.call('HGET', a, 'v') ~= ARGV[3] or redis.call('HGET', a, 'g') ~= ARGV[5] then return -1 end
if redis.call('ZREM', gkey(ARGV[5]), id) == 0 then return -1 end
close_grant(a, 'consumed', ARGV[7], ARGV[6], ARGV[8])
return 1
";

/// ARGV: prefix, now, grant_seq read, call key, principal hash, limit per
/// principal, limit in all, new id, its JSON, its expiry, its creation,
/// its event, max events. The call's pending request, asked again; else a
/// new one within the limits. Returns {'again', id, expiry, pending},
/// {'created', id, expiry, pending}, {'limited', scope} or {'retry'}
/// (grants changed, or the pending request is due: read again).
pub(super) const ASK_LUA: &str = r"
local now = tonumber(ARGV[2])
if (redis.call('GET', SEQ) or '0') ~= ARGV[3] then return {'retry'} end
local old = redis.call('HGET', PENDING, ARGV[4])
if old then
  local exp = redis.call('ZSCORE', EXPIRIES, old)
  if exp and redis.call('EXISTS', akey(old)) == 1 then
    if tonumber(exp) <= now then return {'retry'} end
    redis.call('HINCRBY', akey(old), 'n', 1)
    redis.call('HINCRBY', akey(old), 'v', 1)
    return {'again', old, exp, pending()}
  end
  redis.call('HDEL', PENDING, ARGV[4])
end
if tonumber(redis.call('HGET', PRINCIPALS, ARGV[5]) or '0') >= tonumber(ARGV[6]) then return {'limited', 'principal'} end
if redis.call('ZCARD', EXPIRIES) >= tonumber(ARGV[7]) then return {'limited', 'total'} end
local id = ARGV[8]
local a = akey(id)
if redis.call('EXISTS', a) == 1 then return {'retry'} end
redis.call('HSET', a, 'j', ARGV[9], 's', 'pending', 'v', 1, 'n', 1)
redis.call('ZADD', EXPIRIES, ARGV[10], id)
redis.call('HSET', PENDING, ARGV[4], id)
redis.call('HINCRBY', PRINCIPALS, ARGV[5], 1)
for _, stale in ipairs(redis.call('ZRANGE', ALL, 0, 7)) do
  if redis.call('EXISTS', akey(stale)) == 0 then redis.call('ZREM', ALL, stale) end
end
redis.call('ZADD', ALL, ARGV[11], id)
emit(ARGV[12], ARGV[13])
return {'created', id, ARGV[10], pending()}
";

/// ARGV: prefix, id, version read, the grant's TTL (ms), call key,
/// principal hash, grant key, grant, grant expiry, new JSON, new state,
/// event, the request's TTL (ms), max history, max events. Decides a
/// pending request unchanged since read: {1, pending}, else {-1} (read
/// again).
pub(super) const DECIDE_LUA: &str = r"
local id = ARGV[2]
local a = akey(id)
if redis.call('HGET', a, 'v') ~= ARGV[3] or redis.call('HGET', a, 's') ~= 'pending' then return {-1} end
unpend(id, ARGV[5], ARGV[6], ARGV[14])
local seq = redis.call('INCR', SEQ)
local g = gkey(ARGV[7])
redis.call('ZADD', g, seq, id)
if redis.call('PTTL', g) < tonumber(ARGV[4]) then redis.call('PEXPIRE', g, ARGV[4]) end
redis.call('HSET', a, 'j', ARGV[10], 's', ARGV[11], 'g', ARGV[7], 'gj', ARGV[8], 'ge', ARGV[9])
redis.call('HINCRBY', a, 'v', 1)
redis.call('PEXPIRE', a, ARGV[13])
emit(ARGV[12], ARGV[15])
return {1, tonumber(pending())}
";

/// ARGV: prefix, id, version read, grant key, event, TTL after (ms), max
/// events. Revokes a standing grant unchanged since read: 1, else -1.
pub(super) const REVOKE_LUA: &str = r"
local id = ARGV[2]
local a = akey(id)
if redis.call('HGET', a, 'v') ~= ARGV[3] or redis.call('HGET', a, 'g') ~= ARGV[4] then return -1 end
redis.call('ZREM', gkey(ARGV[4]), id)
close_grant(a, 'revoked', ARGV[6], ARGV[5], ARGV[7])
return 1
";

/// ARGV: prefix. Returns {last event id, {{id, j, s, v, n}, ...}}; forgets
/// the ids of requests no longer kept.
pub(super) const LIST_LUA: &str = r"
local out = {}
for _, id in ipairs(redis.call('ZRANGE', ALL, 0, -1)) do
  local r = redis.call('HMGET', akey(id), 'j', 's', 'v', 'n')
  if r[1] then table.insert(out, {id, r[1], r[2], r[3], r[4]}) else redis.call('ZREM', ALL, id) end
end
return {redis.call('GET', EVENT_ID) or '0', out}
";

/// ARGV: prefix, after. Returns {oldest kept event id or nil, {events after}}.
pub(super) const EVENTS_LUA: &str = r"
local first = redis.call('ZRANGE', EVENTS, 0, 0, 'WITHSCORES')
return {first[2] or false, redis.call('ZRANGEBYSCORE', EVENTS, '(' .. ARGV[2], '+inf')}
";
