-- POST /api/v1/estimates with the load test's request (benchmarks/load_test.py REQUEST); counts statuses
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model": "llama-3.1-70b", "training": {"method": "lora", "seq_len": 4096, "activation_checkpointing": "full"}, "hardware": {"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"}}'

local counts = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local merged = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, n in pairs(s) do merged[code] = (merged[code] or 0) + n end
  end
  local parts = {}
  for code, n in pairs(merged) do table.insert(parts, string.format('"%d": %d', code, n)) end
  io.write(string.format('WRK_JSON {"requests": %d, "duration_s": %.3f, "p50_ms": %.2f, "p90_ms": %.2f, "p99_ms": %.2f, "max_ms": %.2f, "connect_errors": %d, "read_errors": %d, "write_errors": %d, "timeouts": %d, "non_2xx_3xx": %d, "statuses": {%s}}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout, summary.errors.status, table.concat(parts, ", ")))
end
