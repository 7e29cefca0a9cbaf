// Package decimal reads the unsigned decimal numbers of protocol fields (a
// content-length, a count header, a JSON integer, a protobuf field sent as
// text) in place. strconv wants a string, and its errors allocate; a field
// read on every request must do neither.
package decimal

// MaxDigits is the most digits Uint reads: 19 digits cannot overflow a
// uint64. Callers bound the value (and, where a format asks, the length or
// leading zeros) themselves.
const MaxDigits = 19

// Uint reads b, 1 to MaxDigits ASCII digits and nothing else: no sign, no
// space, no separator.
func Uint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > MaxDigits {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
