package loadtest

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestParseMix(t *testing.T) {
	m, err := ParseMix(" check=70, staged=20,admission=0,usage=10 ")
	if err != nil {
		t.Fatal(err)
	}
	want := Mix{{ScenarioCheck, 70}, {ScenarioStaged, 20}, {ScenarioUsage, 10}}
	if !slices.Equal(m, want) || m.String() != "check=70,staged=20,usage=10" {
		t.Errorf("got %v", m)
	}
	for _, bad := range []string{"", "check", "check=x", "check=-1", "mix=1", "bogus=3", "check=0"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestChooserFollowsWeights(t *testing.T) {
	c := newChooser(ScenarioMix, Mix{{ScenarioCheck, 6}, {ScenarioStaged, 3}, {ScenarioUsage, 1}})
	r := rand.New(rand.NewPCG(5, 5))
	counts := map[Scenario]int{}
	for range 100000 {
		counts[c.pick(r)]++
	}
	for s, want := range map[Scenario]int{ScenarioCheck: 60000, ScenarioStaged: 30000, ScenarioUsage: 10000} {
		if d := counts[s] - want; d < -1000 || d > 1000 {
			t.Errorf("%s picked %d times, want about %d", s, counts[s], want)
		}
	}
	single := newChooser(ScenarioAdmission, nil)
	if single.pick(r) != ScenarioAdmission {
		t.Error("single scenario chooser")
	}
}

func TestCheckScenario(t *testing.T) {
	if CheckScenario("mix") != nil || CheckScenario("staged") != nil || CheckScenario("nope") == nil {
		t.Error("CheckScenario")
	}
	if firstKind(ScenarioStaged) != kindAdmit || firstKind(ScenarioUsage) != kindUsage {
		t.Error("firstKind")
	}
}
