package control

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrIdentity marks a start refused because the data directory's node
// identity does not add up; the message says the way out.
var ErrIdentity = errors.New("the data directory's node identity does not add up")

// SpoolIdentity is what an opened usage spool says of its node: the
// owner's node id and incarnation, or, for a spool without an owner,
// whether it holds anything (a spool from before owners did).
type SpoolIdentity struct {
	Node        string // "" without an owner
	Incarnation uint64
	Used        bool // records or a released mark: the spool has been used
}

// MatchSpool checks a start's node id (from the node-id file or the
// operator; "" when neither gives one) against the spool of the data
// directory dataDir, and returns the incarnation the spool belongs to (0:
// an empty spool, a new data directory or a lost one). A spool written
// before owners existed is adopted as incarnation 1 of the node whose id
// file sits beside it. A spool that belongs to a node is never billed
// under another id, or under a new one when the id file is lost: that
// would bill it a second time under a new export mark.
func MatchSpool(dataDir, spoolDir, idFile, id string, si SpoolIdentity) (uint64, error) {
	spoolPath, idPath := filepath.Join(dataDir, spoolDir), filepath.Join(dataDir, idFile)
	switch {
	case si.Node != "" && id == "":
		return 0, fmt.Errorf("%w: the usage spool in %s belongs to node %q, but %s has no node-id file (lost, or the data directory was restored or copied without it): "+
			"starting under a new id would bill the spool a second time. Start with --node-id %s (or restore %s), see docs/RUNBOOK.md",
			ErrIdentity, spoolPath, si.Node, dataDir, si.Node, idPath)
	case si.Node != "" && id != si.Node:
		return 0, fmt.Errorf("%w: the usage spool in %s belongs to node %q, but this start's node id is %q: billing it under another id would bill it a second time. "+
			"Start with --node-id %s and its own node-id file, or give node %q an empty data directory of its own (docs/RUNBOOK.md)",
			ErrIdentity, spoolPath, si.Node, id, si.Node, id)
	case si.Node != "":
		return si.Incarnation, nil
	case si.Used && id == "":
		return 0, fmt.Errorf("%w: the usage spool in %s holds usage, but %s has no node-id file to say whose: start with --node-id set to the id this data directory ran under (see docs/RUNBOOK.md)",
			ErrIdentity, spoolPath, dataDir)
	case si.Used:
		return 1, nil
	}
	return 0, nil
}
