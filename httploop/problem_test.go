//go:build linux

package httploop

import (
	"encoding/json"
	"testing"
)

func TestProblemBodies(t *testing.T) {
	for code, p := range map[string]*problem{
		"malformed-request": problemMalformed,
		"request-timeout":   problemTimeout,
		"length-required":   problemLengthRequired,
		"body-too-large":    problemBodyTooLarge,
		"header-too-large":  problemHeaderTooLarge,
		"answer-timeout":    problemDeferTimeout,
	} {
		var got struct {
			Type, Title, Code string
			Status            int
		}
		if err := json.Unmarshal(p.body, &got); err != nil {
			t.Fatalf("%s: %v", p.body, err)
		}
		if got.Type != "about:blank" || got.Code != code || got.Status != p.status || got.Title == "" {
			t.Fatalf("%s: %+v", p.body, got)
		}
	}
	if string(problemMalformed.body) != `{"type":"about:blank","title":"Bad Request","status":400,"code":"malformed-request"}` {
		t.Fatalf("400 body %s", problemMalformed.body)
	}
	for v, want := range map[verdict]*problem{
		badRequest: problemMalformed, headerTooLarge: problemHeaderTooLarge,
		bodyTooLarge: problemBodyTooLarge, lengthRequired: problemLengthRequired,
	} {
		if problemFor(v) != want {
			t.Fatalf("verdict %d maps to %d", v, problemFor(v).status)
		}
	}
}
