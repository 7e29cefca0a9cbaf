package main

import "github.com/tollgated/tollgated/daemon"

// The data directory's layout, the secret's fingerprint and the export
// interval, as this package's tests name them (package daemon keeps them).
const (
	ledgerFile = daemon.LedgerFile
	spoolDir   = daemon.SpoolDir
	secretFile = daemon.SecretFile
	nodeIDFile = daemon.NodeIDFile

	exportInterval = daemon.ExportInterval
)

var secretFingerprint = daemon.SecretFingerprint
