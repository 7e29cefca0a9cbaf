-- bench/wrk.lua — the requests bench/http.sh and bench/peers.sh send with
-- wrk, and the one line each run reports.
--
-- Usage: wrk ... -s bench/wrk.lua URL -- KIND [ARG]
--   check KEY          POST /v1/check with tollgated's benchmark body,
--                      authorised by the API key KEY
--   admission TOKEN    GET /v1/admission?agent_id=demo (path from the URL),
--                      authorised by the platform token TOKEN
--   post BODY          POST BODY as JSON to the URL's path (the peers'
--                      rate-limit requests)
--   get                GET the URL (a bare server)
--
-- Every request of a run is the same, so wrk builds it once per thread
-- (no request() function: a Lua call per request would cost the load
-- generator, not the server, and cap what it can offer).
--
-- done() prints one line for the scripts to parse:
--   WRK requests=N duration_us=D rps=R p50_us=A p99_us=B errors=E non2xx=S
-- where errors counts connect, read, write and timeout errors and non2xx
-- answers with a status above 399 (wrk's own count).

local check_body = '{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}'

function init(args)
	local kind = args[1] or "get"
	if kind == "check" then
		wrk.method = "POST"
		wrk.body = check_body
		wrk.headers["Content-Type"] = "application/json"
		wrk.headers["Authorization"] = "Bearer " .. (args[2] or "")
	elseif kind == "admission" then
		wrk.method = "GET"
		wrk.headers["Authorization"] = "Bearer " .. (args[2] or "")
	elseif kind == "post" then
		wrk.method = "POST"
		wrk.body = args[2] or ""
		wrk.headers["Content-Type"] = "application/json"
	elseif kind == "get" then
		wrk.method = "GET"
	else
		error("wrk.lua: unknown kind " .. kind .. " (want check, admission, post or get)")
	end
end

function done(summary, latency, requests)
	local e = summary.errors
	local rps = 0
	if summary.duration > 0 then
		rps = summary.requests / (summary.duration / 1e6)
	end
	io.write(string.format("WRK requests=%d duration_us=%d rps=%.1f p50_us=%.1f p99_us=%.1f errors=%d non2xx=%d\n",
		summary.requests, summary.duration, rps, latency:percentile(50), latency:percentile(99),
		e.connect + e.read + e.write + e.timeout, e.status))
end
