package core

import (
	"testing"

	"github.com/tollgated/tollgated/internal/proptest"
)

// TestMain runs the engine's random sequences 3,000 deep (300 with -short).
func TestMain(m *testing.M) { proptest.Main(m, 3000, 300) }
