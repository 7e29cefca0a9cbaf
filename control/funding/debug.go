package funding

import (
	"fmt"

	"github.com/tollgated/tollgated/core"
)

// Debug describes an account's funding state (for the simulator's failure reports).
func (m *Machine) Debug(id string) string {
	a := m.accounts[core.AccountID(id)]
	if a == nil {
		return "no account"
	}
	s := fmt.Sprintf("active %v calling %v need %d retryAt %d lastDraw %d timerAt %d ev %+v hasEv %v evSpent %d spent %d published %d verified %v wantedAt %d recalledAt %d reclaimAt %d still %v", a.active, a.calling, a.need, a.retryAt, a.lastDraw, a.timerAt, a.ev, a.hasEv, a.evSpent, a.spent, a.published, a.verified, a.wantedAt, a.recalledAt, a.reclaimAt, a.still)
	if a.cur != nil {
		s += fmt.Sprintf(" cur %+v", *a.cur)
	}
	for _, l := range a.retiring {
		s += fmt.Sprintf(" retiring %+v", *l)
	}
	for i, sl := range a.shards {
		s += fmt.Sprintf(" shard%d %+v", i, sl)
	}
	return s
}
