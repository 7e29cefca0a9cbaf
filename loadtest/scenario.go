package loadtest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Scenario names what one operation of the load does against tollgated's
// data plane (docs/API.md; ARCHITECTURE §6).
type Scenario string

// Scenarios. An operation of "staged" is three requests in sequence, each
// one needing the previous answer; every other scenario is one request.
const (
	// ScenarioCheck is POST /v1/check with a workload body and the account key.
	ScenarioCheck Scenario = "check"
	// ScenarioStaged is POST /v1/admit, then /v1/commit with the returned
	// reservation, then /v1/finish billing the quote.
	ScenarioStaged Scenario = "staged"
	// ScenarioAdmission is the seed-000 GET /v1/admission?agent_id=… with a
	// platform token and tenancy headers.
	ScenarioAdmission Scenario = "admission"
	// ScenarioUsage is POST /v1/usage with a batch of events with unique ids.
	ScenarioUsage Scenario = "usage"
	// ScenarioMix picks one of the above per operation by weight.
	ScenarioMix Scenario = "mix"
)

// kind is one endpoint; latency and counts are kept per kind.
type kind uint8

const (
	kindCheck kind = iota
	kindAdmit
	kindCommit
	kindFinish
	kindAdmission
	kindUsage
	numKinds
)

var kindNames = [numKinds]string{"check", "admit", "commit", "finish", "admission", "usage"}

func (k kind) String() string { return kindNames[k] }

// firstKind is the first request of an operation of scenario s.
func firstKind(s Scenario) kind {
	switch s {
	case ScenarioStaged:
		return kindAdmit
	case ScenarioAdmission:
		return kindAdmission
	case ScenarioUsage:
		return kindUsage
	default:
		return kindCheck
	}
}

// MixEntry is one weighted scenario of a mix.
type MixEntry struct {
	Scenario Scenario
	Weight   int
}

// Mix is a weighted choice of scenarios.
type Mix []MixEntry

// DefaultMix is used by ScenarioMix when no mix is given: mostly one-shot
// checks, as a gateway would send, with some staged traffic and a little
// seed-000 admission and usage.
var DefaultMix = Mix{
	{ScenarioCheck, 70},
	{ScenarioStaged, 20},
	{ScenarioAdmission, 5},
	{ScenarioUsage, 5},
}

// ParseMix parses "check=70,staged=20,admission=5,usage=5".
func ParseMix(s string) (Mix, error) {
	var m Mix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("mix %q: want name=weight", part)
		}
		sc := Scenario(strings.TrimSpace(name))
		if err := checkSingleScenario(sc); err != nil {
			return nil, fmt.Errorf("mix: %w", err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("mix %q: weight must be a non-negative integer", part)
		}
		if n > 0 {
			m = append(m, MixEntry{sc, n})
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("mix %q: no scenario with a positive weight", s)
	}
	return m, nil
}

func (m Mix) String() string {
	parts := make([]string, len(m))
	for i, e := range m {
		parts[i] = fmt.Sprintf("%s=%d", e.Scenario, e.Weight)
	}
	return strings.Join(parts, ",")
}

func checkSingleScenario(s Scenario) error {
	switch s {
	case ScenarioCheck, ScenarioStaged, ScenarioAdmission, ScenarioUsage:
		return nil
	}
	return fmt.Errorf("unknown scenario %q (want check, staged, admission or usage)", s)
}

// CheckScenario reports whether s is a known scenario.
func CheckScenario(s Scenario) error {
	if s == ScenarioMix {
		return nil
	}
	return checkSingleScenario(s)
}

// chooser picks the scenario of each new operation.
type chooser struct {
	scenarios []Scenario
	cum       []int // cumulative weights
}

func newChooser(s Scenario, m Mix) chooser {
	if s != ScenarioMix {
		return chooser{scenarios: []Scenario{s}, cum: []int{1}}
	}
	if len(m) == 0 {
		m = DefaultMix
	}
	var c chooser
	total := 0
	for _, e := range m {
		total += e.Weight
		c.scenarios = append(c.scenarios, e.Scenario)
		c.cum = append(c.cum, total)
	}
	return c
}

func (c *chooser) pick(r *rand.Rand) Scenario {
	if len(c.scenarios) == 1 {
		return c.scenarios[0]
	}
	x := r.IntN(c.cum[len(c.cum)-1])
	return c.scenarios[sort.SearchInts(c.cum, x+1)]
}

// op is one operation in progress on a connection. Ops are recycled per
// connection, so the reservation buffer is reused.
type op struct {
	scenario    Scenario
	next        kind  // the request to send next
	account     int   // index into the account list
	start       int64 // ns since run start when the first request was due
	due         int64 // ns since run start when the next request became due
	first       bool  // next is the operation's first request
	reservation []byte
	quote       int64
}
