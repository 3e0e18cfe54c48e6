-- wrk script: POST the body in the file named by the first argument, with an
-- optional bearer key as the second, and print one JSON line of results.
--   wrk -s bench/wrk_post.lua URL -- body.json [key]
function init(args)
  local f = assert(io.open(args[1], "rb"))
  wrk.method = "POST"
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/json"
  if args[2] and args[2] ~= "" then
    wrk.headers["Authorization"] = "Bearer " .. args[2]
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
