package h2

import "encoding/binary"

// Frame layout and protocol constants (RFC 9113 §4, §6, §7).

const (
	frameHeaderLen = 9
	prefixLen      = 5 // the gRPC message prefix: flag and length

	defaultWindow = 65535     // every window's initial size (§6.9.2)
	maxWindow     = 1<<31 - 1 // the largest window (§6.9.1)
	maxStreamID   = 1<<31 - 1 // a drain's first GOAWAY names it (§6.8)
	maxFrameLimit = 1<<24 - 1 // the largest SETTINGS_MAX_FRAME_SIZE (§6.5.2)

	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// drainPing is the payload of the PING a drain sends after its first
	// GOAWAY; its ACK tells that the client has read the GOAWAY.
	drainPing = "tg-drain"
)

// Frame types (§6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags (§6).
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// Settings identifiers (§6.5.2, RFC 8441, RFC 9218).
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
	settingEnableConnect        = 0x8
	settingNoRFC7540Priorities  = 0x9
)

// Error codes (§7).
const (
	errCodeNo                 = 0x0
	errCodeProtocol           = 0x1
	errCodeInternal           = 0x2
	errCodeFlowControl        = 0x3
	errCodeSettingsTimeout    = 0x4
	errCodeStreamClosed       = 0x5
	errCodeFrameSize          = 0x6
	errCodeRefusedStream      = 0x7
	errCodeCancel             = 0x8
	errCodeCompression        = 0x9
	errCodeConnect            = 0xa
	errCodeEnhanceYourCalm    = 0xb
	errCodeInadequateSecurity = 0xc
	errCodeHTTP11Required     = 0xd
)

// gRPC status codes the package answers with itself.
const (
	codeOK                = 0
	codeInvalidArgument   = 3
	codeResourceExhausted = 8
	codeUnimplemented     = 12
	codeInternal          = 13
)

// header is a frame header (§4.1).
type header struct {
	length int
	typ    uint8
	flags  uint8
	id     uint32 // the reserved bit cleared
}

func (h header) has(flag uint8) bool { return h.flags&flag != 0 }

// parseHeader reads the frame header at the start of p, which holds at
// least frameHeaderLen bytes.
func parseHeader(p []byte) header {
	return header{
		length: int(p[0])<<16 | int(p[1])<<8 | int(p[2]),
		typ:    p[3],
		flags:  p[4],
		id:     binary.BigEndian.Uint32(p[5:9]) & (1<<31 - 1),
	}
}

func appendFrameHeader(b []byte, length int, typ, flags uint8, id uint32) []byte {
	if length < 0 || length > maxFrameLimit {
		panic("h2: BUG frame length out of range")
	}
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
}

func appendUint32(b []byte, v uint32) []byte {
	return binary.BigEndian.AppendUint32(b, v)
}

func appendRST(b []byte, id, code uint32) []byte {
	b = appendFrameHeader(b, 4, frameRSTStream, 0, id)
	return appendUint32(b, code)
}

func appendGoAway(b []byte, last, code uint32) []byte {
	b = appendFrameHeader(b, 8, frameGoAway, 0, 0)
	b = appendUint32(b, last)
	return appendUint32(b, code)
}

func appendWindowUpdate(b []byte, id uint32, incr int64) []byte {
	if incr <= 0 || incr > maxWindow {
		panic("h2: BUG window increment out of range")
	}
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, id)
	return appendUint32(b, uint32(incr))
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, id)
	return appendUint32(b, v)
}
