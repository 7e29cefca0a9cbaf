//go:build linux

package loadtest

const (
	haveEpoll     = true
	defaultEngine = EngineEpoll
)
