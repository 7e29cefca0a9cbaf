package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// nodeIDFile keeps the node's id in the data directory, so a node that
// restarts is the same holder of the leases it held (same-node recovery).
const nodeIDFile = "node-id"

// maxNodeID bounds a node id (it is stored on every lease).
const maxNodeID = 64

// nodeIdentity is --node-id, checked against the data directory's: a data
// directory belongs to one node. Without the flag it is the stored one, or
// a new random one stored on first start.
func nodeIdentity(cfg config) (string, error) {
	path := filepath.Join(cfg.dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		stored := strings.TrimSpace(string(b))
		if err := validNodeID(stored); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if cfg.nodeID != "" && cfg.nodeID != stored {
			return "", fmt.Errorf("--node-id %q, but the data directory belongs to node %q (%s): a data directory is one node's", cfg.nodeID, stored, path)
		}
		return stored, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	id := cfg.nodeID
	if id == "" {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		id = "node-" + hex.EncodeToString(r[:])
	}
	if err := validNodeID(id); err != nil {
		return "", fmt.Errorf("--node-id: %w", err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", err
	}
	return id, nil
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
