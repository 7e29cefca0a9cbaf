package core

// MaxOpClasses bounds a cost table so quoting is a direct index into a small
// array, never a search.
const MaxOpClasses = 256

// OpIndex is the dense index of an operation class in a cost table.
type OpIndex uint16

// WorkItem is one line of a workload: Count items of operation class Op.
type WorkItem struct {
	Op    OpIndex
	Count uint64
}

// OpClass prices one operation class. Using it requires Permission in
// addition to the route's permission.
type OpClass struct {
	Name       string
	Weight     CostUnits
	Permission PermissionSet
}

// CostTable turns a workload into a quote:
// max(Fixed + Σ weight×count, Minimum).
type CostTable struct {
	Classes []OpClass
	Fixed   CostUnits
	Minimum CostUnits
}

// priced is what quoting learns about a workload.
type priced struct {
	quote CostUnits
	items uint64        // Σ count, for the shape check
	perms PermissionSet // union of the classes' permissions
}

// quote prices work. It is O(len(work)) and allocates nothing; a class that
// appears twice is simply summed twice.
func (t *CostTable) quote(work []WorkItem) (priced, DenyReason) {
	var p priced
	var sum CostUnits
	for _, w := range work {
		if int(w.Op) >= len(t.Classes) {
			return p, DenyUnpricedOperation
		}
		if w.Count == 0 {
			continue
		}
		c := &t.Classes[w.Op]
		cost, err := c.Weight.Mul(w.Count)
		if err != nil {
			return p, DenyCostOverflow
		}
		if sum, err = sum.Add(cost); err != nil {
			return p, DenyCostOverflow
		}
		items := p.items + w.Count
		if items < p.items {
			return p, DenyCostOverflow
		}
		p.items = items
		p.perms |= c.Permission
	}
	if p.items == 0 {
		return p, DenyEmptyWorkload
	}
	q, err := t.Fixed.Add(sum)
	if err != nil {
		return p, DenyCostOverflow
	}
	p.quote = max(q, t.Minimum)
	return p, DenyNone
}

// Quote prices work outside the admission path (for previews and tests).
func (t *CostTable) Quote(work []WorkItem) (CostUnits, DenyReason) {
	p, r := t.quote(work)
	return p.quote, r
}

// worstCase is the largest quote a request of at most maxItems items can
// have: Fixed + maxWeight×maxItems, or Minimum if larger.
func (t *CostTable) worstCase(maxItems uint64) (CostUnits, error) {
	var w CostUnits
	for i := range t.Classes {
		w = max(w, t.Classes[i].Weight)
	}
	m, err := w.Mul(maxItems)
	if err != nil {
		return 0, err
	}
	s, err := t.Fixed.Add(m)
	if err != nil {
		return 0, err
	}
	return max(s, t.Minimum), nil
}
