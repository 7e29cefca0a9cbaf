package agentadmission

import "os"

// The environment variables of the contract. They are the only
// configuration the contract has: no timeout, TTL or fail-mode knobs.
const (
	EnvURL         = "FORGE_ADMISSION_URL"
	EnvToken       = "FORGE_PLATFORM_TOKEN"
	EnvOrgID       = "FORGE_ORG_ID"
	EnvWorkspaceID = "FORGE_WORKSPACE_ID"
)

// Config is what the contract lets an operator set.
type Config struct {
	// URL is the platform base URL; /v1/admission is appended to it.
	URL string
	// Token is sent as "Authorization: Bearer <Token>".
	Token string
	// OrgID and WorkspaceID are sent as the Org-Id and Workspace-Id
	// headers, and each header is left out when its value is empty, so the
	// platform can tell "no tenancy" from "malformed tenancy".
	OrgID       string
	WorkspaceID string
	// AgentID is the agent asked about when the request-level subject
	// function (WithHTTPSubject, WithFastHTTPSubject) names none.
	AgentID string
}

// ConfigFromEnv reads the FORGE_* variables. AgentID is left for the caller:
// it is the agent's own identity, not part of the admission contract.
func ConfigFromEnv() Config {
	return Config{
		URL:         os.Getenv(EnvURL),
		Token:       os.Getenv(EnvToken),
		OrgID:       os.Getenv(EnvOrgID),
		WorkspaceID: os.Getenv(EnvWorkspaceID),
	}
}

// FromEnv builds a Checker for agentID from the FORGE_* variables.
func FromEnv(agentID string, opts ...Option) *Checker {
	cfg := ConfigFromEnv()
	cfg.AgentID = agentID
	return New(cfg, opts...)
}

// engaged reports whether the hook is on. It takes both settings: a URL
// without a token would only collect 401s, and a token without a URL has
// nowhere to go.
func (c Config) engaged() bool {
	return c.URL != "" && c.Token != ""
}

// halfSet reports the misconfiguration worth a warning: exactly one of the
// two settings given.
func (c Config) halfSet() bool {
	return (c.URL == "") != (c.Token == "")
}
