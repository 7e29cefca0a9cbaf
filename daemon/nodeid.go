package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tollgated/tollgated/ledger"
)

// NodeIDFile keeps the node's id in the data directory, so a node that
// restarts is the same holder of the leases it held (same-node recovery).
const NodeIDFile = "node-id"

// maxNodeID bounds a node id (it is stored on every lease).
const maxNodeID = 64

// storedNodeID is the id the data directory's node-id file holds ("" if
// there is none), checked against --node-id: a data directory belongs to
// one node.
func storedNodeID(cfg Config) (string, error) {
	path := filepath.Join(cfg.DataDir, NodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", err
	}
	stored := strings.TrimSpace(string(b))
	if err := validNodeID(stored); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if cfg.NodeID != "" && cfg.NodeID != stored {
		return "", fmt.Errorf("--node-id %q, but the data directory belongs to node %q (%s): a data directory is one node's", cfg.NodeID, stored, path)
	}
	return stored, nil
}

// newNodeID is a random id, for a data directory started without one.
func newNodeID() (string, error) {
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return "node-" + hex.EncodeToString(r[:]), nil
}

// storeNodeID writes id into the data directory's node-id file, durably.
func storeNodeID(cfg Config, id string) error {
	return writeFileDurably(filepath.Join(cfg.DataDir, NodeIDFile), []byte(id+"\n"), 0o600)
}

func validNodeID(id string) error {
	if id == "" || len(id) > maxNodeID {
		return fmt.Errorf("a node id is 1 to %d characters", maxNodeID)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("node id %q: use letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

// The spool's owner label (spool.SetOwner) names the node and the
// incarnation whose usage the spool holds: "node <id> incarnation <n>".
// It is how a data directory whose node-id file was lost, replaced or
// copied is recognised before its spool is billed under another name.

func ownerLabel(inc ledger.Incarnation) string {
	return "node " + inc.Node + " incarnation " + strconv.FormatUint(inc.Number, 10)
}

// parseOwner reads an owner label.
func parseOwner(label string) (node string, n uint64, err error) {
	f := strings.Fields(label)
	if len(f) == 4 && f[0] == "node" && f[2] == "incarnation" && validNodeID(f[1]) == nil {
		if n, err := strconv.ParseUint(f[3], 10, 64); err == nil && n > 0 {
			return f[1], n, nil
		}
	}
	return "", 0, fmt.Errorf("the usage spool's owner %q is not \"node <id> incarnation <n>\"", label)
}
