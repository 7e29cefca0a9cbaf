package h2

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tollgated/tollgated/hpack"
)

// Bounds. Each one says what happens when a peer reaches it.
const (
	// MaxFrameBytes is the largest frame payload accepted: the protocol's
	// default SETTINGS_MAX_FRAME_SIZE, which the server never raises. A
	// larger frame is a connection error (FRAME_SIZE_ERROR).
	MaxFrameBytes = 16384

	// MinInputBytes is the least input buffer the loop must offer Step: one
	// whole frame, header and largest payload. Step consumes whole frames
	// only, so a smaller buffer could stall on a frame it can never hold.
	MinInputBytes = frameHeaderLen + MaxFrameBytes

	// MaxStreamsLimit bounds Config.MaxStreams. The stream table holds
	// MaxStreams slots, made at NewConn.
	MaxStreamsLimit = 1024

	// MaxMessageLimit bounds Config.MaxMessageBytes.
	MaxMessageLimit = 16 << 20

	// MinHeaderListBytes and MaxHeaderListLimit bound
	// Config.MaxHeaderListBytes. The connection holds a decoded list of
	// that size and a header block buffer of twice it (headerBlockBytes).
	MinHeaderListBytes = 1 << 10
	MaxHeaderListLimit = 1 << 20

	// MaxStatusMessageBytes bounds a grpc-message: a longer status
	// message given to Fail or Finish is cut to this many bytes (at a
	// UTF-8 boundary) before it is percent-encoded, so a trailer block
	// stays well under the smallest frame a peer may allow.
	MaxStatusMessageBytes = 1024

	// DefaultMaxHeldBytes is Config.MaxHeldBytes when it is 0, unless
	// MaxMessageBytes with its prefix is larger: then that.
	DefaultMaxHeldBytes = 1 << 20

	// MaxConnBufferBytes bounds what one connection may be made to buffer
	// for reassembly: MaxStreams times the stream window (initialWindow).
	// Config.Validate refuses configurations beyond it.
	MaxConnBufferBytes = 1 << 30

	// retainBytes bounds the capacity of the spare buffers a connection
	// keeps for reuse (reassembly and held answers); a buffer freed beyond
	// it is left to the collector.
	retainBytes = 1 << 20

	// recentResets is how many streams reset by the server are
	// remembered, so that a HEADERS (trailers) the peer had already sent
	// on one is ignored rather than taken for a reused stream id, which is
	// a connection error. A peer sending trailers on an older reset stream
	// loses its connection.
	recentResets = 32

	// maxTimeoutDigits is the longest grpc-timeout value (gRPC spec).
	maxTimeoutDigits = 8
)

// Config is what a Conn is made with. It is read at NewConn only.
type Config struct {
	// Methods are the gRPC paths served ("/pkg.Service/Method"). A
	// stream's :path is resolved to its index here when its headers
	// arrive, -1 if not listed; the loop decides what to answer then.
	Methods []string

	// MaxStreams is SETTINGS_MAX_CONCURRENT_STREAMS, 1..MaxStreamsLimit.
	// A stream opened beyond it is refused (RST_STREAM REFUSED_STREAM). A
	// stream counts from its HEADERS until it is closed and the loop no
	// longer owes its answer: a stream the client resets after it was
	// handed to the loop counts until the loop calls Answer, Fail or
	// Finish on it.
	MaxStreams uint32

	// MaxMessageBytes is the largest request message, without the 5-byte
	// gRPC prefix, 1..MaxMessageLimit. A stream announcing a larger one is
	// failed with RESOURCE_EXHAUSTED and reset.
	MaxMessageBytes int

	// MaxHeaderListBytes is SETTINGS_MAX_HEADER_LIST_SIZE, advertised and
	// enforced, MinHeaderListBytes..MaxHeaderListLimit. A request whose
	// header list is larger is failed with RESOURCE_EXHAUSTED; a header
	// block (HEADERS and CONTINUATIONs, frame headers counted) longer than
	// twice it ends the connection (ENHANCE_YOUR_CALM).
	MaxHeaderListBytes int

	// HeaderTableBytes is SETTINGS_HEADER_TABLE_SIZE advertised, at most
	// hpack.MaxTableBytes; 0 means 4096, the protocol's default.
	HeaderTableBytes uint32

	// MaxHeldBytes bounds the answer bytes one stream may hold back while
	// the client's flow-control windows are closed; 0 means
	// DefaultMaxHeldBytes, or MaxMessageBytes plus the prefix if larger,
	// so an answer as large as the largest request always fits. An
	// answer that would hold more resets the stream (RST_STREAM
	// INTERNAL_ERROR) and is dropped.
	MaxHeldBytes int
}

