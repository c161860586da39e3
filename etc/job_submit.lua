--[[
slurm-ext submit hook: rewrite a job's CPU (and, for elastic jobs, GPU) request from the
predictor's decision table. Loaded by slurmctld with JobSubmitPlugins=lua (Lua 5.1 in
Debian's Slurm; also runs under 5.3 for tests).

Fails open: a missing or malformed table, an unknown workload, a bad hint or any Lua
error leaves the job exactly as submitted, with one line in slurmctld's log. The only I/O
is one read of the (<= 1 MiB) table file per submission; the parsed table is cached and
re-parsed only when the file's content changes (Lua 5.1 has no stat() without lfs, and
comparing the bytes read is as cheap as the read itself). Table contents are only ever
matched with string patterns and tonumber(): nothing from the table or the job becomes
Lua code.

The same rules live in Python (slurm_ext/core/hints.py, slurm_ext/predict/table.py and
rewrite.py: `slurm-ext predict apply --dry-run`); tests check both agree.
See docs/predictor.md.
]]

-- settings: the installer (slurm_ext.predict.hook.render_hook) rewrites these four lines
local TABLE_PATH = "/var/lib/slurm-ext/predictor.tsv"
local RESPECT_EXPLICIT_CPUS = true
local MAX_CPUS_PER_GPU = 0
local GPUS_PER_NODE = 0

local HEADER = "# slurm-ext predictor table v1"
local MAX_BYTES = 1048576
local ANY_GPU = "*"
local BIG = 4294967294 -- NO_VAL; INFINITE is one more: both mean "no limit"
local KEY_PAT = "^[A-Za-z0-9%._:/@%+%-]+$"

local M = {}

local function valid_key(s)
  return type(s) == "string" and #s >= 1 and #s <= 128 and string.find(s, KEY_PAT) ~= nil
end

local function valid_gpu_type(s)
  return valid_key(s) and #s <= 64 and string.find(s, "/", 1, true) == nil
end

local function small_int(s, lo, hi)
  if type(s) ~= "string" or string.find(s, "^[0-9][0-9]?[0-9]?[0-9]?$") == nil then return nil end
  local n = tonumber(s)
  if n < lo or n > hi then return nil end
  return n
end

-- hints: the twin of slurm_ext/core/hints.py parse_hints
function M.parse_hints(comment)
  local values = {}
  if type(comment) == "string" then
    for token in string.gmatch(comment, "[^ \t\n\v\f\r]+") do
      local k, v = string.match(token, "^([^=]*)=(.*)$")
      if k == "model" or k == "elastic" or k == "opportunistic" or k == "opt_out" or k == "slurm_ext" then
        values[k] = v
      end
    end
  end
  local h = { opt_out = {} }
  if valid_key(values.model) then h.model = values.model end
  if values.elastic then
    local a, b = string.match(values.elastic, "^([0-9]+)%-([0-9]+)$")
    local lo, hi = small_int(a, 1, 1024), small_int(b, 1, 1024)
    if lo and hi and lo <= hi then h.elastic_min, h.elastic_max = lo, hi end
  end
  h.opportunistic = values.opportunistic == "1"
  if values.opt_out then
    for item in string.gmatch(values.opt_out, "[^,]+") do
      if item == "cpu" or item == "gpu" then h.opt_out[item] = true end
    end
  end
  h.all_off = values.slurm_ext == "off"
  return h
end

