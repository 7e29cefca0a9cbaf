// Package bench holds tollgated's micro-benchmarks of the admission engine
// (run with `make bench`, or `go test -bench . -benchmem ./bench/...`) and,
// under bench/baseline, the bare server the HTTP benchmarks compare against.
// Results and the commands that produced them are in BENCHMARKS.md.
package bench
