-- wrk script for bench/capacity.py: each wrk thread holds one connection and writes
-- the super-steps of its own LangGraph thread, one putGraphCheckpoint a request,
-- each a new checkpoint carrying the writes of the node that led to it, as
-- RunstateSaver sends a chain's super-step. BENCH_BODY is a body the saver sent,
-- with @TASK@, @CP@, @PARENT@ and @NODE@ where its thread, checkpoint, parent and
-- LangGraph task ids go; BENCH_TASKS the threads (comma separated, one per wrk
-- thread), BENCH_TOKEN the token. done() prints one line of JSON: latency
-- percentiles in microseconds, the requests wrk counted and those it counted as
-- stored (an answer naming the Task).

local threads = {}
local count = 0

function setup(thread)
  count = count + 1
  thread:set("number", count)
  table.insert(threads, thread)
end

function init(args)
  local ids = {}
  for id in string.gmatch(os.getenv("BENCH_TASKS"), "[^,]+") do
    table.insert(ids, id)
  end
  task = ids[number]
  body = os.getenv("BENCH_BODY")
  step = 0
  parent = "none"
  stored = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["X-Runstate-Upload"] = "graph"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
end

function request()
  step = step + 1
  local checkpoint = string.format("1f0-%04d-%08d", number, step)
  local sent = body:gsub("@TASK@", task):gsub("@CP@", checkpoint)
  sent = sent:gsub("@PARENT@", parent):gsub("@NODE@", checkpoint .. "-node")
  parent = checkpoint
  return wrk.format(nil, "/graphql", nil, sent)
end

function response(status, headers, body)
  if status == 200 and string.find(body, '"Task"', 1, true) then
    stored = stored + 1
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("stored")
  end
  io.write(string.format(
    '{"p50": %d, "p99": %d, "requests": %d, "stored": %d, "non2xx": %d}\n',
    latency:percentile(50), latency:percentile(99), summary.requests, total,
    summary.errors.status))
end
