// Package h2 is the server side of one HTTP/2 connection (RFC 9113,
// cleartext with prior knowledge) carrying gRPC calls, as a pure state
// machine: bytes in, bytes out, events. It does no I/O, starts no
// goroutine, reads no clock, takes no lock, and in steady state allocates
// nothing per request: a Conn allocates what it needs at NewConn, and the
// loop reuses Conns with Reset.
//
// # Use
//
// The loop owning a connection calls Start at accept and writes what it
// returns. Then, each time the socket has bytes, it calls Step over its
// input buffer until NeedMore, writing out after each call:
//
//	for {
//		n, out, ev = c.Step(in, out)
//		in = in[n:]
//		switch ev {
//		case h2.NeedMore: // read more (a partial frame stays in `in`)
//		case h2.Message, h2.HalfClosed: // look at c.Request(), answer now or later
//		case h2.Closing: // write out, then close
//		}
//	}
//
// Bytes Step consumed may still be referred to by Request().Message until
// the next Step, so the loop keeps its input buffer intact until then.
// The input buffer must hold at least MinInputBytes.
//
// Every stream the loop was given an event for (Message or HalfClosed)
// must get exactly one Answer, Fail or Finish eventually, whether or not
// it is still Live: until then the stream counts against MaxStreams, even
// if the client reset it. That is the defence against rapid reset
// (CVE-2023-44487): a client cannot raise the work in flight by cancelling
// calls the server is still deciding. Answer, Fail, Send and Finish may
// be called at any time between Steps; on a stream no longer live they
// write nothing.
//
// GoAway drains in two steps: its first call sends GOAWAY naming the
// largest stream id and a PING, and the client's ACK of that PING brings
// the final GOAWAY (or the loop calls GoAway again when the client is slow
// to answer). The loop then calls Step (with no input if it has none)
// after answering, to learn Closing once the final GOAWAY is out and the
// last stream is done.
//
// # Streams
//
// The stream table has MaxStreams slots, found by stream id through an
// open-addressed index. A slot is taken by a stream's HEADERS and freed
// once the stream is closed (END_STREAM both ways, or RST_STREAM either
// way) and the loop owes nothing on it. Streams the server reset are
// remembered (a few, in a ring) so that frames the client had already
// sent on them are ignored rather than taken for protocol errors.
//
// # Messages
//
// A request message that arrives whole in one DATA frame while nothing is
// buffered on its stream is delivered in place, aliasing the input. Other
// bytes are copied into the stream's reassembly buffer, taken from the
// connection's spare buffers, and delivered from there, in order. A
// message of a stream that is complete is reported with EndStream; an
// END_STREAM with no message of its own is HalfClosed.
//
// # Flow control
//
// The server advertises a stream window of MaxMessageBytes plus the prefix
// (at least 65535), so no request waits for a WINDOW_UPDATE, and keeps
// the connection window open at twice that (at least 1 MiB), returning
// connection credit as frames are read. Stream credit returns only as
// messages are consumed, so a stream buffers at most its window: a
// connection buffers at most MaxStreams windows (MaxConnBufferBytes).
//
// Answers honour the client's windows and SETTINGS_MAX_FRAME_SIZE: what
// does not fit is held in the stream (at most MaxHeldBytes; Pending sums
// it) and written by a later Step, when a WINDOW_UPDATE or a SETTINGS
// change opens the windows. Trailers wait behind held bytes.
//
// # Errors
//
// Connection errors end with a GOAWAY carrying the code and Closing;
// stream errors with RST_STREAM. Requests that are well-formed HTTP/2 but
// not gRPC get a trailers-only answer: 405 (not POST), 415 (not
// application/grpc), 400 (a malformed grpc-timeout), 431 (a header list
// beyond MaxHeaderListBytes). A compressed message is failed with
// UNIMPLEMENTED (no compression is accepted), a message beyond
// MaxMessageBytes with RESOURCE_EXHAUSTED; each failed stream whose client
// is still sending is then reset with NO_ERROR.
package h2
