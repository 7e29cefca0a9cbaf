package loadtest

// Engine names how a run drives its connections.
type Engine string

const (
	// EngineEpoll drives every connection of a closed-loop run from one
	// locked thread per CPU with epoll and raw system calls (Linux only;
	// see epoll_linux.go). Open-loop runs use goroutines whatever the
	// engine: their pacing relies on the runtime's timers.
	EngineEpoll Engine = "epoll"
	// EngineGoroutines gives every connection its own goroutine over
	// net.Conn: portable, and a Go scheduler hand-off per response.
	EngineGoroutines Engine = "goroutines"
)
