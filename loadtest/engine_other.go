//go:build !linux

package loadtest

const (
	haveEpoll     = false
	defaultEngine = EngineGoroutines
)

func (r *run) runClosedEpoll(int) { panic("loadtest: no epoll engine on this system") }
