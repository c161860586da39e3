"""Run etc/job_submit.lua's functions in a standalone Lua (5.1 as in slurmctld, or 5.3).

For tests and for admins who edit the hook: feeds cases to a small Lua driver over
stdin (every field hex-encoded, so no case text can become Lua code or break the
framing) and returns the hook's answers, to compare with the Python twin.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from slurm_ext.predict.hook import HOOK_SOURCE

DRIVER = r"""
slurm = { SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, NO_VAL16 = 65534, logged = {} }
function slurm.log_info(fmt, ...) slurm.logged[#slurm.logged + 1] = string.format(fmt, ...) end
function slurm.log_user(fmt, ...) slurm.logged[#slurm.logged + 1] = "user: " .. string.format(fmt, ...) end
dofile(arg[1])
local H = slurm_ext_hook
local function unhex(s)
  if s == "-" then return nil end
  return (string.gsub(s, "(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end
local function hex(s)
  if s == nil or s == false then return "-" end
  return (string.gsub(tostring(s), ".", function(c) return string.format("%02x", string.byte(c)) end))
end
for line in io.lines() do
  local f, n = {}, 0
  for field in string.gmatch(line .. "\t", "([^\t]*)\t") do n = n + 1; f[n] = unhex(field) end
  local mode, out = f[1], {}
  if mode == "hints" then
    local h = H.parse_hints(f[2])
    local opt = {}
    if h.opt_out.cpu then opt[#opt + 1] = "cpu" end
    if h.opt_out.gpu then opt[#opt + 1] = "gpu" end
    out = { h.model or "-", h.elastic_min and (h.elastic_min .. "-" .. h.elastic_max) or "-",
            h.opportunistic and "1" or "0", #opt > 0 and table.concat(opt, ",") or "-",
            h.all_off and "1" or "0" }
  elseif mode == "table" then
    local rows = H.parse_table(f[2])
    if not rows then out = { "INVALID" } else
      local list = {}
      for _, r in pairs(rows) do list[#list + 1] = r.key .. "|" .. r.gpu_type .. "|" .. r.cpus_per_gpu .. "|" .. r.gpus end
      table.sort(list)
      out = { table.concat(list, ";") }
    end
  elseif mode == "plan" then
    local rows = H.parse_table(f[2])
    if not rows then out = { false, false, "", "table ignored" } else
      local job = { comment = f[3], name = f[4], user_name = f[5], tres_per_node = f[6],
                    tres_per_job = f[7], cpus_per_tres = f[8], cpus_per_task = tonumber(f[9]),
                    max_cpus_per_node = tonumber(f[10]), tres_per_task = f[14],
                    num_tasks = tonumber(f[15]), shared = tonumber(f[16]) }
      local changes, note, reason = H.plan(job, rows, { respect_explicit_cpus = f[11] == "1",
                                                         max_cpus_per_gpu = tonumber(f[12]),
                                                         gpus_per_node = tonumber(f[13]) or 0 })
      out = { changes.tres_per_node or false, changes.cpus_per_tres or false, note, reason }
    end
  elseif mode == "submit_uid" then
    -- slurmctld pushes the uid as a Lua number: a float under 5.3 (1000.0)
    slurm.logged = {}
    slurm_job_submit({}, {}, tonumber(f[2]) + 0.0)
    out = { slurm.logged[#slurm.logged] or "" }
  elseif mode == "submit_error" then
    -- a job_desc whose every field read raises: the hook must accept it and log one line
    local job_desc = setmetatable({}, { __index = function() error("boom") end })
    slurm.logged = {}
    local rc = slurm_job_submit(job_desc, {}, 0)
    out = { tostring(rc), tostring(#slurm.logged), slurm.logged[1] or "" }
  end
  local enc = {}
  for i, v in ipairs(out) do enc[i] = hex(v) end
  io.write(table.concat(enc, "\t"), "\n")
end
"""


def lua_interpreters() -> list[str]:
    """The Lua interpreters installed here, 5.1 (slurmctld's) first."""
    return [name for name in ("lua5.1", "lua5.3") if shutil.which(name)]


def _hex(value: object) -> str:
    return "-" if value is None else str(value).encode("utf-8", "surrogateescape").hex()


def run_driver(
    lua: str,
    cases: Sequence[Sequence[object]],
    hook_source: str | None = None,
    tmp_dir: Path | None = None,
) -> list[list[str | None]]:
    """One answer (list of fields; None for nil) per case; each case is (mode, *fields)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_dir) as d:
        driver = Path(d) / "driver.lua"
        driver.write_text(DRIVER)
        hook = Path(d) / "job_submit.lua"
        hook.write_text(hook_source if hook_source is not None else HOOK_SOURCE.read_text())
        stdin = "".join("\t".join(_hex(f) for f in case) + "\n" for case in cases)
        res = subprocess.run(
            [lua, str(driver), str(hook)], input=stdin.encode(), capture_output=True, timeout=60
        )
    if res.returncode != 0:
        raise RuntimeError(f"{lua} driver failed: {res.stderr.decode(errors='replace')}")
    answers = []
    for line in res.stdout.decode().splitlines():
        answers.append(
            [
                None if f == "-" else bytes.fromhex(f).decode("utf-8", "surrogateescape")
                for f in line.split("\t")
            ]
        )
    if len(answers) != len(cases):
        raise RuntimeError(f"{lua} driver answered {len(answers)} of {len(cases)} cases")
    return answers
