-- A relay batch as one script: every entry appended in batch order, or none.
-- The atomic group of the Redis Streams sink (sink.rs, send_group).
--
-- KEYS[i]: entry i's stream. ARGV[1]: the MAXLEN for `XADD … MAXLEN ~`, or ''
-- for none. Then, for each entry, its number of fields and the fields' names
-- and values.
--
-- A key holding another type is the one error XADD can meet here, so every
-- stream's type is checked before anything is written: an error reply means
-- nothing was appended, and the relay sends the batch again entry by entry to
-- find out which entries to refuse. Redis runs a script with no other command
-- in between, so a key's entries land together and in order.
local checked = {}
for i = 1, #KEYS do
    local stream = KEYS[i]
    if not checked[stream] then
        checked[stream] = true
        local kind = redis.call('TYPE', stream)['ok']
        if kind ~= 'stream' and kind ~= 'none' then
            return redis.error_reply('WRONGTYPE key ' .. stream .. ' holds a ' .. kind .. ', not a stream')
        end
    end
end
local maxlen = ARGV[1]
local at = 2
for i = 1, #KEYS do
    local fields = tonumber(ARGV[at])
    local xadd = {'XADD', KEYS[i]}
    if maxlen ~= '' then
        xadd[3], xadd[4], xadd[5] = 'MAXLEN', '~', maxlen
    end
    xadd[#xadd + 1] = '*'
    for j = at + 1, at + 2 * fields do
        xadd[#xadd + 1] = ARGV[j]
    end
    at = at + 1 + 2 * fields
    redis.call(unpack(xadd))
end
return #KEYS
