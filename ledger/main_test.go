package ledger

import (
	"testing"

	"github.com/tollgated/tollgated/internal/proptest"
)

// TestMain runs the money rules' random sequences 1,000 deep (200 with -short).
func TestMain(m *testing.M) { proptest.Main(m, 1000, 200) }
