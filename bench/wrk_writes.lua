-- wrk script for bench/wrk.py: each wrk thread holds one connection and drives
-- its own task, startStep then completeStep on step 0, 1, 2, ..., each carrying
-- the version the previous answer gave. The task ids come in BENCH_TASKS (comma
-- separated, one per thread), the token in BENCH_TOKEN; BENCH_START and
-- BENCH_COMPLETE, when set, are the request bodies to send (string.format
-- templates of the task id, the step and the version: bench/wrk.py writes them
-- for the SDK's documents, by id or as text). done() prints one line of JSON:
-- latency percentiles in microseconds and the requests wrk counted.

local threads = 0

local START = '{"query":"mutation($input: StepRefInput!) { startStep(input: $input) '
  .. '{ ... on Task { version } } }","variables":{"input":{"taskId":"%s",'
  .. '"stepIndex":%d,"expectedVersion":%d}}}'
local COMPLETE = '{"query":"mutation($input: CompleteStepInput!) { completeStep(input: '
  .. '$input) { ... on Task { version } } }","variables":{"input":{"taskId":"%s",'
  .. '"stepIndex":%d,"expectedVersion":%d,"output":{"answer":"42","tokens":512}}}}'


function setup(thread)
  threads = threads + 1
  thread:set("number", threads)
end

function init(args)
  local ids = {}
  for id in string.gmatch(os.getenv("BENCH_TASKS"), "[^,]+") do
    table.insert(ids, id)
  end
  task = ids[number]
  version = 1
  step = 0
  starting = true
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
  start_body = os.getenv("BENCH_START") or START
  complete_body = os.getenv("BENCH_COMPLETE") or COMPLETE
end

function request()
  local body = string.format(starting and start_body or complete_body, task, step, version)
  return wrk.format(nil, "/graphql", nil, body)
end

function response(status, headers, body)
  local answered = string.match(body, '"version":%s*(%d+)')
  if answered then
    version = tonumber(answered)
    if not starting then
      step = step + 1
    end
    starting = not starting
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    '{"p50": %d, "p99": %d, "requests": %d, "non2xx": %d, "socket_errors": %d}\n',
    latency:percentile(50), latency:percentile(99), summary.requests,
    summary.errors.status, summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout))
end
