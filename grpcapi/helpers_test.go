package grpcapi

import (
	"bufio"
	"strings"
)

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// testMaxHeaderBytes is the head bound the tests' servers get: the data
// plane's default.
const testMaxHeaderBytes = 8 << 10
