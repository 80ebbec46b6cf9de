-- wrk script of the benchmark: closed-loop POSTs of one JSON body.
-- The harness passes the body and the client key in BENCH_BODY and BENCH_KEY and
-- reads the one "BENCH {...}" JSON line that done() prints (latencies in microseconds).
-- No response() callback: it would make wrk hand every body to Lua and slow it down;
-- wrk already counts answers with status >= 400 in summary.errors.status.

wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("BENCH_KEY") or "")

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "errors": %d, "status_errors": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration,
    errors.connect + errors.read + errors.write + errors.status + errors.timeout,
    errors.status, latency:percentile(50.0), latency:percentile(99.0), latency.mean))
end