local function split_lines(data)
  local lines = {}
  for line in string.gmatch(data, "([^\n]*)\n") do lines[#lines + 1] = line end
  return lines
end

-- table: the twin of slurm_ext/predict/table.py parse_table; returns rows or nil, problem
function M.parse_table(data)
  if type(data) ~= "string" then return nil, "no data" end
  if #data > MAX_BYTES then return nil, "over " .. MAX_BYTES .. " bytes" end
  if string.sub(data, -1) ~= "\n" then return nil, "no trailing newline (truncated?)" end
  local lines = split_lines(data)
  if lines[1] ~= HEADER then return nil, "first line is not the v1 header" end
  local body = {}
  for i = 2, #lines - 1 do
    local line = lines[i]
    if line ~= "" and string.sub(line, 1, 1) ~= "#" then body[#body + 1] = line end
  end
  local n = #lines > 1 and string.match(lines[#lines], "^# end ([0-9][0-9]?[0-9]?[0-9]?[0-9]?[0-9]?[0-9]?)$")
  if not n or tonumber(n) ~= #body then return nil, "bad '# end N' trailer (truncated?)" end
  local rows, bad = {}, 0
  for _, line in ipairs(body) do
    local f = {}
    for field in string.gmatch(line .. "\t", "([^\t]*)\t") do f[#f + 1] = field end
    local key, gtype = f[1], f[2]
    local cpus, gpus = small_int(f[3], 1, 1024), small_int(f[4], 0, 1024)
    if #f == 4 and valid_key(key) and (gtype == ANY_GPU or valid_gpu_type(gtype)) and cpus and gpus then
      local id = key .. "\t" .. gtype
      if rows[id] == nil then rows[id] = { key = key, gpu_type = gtype, cpus_per_gpu = cpus, gpus = gpus } end
    else
      bad = bad + 1
    end
  end
  return rows, bad
end

function M.lookup(rows, key, gtype)
  if gtype and rows[key .. "\t" .. gtype] then return rows[key .. "\t" .. gtype] end
  return rows[key .. "\t" .. ANY_GPU]
end

--[[ a GPU request among comma-separated entries, in every spelling Slurm hands the hook:
"gres:gpu[:type]:N" (22.05), "gres/gpu[:type]:N" and "gres/gpu[:type]=N" (23.02 and later).
nil if none, false if not understood. `head` is the entry up to its count (rewritten with
another count in the same spelling), `prefix` ("gres:" or "gres/") how this Slurm spells
cpus_per_tres: 25.11 rejects "gres:gpu:N" there. ]]
function M.parse_gpu(tres)
  if type(tres) ~= "string" or tres == "" then return nil end
  local entries, at = {}, nil
  for e in string.gmatch(tres .. ",", "([^,]*),") do
    entries[#entries + 1] = e
    local name, sep = string.sub(e, 1, 8), string.sub(e, 9, 9)
    if (name == "gres:gpu" or name == "gres/gpu") and (sep == "" or sep == ":" or sep == "=") then
      if at then return false end
      at = #entries
    end
  end
  if not at then return nil end
  local entry = entries[at]
  local rest, gtype, count = string.sub(entry, 10), nil, nil
  if string.sub(entry, 9, 9) == ":" then
    local t, _, c = string.match(rest, "^([^:=]+)([:=])([^:=]+)$")
    gtype, count = t, c
  end
  if not gtype then count = rest end
  local n = small_int(count, 0, 1024)
  if gtype and not valid_gpu_type(gtype) then return false end
  if n == nil then return false end
  if n == 0 then return nil end
  return { entries = entries, at = at, gpu_type = gtype, count = n,
           head = string.sub(entry, 1, #entry - #count), prefix = string.sub(entry, 1, 5) }
end

local function with_count(req, n)
  local e = {}
  for i, v in ipairs(req.entries) do e[i] = v end
  e[req.at] = req.head .. n
  return table.concat(e, ",")
end

local function unlimited(n)
  return n == nil or n == 0 or n >= BIG
end

--[[ plan: the twin of slurm_ext/predict/rewrite.py plan_rewrite.
job: comment, name, user_name, tres_per_node, tres_per_job, tres_per_task, num_tasks,
cpus_per_tres, cpus_per_task (nil: unset), shared (0: --exclusive), max_cpus_per_node (the most CPUs one node gives
the job: the partition's MaxCPUsPerNode and CPUs per node; nil: no limit).
conf: respect_explicit_cpus, max_cpus_per_gpu, gpus_per_node (0: unknown).
Caps keep every job Slurm would accept acceptable: GPUs on one node never above
gpus_per_node, CPUs per GPU never above what one node has for the GPUs the job may put on it.
Returns changes (field -> value, possibly empty), note (text or ""), reason. ]]
function M.plan(job, rows, conf)
  local h = M.parse_hints(job.comment)
  if h.all_off then return {}, "", "opted out (slurm_ext=off)" end
  local field, req = "tres_per_node", M.parse_gpu(job.tres_per_node)
  if req == nil then field, req = "tres_per_job", M.parse_gpu(job.tres_per_job) end
  if req == nil then field, req = "tres_per_task", M.parse_gpu(job.tres_per_task) end
  if req == nil then return {}, "", "no GPUs requested" end
  if req == false then return {}, "", "GPU request not understood" end
  local key = h.model
  if not key then
    key = tostring(job.user_name or "") .. "/" .. tostring(job.name or "")
    if not valid_key(key) then return {}, "", "no valid workload key" end
  end
  local row = M.lookup(rows, key, req.gpu_type)
  if not row then return {}, "", "unknown workload key " .. key end
  local changes, parts, gpus = {}, {}, req.count
  local node_gpus = conf.gpus_per_node or 0
  local hi = h.elastic_max
  if hi and node_gpus > 0 and node_gpus < hi then hi = node_gpus end
  if h.elastic_min and hi >= h.elastic_min and row.gpus > 0 and field == "tres_per_node" and not h.opt_out.gpu then
    local g = math.max(h.elastic_min, math.min(hi, row.gpus))
    if g ~= req.count then
      changes.tres_per_node = with_count(req, g)
      parts[#parts + 1] = "tres_per_node " .. job.tres_per_node .. " -> " .. changes.tres_per_node
      gpus = g
    end
  end
  local explicit = (job.cpus_per_task ~= nil and job.cpus_per_task ~= 65534) or (conf.respect_explicit_cpus and job.cpus_per_tres ~= nil)
  local whole_nodes = job.shared == 0 -- --exclusive: every core of its nodes is the job's
  if not h.opt_out.cpu and not explicit and not whole_nodes then
    local n = row.cpus_per_gpu
    if conf.max_cpus_per_gpu > 0 and n > conf.max_cpus_per_gpu then n = conf.max_cpus_per_gpu end
    if not unlimited(job.max_cpus_per_node) then
      local on_node = gpus -- the most GPUs the job may put on one node
      if field == "tres_per_task" then on_node = gpus * (unlimited(job.num_tasks) and 1 or job.num_tasks) end
      if node_gpus > 0 and on_node > node_gpus then on_node = node_gpus end
      n = math.min(n, math.max(1, math.floor(job.max_cpus_per_node / on_node)))
    end
    local value = req.prefix .. "gpu:" .. n
    if value ~= job.cpus_per_tres then
      changes.cpus_per_tres = value
      local text = "cpus_per_tres " .. (job.cpus_per_tres or "unset") .. " -> " .. value
      if n ~= row.cpus_per_gpu then text = text .. " (capped from " .. row.cpus_per_gpu .. ")" end
      parts[#parts + 1] = text
    end
  end
  if #parts == 0 then return {}, "", "nothing to change for " .. key end
  local note = "slurm-ext: " .. table.concat(parts, "; ") .. " [key=" .. key .. " gpu_type=" .. row.gpu_type .. "]"
  return changes, note, "rewritten"
end

-- the table, re-parsed only when the bytes read differ from last time
local cache_data, cache_rows, cache_problem = nil, nil, nil

function M.load_rows(path)
  local f = io.open(path, "rb")
  if not f then return nil, "cannot open " .. path end
  local data = f:read(MAX_BYTES + 1)
  f:close()
  if data == nil then data = "" end
  if data ~= cache_data then
    cache_data = data
    cache_rows, cache_problem = M.parse_table(data)
  end
  if not cache_rows then return nil, cache_problem end
  return cache_rows
end

local function partition_limit(job_desc, part_list)
  local names, limit = {}, nil
  if type(job_desc.partition) == "string" and job_desc.partition ~= "" then
    for p in string.gmatch(job_desc.partition, "[^,]+") do names[#names + 1] = p end
  else
    for name, p in pairs(part_list) do
      if p.flag_default == 1 then names[#names + 1] = name end
    end
  end
  for _, name in ipairs(names) do
    local p = part_list[name]
    local m = p and tonumber(p.max_cpus_per_node)
    if m and not unlimited(m) and (limit == nil or m < limit) then limit = m end
    local cpus, nodes = p and tonumber(p.total_cpus), p and tonumber(p.total_nodes)
    if cpus and nodes and nodes > 0 and cpus >= nodes then
      local per_node = math.floor(cpus / nodes) -- the partition's CPUs per node (homogeneous)
      if limit == nil or per_node < limit then limit = per_node end
    end
  end
  return limit
end

local function submit(job_desc, part_list)
  local rows, problem = M.load_rows(TABLE_PATH)
  if not rows then return "unchanged: predictor table ignored: " .. problem end
  local cpt = job_desc.cpus_per_task
  local job = {
    comment = job_desc.comment, name = job_desc.name, user_name = job_desc.user_name,
    tres_per_node = job_desc.tres_per_node, tres_per_job = job_desc.tres_per_job,
    tres_per_task = job_desc.tres_per_task, num_tasks = tonumber(job_desc.num_tasks),
    cpus_per_tres = job_desc.cpus_per_tres,
    cpus_per_task = (cpt ~= nil and cpt ~= slurm.NO_VAL16) and cpt or nil,
    max_cpus_per_node = partition_limit(job_desc, part_list),
    shared = tonumber(job_desc.shared),
  }
  local conf = { respect_explicit_cpus = RESPECT_EXPLICIT_CPUS, max_cpus_per_gpu = MAX_CPUS_PER_GPU,
                 gpus_per_node = GPUS_PER_NODE }
  local changes, note, reason = M.plan(job, rows, conf)
  if note == "" then return "unchanged: " .. reason end
  if changes.tres_per_node then job_desc.tres_per_node = changes.tres_per_node end
  if changes.cpus_per_tres then job_desc.cpus_per_tres = changes.cpus_per_tres end
  local old = job_desc.admin_comment
  if type(old) == "string" and old ~= "" then
    job_desc.admin_comment = old .. " | " .. note
  else
    job_desc.admin_comment = note
  end
  slurm.log_user("%s", note)
  return note
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, msg = pcall(submit, job_desc, part_list)
  if not ok then msg = "unchanged: hook error: " .. tostring(msg) end
  local uid = tonumber(submit_uid) -- a float under Lua 5.3: print it as an integer
  slurm.log_info("slurm-ext hook uid=%s: %s", uid and string.format("%.0f", uid) or tostring(submit_uid), msg)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

slurm_ext_hook = M -- for tests outside slurmctld (tests/test_hook_lua.py)
return slurm.SUCCESS
