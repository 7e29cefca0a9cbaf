// Package agentadmission is the agent side of the platform admission hook
// (the Forge agent runtime contract that tollgated serves as "the platform").
//
// An agent service asks the platform, before it accepts new work, whether the
// agent may still spend:
//
//	GET {FORGE_ADMISSION_URL}/v1/admission?agent_id=<agent id>
//	Authorization: Bearer <FORGE_PLATFORM_TOKEN>
//	Org-Id: <FORGE_ORG_ID>              (omitted when empty)
//	Workspace-Id: <FORGE_WORKSPACE_ID>  (omitted when empty)
//
// Only an HTTP 200 whose JSON body has "decision" exactly "admit" or "deny"
// is a decision. A deny must carry all five fields: decision, reason, scope
// ("agent", "workspace" or "org"), window and reset_at (an RFC 3339 string or
// null). An admit needs only decision, but any reset_at it carries must still
// be RFC 3339 or null.
//
// A deny answers the inbound request with 402 Payment Required,
// Content-Type application/json, a Retry-After of whole seconds until
// reset_at (rounded up, 0 when reset_at is past, absent when it is null) and
// the body
//
//	{"error":"admission_denied","reason":…,"scope":…,"window":…,"reset_at":…}
//
// The wrapped handler is not called. Every deny, fresh or cached, is recorded
// as a task_admission_denied audit event through an AuditSink.
//
// Everything else fails open: a network error, the 2 s call timeout, any
// status but 200, a body that does not parse, a missing field, an unknown
// decision, a bad reset_at. The request is admitted and exactly one warn line
// is logged per failed call:
//
//	{"level":"warn","agent_id":"my-agent","error":"…","cached_until":"…","message":"admission: call failed, admitting"}
//
// Operators alert on that message. There is deliberately no fail-closed mode:
// hard enforcement during a platform outage belongs to another layer.
//
// Each agent's answer (admit, deny or fallback admit) is cached for 5 s, so a
// platform sees at most one call per agent per 5 s whatever the inbound rate,
// and at most one call per agent is in flight: requests that find the cache
// expired while a call is running wait for that call's answer instead of
// making their own. The cache holds a bounded number of agents.
//
// The hook is engaged only when both the admission URL and the platform token
// are set. With neither set it is a silent pass-through; with only one set it
// logs one warn line when the Checker is built and is a pass-through, so the
// misconfiguration is visible without breaking traffic.
//
// # Placement
//
// Put the middleware after authentication and before the dispatcher:
//
//	rate limit → auth → admission → dispatcher
//
// Auth first, so unauthenticated traffic never costs a platform call;
// admission before the dispatcher, so a denied request never reaches the
// executor, the model or the tools. Exempt liveness and readiness paths
// (WithExemptPaths) or a denied agent will fail its probes and be restarted
// for being over budget.
//
// # Tracing
//
// Every gated request opens an admission.check span (status Error on deny).
// A platform call nests under it as a client span named "GET /v1/admission".
// Requests served from the cache, and requests that waited for another
// request's call, have no child span.
package agentadmission