// Validate reports whether c is usable.
func (c *Config) Validate() error {
	if c.MaxStreams < 1 || c.MaxStreams > MaxStreamsLimit {
		return fmt.Errorf("h2: MaxStreams %d outside 1..%d", c.MaxStreams, MaxStreamsLimit)
	}
	if c.MaxMessageBytes < 1 || c.MaxMessageBytes > MaxMessageLimit {
		return fmt.Errorf("h2: MaxMessageBytes %d outside 1..%d", c.MaxMessageBytes, MaxMessageLimit)
	}
	if c.MaxHeaderListBytes < MinHeaderListBytes || c.MaxHeaderListBytes > MaxHeaderListLimit {
		return fmt.Errorf("h2: MaxHeaderListBytes %d outside %d..%d",
			c.MaxHeaderListBytes, MinHeaderListBytes, MaxHeaderListLimit)
	}
	if c.HeaderTableBytes > hpack.MaxTableBytes {
		return fmt.Errorf("h2: HeaderTableBytes %d above %d", c.HeaderTableBytes, hpack.MaxTableBytes)
	}
	if c.MaxHeldBytes < 0 {
		return errors.New("h2: negative MaxHeldBytes")
	}
	if int64(c.MaxStreams)*int64(initialWindow(c.MaxMessageBytes)) > MaxConnBufferBytes {
		return fmt.Errorf("h2: MaxStreams × stream window (%d × %d) above %d",
			c.MaxStreams, initialWindow(c.MaxMessageBytes), MaxConnBufferBytes)
	}
	seen := make(map[string]bool, len(c.Methods))
	for _, m := range c.Methods {
		if !strings.HasPrefix(m, "/") || len(m) < 2 {
			return fmt.Errorf("h2: method %q is not a path", m)
		}
		if seen[m] {
			return fmt.Errorf("h2: method %q listed twice", m)
		}
		seen[m] = true
	}
	return nil
}

// initialWindow is the SETTINGS_INITIAL_WINDOW_SIZE advertised: room for
// the largest message with its prefix, so a unary request never waits for
// a WINDOW_UPDATE, and never less than the protocol's default.
func initialWindow(maxMessage int) int64 {
	return max(int64(maxMessage)+prefixLen, defaultWindow)
}

// connWindow is the connection receive window kept open: twice the stream
// window, at least 1 MiB. It is replenished as frames are read (not as
// messages are consumed: per-stream windows bound the buffering), so it
// never holds a stream back for long.
func connWindow(streamWindow int64) int64 {
	return min(max(2*streamWindow, 1<<20), maxWindow)
}

func (c *Config) headerTableBytes() uint32 {
	if c.HeaderTableBytes == 0 {
		return 4096
	}
	return c.HeaderTableBytes
}

func (c *Config) maxHeld() int {
	if c.MaxHeldBytes == 0 {
		return max(DefaultMaxHeldBytes, c.MaxMessageBytes+prefixLen)
	}
	return c.MaxHeldBytes
}

// headerBlockBytes bounds an accumulated header block (frame headers
// counted, so that a flood of empty CONTINUATIONs is bounded too). An
// encoder that never spends more octets than a field's name and value on
// it (as every common one does) stays under twice the list bound; at least
// one frame, so a block in one HEADERS is never refused for its length.
func (c *Config) headerBlockBytes() int {
	return max(2*c.MaxHeaderListBytes, frameHeaderLen+MaxFrameBytes)
}
