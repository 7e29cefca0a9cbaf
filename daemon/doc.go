// Package daemon assembles a tollgated node and runs it: Open builds the
// parts in dependency order — the ports, the data directory, the ledger,
// the usage spool, the node's identity, recovery of what a previous run
// left, the plane and its shards, the provisioner, the background work
// (exporter, ledger maintenance, fleet followers), the admin API — and
// serves; Close stops them in the safe order, the reverse of what each
// depends on (docs/DESIGN.md, "Start-up and shutdown").
//
// The command (cmd/tollgated) turns flags and environment into a Config;
// everything past it is here.
package daemon
